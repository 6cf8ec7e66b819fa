//! A node's data directory: its key, the overlay's token and the members last seen.

use super::{IoStep, Node, NodeError};
use crate::net::token::JoinToken;
use crate::proto::Liveness;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Files in a node's data directory.
pub mod files {
    /// The node's private key (PEM); its id derives from it.
    pub const KEY: &str = "node.key";
    /// The overlay's join token.
    pub const TOKEN: &str = "token";
    /// Addresses of members last seen, to rejoin after a restart.
    pub const PEERS: &str = "peers.json";
    /// The admin socket of the running node.
    pub const ADMIN: &str = "admin.sock";
}

pub(super) fn read_token(dir: &Path) -> Result<Option<JoinToken>, NodeError> {
    match std::fs::read_to_string(dir.join(files::TOKEN)) {
        Ok(s) => Ok(Some(s.parse()?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(NodeError::Io {
            what: IoStep::ReadToken(dir.join(files::TOKEN)),
            source,
        }),
    }
}

pub(super) fn write_token(dir: &Path, token: &JoinToken) -> std::io::Result<()> {
    let path = dir.join(files::TOKEN);
    std::fs::write(&path, format!("{token}\n"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

pub(super) fn read_peers(dir: &Path) -> Vec<SocketAddr> {
    std::fs::read_to_string(dir.join(files::PEERS))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

/// Every few seconds, remembers where live members listen (for a rejoin after restart).
pub(super) async fn save_peers(node: Node, dir: PathBuf) {
    let mut last = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let Ok(status) = node.status().await else {
            return;
        };
        let mut addrs: Vec<SocketAddr> = status
            .members
            .iter()
            .filter(|m| m.id != node.id && m.state == Liveness::Alive)
            .map(|m| m.addr)
            .collect();
        addrs.sort();
        if addrs != last && !addrs.is_empty() {
            let tmp = dir.join(format!("{}.tmp", files::PEERS));
            let json = serde_json::to_string(&addrs).unwrap_or_default();
            if std::fs::write(&tmp, json).is_ok() {
                let _ = std::fs::rename(&tmp, dir.join(files::PEERS));
            }
            last = addrs;
        }
    }
}
