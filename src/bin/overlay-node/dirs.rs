//! Where a node keeps its state: `--data-dir`, else `OVERLAY_DATA_DIR`, else the
//! `data_dir` of the `--config` file (or `OVERLAY_CONFIG`), else the user's state directory
//! (`$XDG_STATE_HOME/overlay-node`, or `~/.local/state/overlay-node`). Every command takes
//! these, so `status` finds the node that `overlay-node --config FILE` started.

use anyhow::bail;
use std::path::PathBuf;

/// The data directory options every command shares.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DataDirArg {
    /// TOML config file: a node's settings (see `config print`); commands read its
    /// `data_dir` (flags and environment win over it).
    #[arg(long, env = "OVERLAY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The node's data directory (its key, token, settings and admin socket) [default:
    /// $XDG_STATE_HOME/overlay-node, or ~/.local/state/overlay-node]
    #[arg(long, env = "OVERLAY_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl DataDirArg {
    /// The directory given, else the config file's, else the default one.
    pub fn resolve(&self) -> anyhow::Result<PathBuf> {
        if let Some(dir) = &self.data_dir {
            return Ok(dir.clone());
        }
        if let Some(path) = &self.config
            && let Some(dir) = crate::settings::load(path)?.data_dir
        {
            return Ok(dir);
        }
        default_data_dir()
    }
}

/// The per-user default data directory.
pub fn default_data_dir() -> anyhow::Result<PathBuf> {
    let from = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(state) = from("XDG_STATE_HOME").filter(|p| p.is_absolute()) {
        return Ok(state.join("overlay-node"));
    }
    if let Some(home) = from("HOME") {
        return Ok(home.join(".local/state/overlay-node"));
    }
    bail!(
        "no data directory: give --data-dir DIR or set OVERLAY_DATA_DIR (neither XDG_STATE_HOME nor HOME is set)"
    )
}
