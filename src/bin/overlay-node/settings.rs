//! The settings of a running node, merged from three places: a flag wins over its
//! `OVERLAY_*` environment variable, which wins over the config file (`--config FILE`,
//! TOML, the same names with `_` for `-`); what none of them gives comes from the data
//! directory (the address and name of the last start) or the defaults.
//!
//! ```toml
//! listen = "0.0.0.0:7400"
//! advertise = "192.0.2.10:7400"
//! join = ["192.0.2.1:7400", "192.0.2.2:7400"]
//! token_file = "/etc/overlay/token"
//! data_dir = "/var/lib/overlay"
//! name = "worker-3"
//! log_format = "json"
//! threads = 1
//! shared_trees_from = 1000
//! sweep_limit = 256
//! ```

use crate::dirs::DataDirArg;
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The listen address when neither the flags nor the data directory give one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7400";

/// Runtime threads when the settings give none: see [`RunArgs::threads`].
pub const DEFAULT_THREADS: u16 = 1;
/// The most runtime threads a node may be given.
pub const MAX_THREADS: u16 = 1024;

/// Log line formats.
#[derive(clap::ValueEnum, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (coloured only on a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Options of a running node (each also `OVERLAY_<NAME>` in the environment, or `name` in
/// the `--config` file; flags win).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// Address to listen on for peers (UDP, QUIC) [default: the last start's, else
    /// 127.0.0.1:7400]
    #[arg(long, env = "OVERLAY_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// The address other members reach this node at, if not the listen address (needed
    /// with --listen 0.0.0.0:P when there is no --join to pick the interface from).
    #[arg(long, env = "OVERLAY_ADVERTISE", value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// Join the overlay through the member at HOST:PORT (repeat, or separate with commas,
    /// to give fallbacks).
    #[arg(
        long,
        env = "OVERLAY_JOIN",
        value_name = "HOST:PORT",
        value_delimiter = ','
    )]
    pub join: Vec<String>,
    /// The overlay's join token (printed by its first node). Visible to other users in
    /// `ps`: prefer OVERLAY_TOKEN or --token-file.
    #[arg(
        long,
        env = "OVERLAY_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Read the join token from this file.
    #[arg(
        long,
        env = "OVERLAY_TOKEN_FILE",
        value_name = "FILE",
        conflicts_with = "token"
    )]
    pub token_file: Option<PathBuf>,
    #[command(flatten)]
    pub dir: DataDirArg,
    /// A readable name shown to other members [default: the last start's, else the
    /// node's short id]
    #[arg(long, env = "OVERLAY_NAME")]
    pub name: Option<String>,
    /// Log line format [default: text]
    #[arg(long, env = "OVERLAY_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Give up joining after this many seconds [default: keep trying, with backoff; an
    /// address whose port is closed for three rounds in a row still fails at once]
    #[arg(long, env = "OVERLAY_JOIN_TIMEOUT", value_name = "SECONDS")]
    pub join_timeout: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, env = "OVERLAY_METRICS", value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Serve the live web view at http://ADDR/ (with the metrics at /metrics).
    #[arg(long, env = "OVERLAY_HTTP", value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Threads that run the node [default: 1]. A node is mostly idle between short
    /// messages: on one thread a packet wakes no other, and a settled node of 40 used a
    /// third less CPU than on two. Give more for bulk transfers on fast links.
    #[arg(long, env = "OVERLAY_THREADS", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=MAX_THREADS as i64))]
    pub threads: Option<u16>,
    /// From this many members on, the roots of one discovered cluster share their tree
    /// outside it: a node keeps its cluster's trees and one per other cluster (for
    /// overlays of thousands; every node of an overlay should give the same value)
    /// [default: a tree per member]
    #[arg(long, env = "OVERLAY_SHARED_TREES_FROM", value_name = "MEMBERS", value_parser = clap::value_parser!(u32).range(2..))]
    pub shared_trees_from: Option<u32>,
    /// Measure a random sample of this many members, then only where cluster discovery
    /// points (the node's cluster, one member of each other) [default: every member]
    #[arg(long, env = "OVERLAY_SWEEP_LIMIT", value_name = "MEMBERS", value_parser = clap::value_parser!(u32).range(1..))]
    pub sweep_limit: Option<u32>,
}

/// The config file, and the effective settings `config print` shows.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Listen address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Advertised address (HOST:PORT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise: Option<String>,
    /// Join addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub join: Vec<String>,
    /// File holding the join token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// Data directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// Readable name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Log format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    /// Join timeout, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join_timeout: Option<u64>,
    /// Metrics address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<SocketAddr>,
    /// Web view address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<SocketAddr>,
    /// Runtime threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u16>,
    /// Members from which trees are shared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_trees_from: Option<u32>,
    /// Members the first sweep measures at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep_limit: Option<u32>,
}

/// Effective settings and the token given on the command line or in the environment
/// (kept apart so `config print` never shows it).
pub struct Resolved {
    pub settings: Settings,
    pub token: Option<String>,
}

impl RunArgs {
    /// Merges the flags (and environment) over the config file; fills the data directory
    /// and, from the data directory, the listen address and name of the last start.
    pub fn resolve(&self) -> anyhow::Result<Resolved> {
        let file = match &self.dir.config {
            Some(path) => load(path)?,
            None => Settings::default(),
        };
        let data_dir = match self.dir.data_dir.clone().or(file.data_dir.clone()) {
            Some(d) => d,
            None => crate::dirs::default_data_dir()?,
        };
        let settings = Settings {
            listen: self.listen.or(file.listen),
            advertise: self.advertise.clone().or(file.advertise),
            join: if self.join.is_empty() {
                file.join
            } else {
                self.join.clone()
            },
            token_file: self.token_file.clone().or(file.token_file),
            data_dir: Some(data_dir),
            name: self.name.clone().or(file.name),
            log_format: self.log_format.or(file.log_format),
            join_timeout: self.join_timeout.or(file.join_timeout),
            metrics: self.metrics.or(file.metrics),
            http: self.http.or(file.http),
            threads: self.threads.or(file.threads),
            shared_trees_from: self.shared_trees_from.or(file.shared_trees_from),
            sweep_limit: self.sweep_limit.or(file.sweep_limit),
        };
        match settings.threads {
            Some(0) => bail!("threads = 0 in the config file: a node needs at least one thread"),
            Some(n) if n > MAX_THREADS => {
                bail!("threads = {n} in the config file: at most {MAX_THREADS}")
            }
            _ => {}
        }
        if settings.shared_trees_from.is_some_and(|n| n < 2) {
            bail!(
                "shared_trees_from below 2 in the config file: trees are shared among two members at least"
            );
        }
        if settings.sweep_limit == Some(0) {
            bail!("sweep_limit = 0 in the config file: the sweep measures one member at least");
        }
        if self.token.is_some() && settings.token_file.is_some() {
            bail!(
                "give the token either with --token/OVERLAY_TOKEN or with --token-file, not both"
            );
        }
        Ok(Resolved {
            settings,
            token: self.token.clone(),
        })
    }
}

/// Reads a config file.
pub fn load(path: &Path) -> anyhow::Result<Settings> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--config {}: cannot read", path.display()))?;
    toml::from_str(&text)
        .with_context(|| format!("--config {}: not a valid config", path.display()))
}

/// Reads the join token from a file: its first non-empty line.
pub fn read_token_file(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--token-file {}: cannot read", path.display()))?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
        .with_context(|| format!("--token-file {}: the file is empty", path.display()))
}

/// Options of `config print`.
#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    action: ConfigAction,
}

#[derive(clap::Subcommand, Debug)]
enum ConfigAction {
    /// Print the settings a node started with these options would use, as TOML.
    Print(RunArgs),
}

pub fn run(args: ConfigArgs) -> anyhow::Result<()> {
    let ConfigAction::Print(run) = args.action;
    let Resolved {
        mut settings,
        token,
    } = run.resolve()?;
    let dir = settings.data_dir.clone().unwrap_or_default();
    let stored = overlay::api::stored_settings(&dir)?;
    // As the node does: a stored advertised address goes with the stored listen address.
    if settings.listen.is_none() {
        settings.listen = Some(stored.listen.unwrap_or(DEFAULT_LISTEN.parse()?));
        if settings.advertise.is_none() {
            settings.advertise = stored.advertise.map(|a| a.to_string());
        }
    }
    if settings.name.is_none() {
        settings.name = stored.name;
    }
    settings.log_format.get_or_insert_default();
    settings.threads.get_or_insert(DEFAULT_THREADS);
    print!("{}", toml::to_string(&settings)?);
    if settings.join_timeout.is_none() {
        println!("# join_timeout: none (keeps trying to join, with backoff)");
    }
    if token.is_some() {
        println!("# token: given on the command line or in OVERLAY_TOKEN (not shown)");
    }
    Ok(())
}
