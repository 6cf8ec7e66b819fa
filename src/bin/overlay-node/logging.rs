//! Log set-up: `RUST_LOG` filters (default `info`, quinn and rustls at `warn`); text lines
//! are coloured only when stderr is a terminal; `--log-format json` writes one JSON object
//! per line with the node's span (its short id) on every line of the node.

use crate::settings::LogFormat;
use std::io::IsTerminal;

pub fn init(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{default_level},quinn=warn,rustls=warn"))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}
