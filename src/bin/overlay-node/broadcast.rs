//! `overlay-node broadcast`: broadcast a text or a file from a running node along its tree.

use anyhow::{Context, bail};
use overlay::admin::broadcast;
use overlay::proto::collective::MAX_STREAM_PAYLOAD;
use std::path::PathBuf;

/// Options of `broadcast`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["file", "text"])))]
pub struct BroadcastArgs {
    #[command(flatten)]
    dir: crate::dirs::DataDirArg,
    /// Broadcast this file's bytes (up to 1 GiB; large ones are striped over several
    /// trees by the node's measured bandwidths).
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Broadcast this text.
    #[arg(long, value_name = "TEXT")]
    text: Option<String>,
    /// Print one JSON object: op, bytes, delivered, missing, elapsed_ms, mbit_per_s.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: BroadcastArgs) -> anyhow::Result<()> {
    let payload = match (&args.file, args.text) {
        (Some(f), _) => {
            // Refuse an oversized file before reading it into memory.
            let len = std::fs::metadata(f)
                .with_context(|| format!("cannot read {}", f.display()))?
                .len();
            if len > MAX_STREAM_PAYLOAD {
                bail!("payload of {len} bytes exceeds the limit of {MAX_STREAM_PAYLOAD} bytes");
            }
            std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?
        }
        (None, Some(t)) => t.into_bytes(),
        (None, None) => bail!("give --file or --text"),
    };
    if payload.len() as u64 > MAX_STREAM_PAYLOAD {
        bail!(
            "payload of {} bytes exceeds the limit of {MAX_STREAM_PAYLOAD} bytes",
            payload.len()
        );
    }
    let r = broadcast(&args.dir.resolve()?, &payload).await?;
    let elapsed_ms = r.elapsed.as_secs_f64() * 1e3;
    let mbit_per_s = payload.len() as f64 * 8.0 / r.elapsed.as_secs_f64().max(1e-9) / 1e6;
    if args.json {
        let out = serde_json::json!({
            "op": format!("{:016x}", r.op),
            "bytes": payload.len(),
            "mbit_per_s": mbit_per_s,
            "delivered": r.delivered,
            "missing": r.missing,
            "elapsed_ms": elapsed_ms,
        });
        println!("{}", crate::json::tidy(out));
    } else {
        println!(
            "broadcast {:016x}: {} bytes delivered to {} members in {elapsed_ms:.1} ms \
             ({mbit_per_s:.2} Mbit/s)",
            r.op,
            payload.len(),
            r.delivered.len()
        );
        if !r.missing.is_empty() {
            let ids: Vec<String> = r.missing.iter().map(|m| m.short()).collect();
            println!("missing: {}", ids.join(" "));
        }
    }
    Ok(())
}
