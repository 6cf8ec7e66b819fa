//! Where a node keeps its state: `--data-dir`, else `OVERLAY_DATA_DIR`, else the user's
//! state directory (`$XDG_STATE_HOME/overlay-node`, or `~/.local/state/overlay-node`).

use anyhow::bail;
use std::path::PathBuf;

/// The data directory option every command shares.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DataDirArg {
    /// The node's data directory (its key, token, settings and admin socket) [default:
    /// $XDG_STATE_HOME/overlay-node, or ~/.local/state/overlay-node]
    #[arg(long, env = "OVERLAY_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl DataDirArg {
    /// The directory given, else the default one.
    pub fn resolve(&self) -> anyhow::Result<PathBuf> {
        match &self.data_dir {
            Some(dir) => Ok(dir.clone()),
            None => default_data_dir(),
        }
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
