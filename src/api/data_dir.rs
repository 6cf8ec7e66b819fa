//! A node's data directory: its key, the overlay's token, the members last seen, the
//! settings the node was started with, and the lock that keeps a second process out.
//!
//! Everything in it is private to the user running the node: the directory is made 0700
//! and the files 0600 whatever the umask, and secrets are created with that mode rather
//! than chmod-ed after they were written.

use super::{IoStep, Node, NodeError};
use crate::net::token::JoinToken;
use crate::proto::Liveness;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Files in a node's data directory.
pub mod files {
    /// The node's private key (PEM); its id derives from it.
    pub const KEY: &str = "node.key";
    /// The overlay's join token.
    pub const TOKEN: &str = "token";
    /// The generation of the join token (changed by each rotation).
    pub const TOKEN_GENERATION: &str = "token.generation";
    /// The join token before the last rotation (members that missed it still prove it).
    pub const TOKEN_PREVIOUS: &str = "token.previous";
    /// Addresses of members last seen, to rejoin after a restart.
    pub const PEERS: &str = "peers.json";
    /// The admin socket of the running node.
    pub const ADMIN: &str = "admin.sock";
    /// Held locked by the running node; holds its process id.
    pub const LOCK: &str = "lock";
    /// The listen address, advertised address and name of the last start.
    pub const SETTINGS: &str = "node.json";
}

/// What a node keeps of how it was started, so that a restart with nothing but the data
/// directory comes back on the same address under the same name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSettings {
    /// The address the node was bound to (the port actually bound, not 0).
    pub listen: Option<SocketAddr>,
    /// The address other members were told to reach it at.
    pub advertise: Option<SocketAddr>,
    /// Its readable name.
    pub name: Option<String>,
}

/// The exclusive lock on a data directory; released when dropped (or when the process
/// ends, however it ends: the kernel drops `flock` locks with the descriptor).
#[derive(Debug)]
pub(super) struct DirLock {
    _file: File,
}

/// Creates `dir` (0700) if needed and takes its lock, or says which process holds it.
pub(super) fn lock(dir: &Path) -> Result<DirLock, NodeError> {
    create_private_dir(dir).map_err(|source| NodeError::Io {
        what: IoStep::CreateDataDir(dir.to_path_buf()),
        source,
    })?;
    let path = dir.join(files::LOCK);
    let io = |source| NodeError::Io {
        what: IoStep::Lock(path.clone()),
        source,
    };
    let mut file = private_options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    if !try_lock_exclusive(&file).map_err(io)? {
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        return Err(NodeError::DataDirInUse {
            dir: dir.to_path_buf(),
            pid: text.trim().parse().ok(),
        });
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    writeln!(file, "{}", std::process::id()).map_err(io)?;
    Ok(DirLock { _file: file })
}

#[cfg(unix)]
fn try_lock_exclusive(file: &File) -> std::io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock only reads the descriptor, which `file` keeps open for the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}

#[cfg(not(unix))]
fn try_lock_exclusive(_file: &File) -> std::io::Result<bool> {
    Ok(true)
}

/// Creates `dir` and its parents; the data directory itself ends up 0700 even if it
/// existed with wider permissions (it holds the node's key and the overlay's token).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        builder.mode(0o700);
        builder.create(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
    }
    #[cfg(not(unix))]
    builder.create(dir)
}

/// Open options that create files 0600 (before any byte is written).
fn private_options() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

/// Writes `bytes` to `dir/name` atomically (a 0600 temporary file renamed over it).
fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut file = private_options().write(true).create_new(true).open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))
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
    write_private(dir, files::TOKEN, format!("{token}\n").as_bytes())
}

/// The stored token's generation (0 when none is stored or it does not parse: the token
/// was never rotated, or came from outside).
pub(super) fn read_token_generation(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join(files::TOKEN_GENERATION))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The token before the last rotation, if one is stored.
pub(super) fn read_token_previous(dir: &Path) -> Option<JoinToken> {
    std::fs::read_to_string(dir.join(files::TOKEN_PREVIOUS))
        .ok()?
        .parse()
        .ok()
}

/// Stores the current token, its generation and the previous token (the token first: a
/// crash between the writes leaves the new token with an older generation, which only
/// makes it lose ties).
pub(super) fn write_rotated_token(
    dir: &Path,
    token: &JoinToken,
    generation: u64,
    previous: Option<&JoinToken>,
) -> std::io::Result<()> {
    write_token(dir, token)?;
    write_private(
        dir,
        files::TOKEN_GENERATION,
        format!("{generation}\n").as_bytes(),
    )?;
    match previous {
        Some(p) => write_private(dir, files::TOKEN_PREVIOUS, format!("{p}\n").as_bytes()),
        None => match std::fs::remove_file(dir.join(files::TOKEN_PREVIOUS)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

/// The settings of the last start stored in the data directory `dir` (none if it has
/// none); a malformed file is an error.
pub fn stored_settings(dir: &Path) -> Result<StoredSettings, NodeError> {
    read_settings(dir)
}

/// The settings of the last start; a missing file is no settings, a malformed one an
/// error (silently starting on another address would be worse).
pub(super) fn read_settings(dir: &Path) -> Result<StoredSettings, NodeError> {
    let path = dir.join(files::SETTINGS);
    match std::fs::read_to_string(&path) {
        Ok(s) => serde_json::from_str(&s).map_err(|e| NodeError::Io {
            what: IoStep::ReadSettings(path),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StoredSettings::default()),
        Err(source) => Err(NodeError::Io {
            what: IoStep::ReadSettings(path),
            source,
        }),
    }
}

pub(super) fn write_settings(dir: &Path, settings: &StoredSettings) -> Result<(), NodeError> {
    let json = serde_json::to_string_pretty(settings).unwrap_or_default();
    write_private(dir, files::SETTINGS, json.as_bytes()).map_err(|source| NodeError::Io {
        what: IoStep::WriteSettings(dir.join(files::SETTINGS)),
        source,
    })
}

pub(super) fn read_peers(dir: &Path) -> Vec<SocketAddr> {
    std::fs::read_to_string(dir.join(files::PEERS))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

/// Every few seconds, remembers where live members listen (for a rejoin after restart).
/// Holds the data directory's lock until the node stops.
pub(super) async fn save_peers(node: Node, dir: PathBuf, lock: Option<DirLock>) {
    let mut last = Vec::new();
    loop {
        let Ok(members) = node.members().await else {
            drop(lock);
            return;
        };
        let mut addrs: Vec<SocketAddr> = members
            .iter()
            .filter(|m| m.id != node.id && m.state == Liveness::Alive)
            .map(|m| m.addr)
            .collect();
        addrs.sort();
        if addrs != last && !addrs.is_empty() {
            let json = serde_json::to_string(&addrs).unwrap_or_default();
            if write_private(&dir, files::PEERS, json.as_bytes()).is_ok() {
                last = addrs;
            }
        }
        // The lock goes back as soon as the node stops, without polling for it.
        tokio::select! {
            () = node.stopped() => {
                drop(lock);
                return;
            }
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "overlay-datadir-{tag}-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_second_lock_is_refused_with_the_holders_pid() {
        let dir = temp_dir("lock");
        let held = lock(&dir).expect("first lock");
        match lock(&dir) {
            Err(NodeError::DataDirInUse { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("expected DataDirInUse, got {other:?}"),
        }
        drop(held);
        lock(&dir).expect("lock again once released");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn files_and_directory_are_private_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("modes");
        // SAFETY: umask only changes this process's file-creation mask.
        let old = unsafe { libc::umask(0) };
        let _held = lock(&dir).expect("lock");
        write_token(&dir, &JoinToken::generate()).expect("token");
        write_settings(&dir, &StoredSettings::default()).expect("settings");
        unsafe { libc::umask(old) };
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        for f in [files::LOCK, files::TOKEN, files::SETTINGS] {
            assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn settings_round_trip_and_malformed_settings_are_an_error() {
        let dir = temp_dir("settings");
        let _held = lock(&dir).expect("lock");
        assert_eq!(read_settings(&dir).unwrap(), StoredSettings::default());
        let s = StoredSettings {
            listen: Some("127.0.0.1:7401".parse().unwrap()),
            advertise: Some("[::1]:7401".parse().unwrap()),
            name: Some("b".into()),
        };
        write_settings(&dir, &s).unwrap();
        assert_eq!(read_settings(&dir).unwrap(), s);
        std::fs::write(dir.join(files::SETTINGS), "{not json").unwrap();
        let err = read_settings(&dir).unwrap_err().to_string();
        assert!(err.contains(files::SETTINGS), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
