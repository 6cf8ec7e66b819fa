//! The local admin endpoint: a Unix socket in the node's data directory (0600) through
//! which every `overlay-node` command but `demo`, `token` and `config` talks to the running
//! node. One JSON request per connection (one line), one JSON response back; `listen`
//! answers with a stream instead (see [`listen`]). A broadcast request says how many
//! bytes follow its line and the payload follows as is, so payloads up to the streamed
//! limit ([`MAX_STREAM_PAYLOAD`]) need neither hex nor a second copy. Only local users with
//! access to the data directory can reach it.

mod joining;
mod listen;
pub mod pieces;
mod render;
mod values;

pub use self::joining::serve_while_joining;
pub use self::listen::{DeliveryHeader, listen, listen_with_lag};
pub use self::render::{render_dot, render_text};
pub use self::values::{JsonOp, ReducedReport, ValuesReport, combine, register_json_reducers};

use crate::api::MemberInfo;
use crate::api::{BroadcastReport, Node, NodeInfo, NodeStatus, TreeSnapshot};
use crate::proto::collective::MAX_STREAM_PAYLOAD;
use crate::proto::{Liveness, NodeId};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

/// A request to the running node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminRequest {
    /// Members, trees and counters.
    Status,
    /// The whole tree of the root whose id or name starts with `root` (or equals it).
    Tree { root: String },
    /// Broadcast the `len` bytes that follow the request's line from the node.
    Broadcast { len: u64 },
    /// Gather every member's [`NodeInfo`].
    GatherInfo,
    /// Count the members with a reduce (each contributes 1).
    ReduceCount,
    /// Leave the overlay gracefully; the node process then exits.
    Leave,
    /// Replace the overlay's join token by a new one (see [`Node::rotate_token`]).
    RotateToken,
    /// Publish a JSON value under `key` on this node (what it contributes to a gather or
    /// reduce of the key).
    Publish {
        /// The key.
        key: String,
        /// The value, as JSON text.
        json: String,
    },
    /// Gather every member's value under `key`.
    Gather {
        /// The key.
        key: String,
    },
    /// Reduce every member's JSON value under `key` with `op`.
    Reduce {
        /// The key.
        key: String,
        /// How values combine.
        op: JsonOp,
    },
    /// Stream every delivery to this node as it arrives: an
    /// [`AdminResponse::Listening`] line, then per delivery an [`AdminResponse::Delivery`]
    /// line followed by its payload bytes.
    Listen,
}

/// Every member's answer to `gather info`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InfoReport {
    /// The members' answers, sorted by name.
    pub nodes: Vec<NodeInfo>,
    /// Members that did not answer.
    pub missing: Vec<NodeId>,
    /// How long it took, ms.
    pub elapsed_ms: f64,
}

/// The answer to `reduce count`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CountReport {
    /// The sum of every contribution (1 each).
    pub count: u64,
    /// Who contributed.
    pub contributors: Vec<NodeId>,
    /// Members that did not answer before the deadline.
    pub missing: Vec<NodeId>,
    /// How long it took, ms.
    pub elapsed_ms: f64,
}

/// The node's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminResponse {
    /// Answer to [`AdminRequest::Status`].
    Status(Box<NodeStatus>),
    /// Answer to [`AdminRequest::Tree`].
    Tree(TreeSnapshot),
    /// Answer to [`AdminRequest::Broadcast`].
    Broadcast(BroadcastReport),
    /// Answer to [`AdminRequest::GatherInfo`].
    Info(InfoReport),
    /// Answer to [`AdminRequest::ReduceCount`].
    Count(CountReport),
    /// Answer to [`AdminRequest::Publish`].
    Published,
    /// Answer to [`AdminRequest::Gather`].
    Values(ValuesReport),
    /// Answer to [`AdminRequest::Reduce`].
    Reduced(ReducedReport),
    /// Answer to [`AdminRequest::Leave`]: the node is leaving.
    Left,
    /// Answer to [`AdminRequest::RotateToken`]: the new token.
    TokenRotated { token: String },
    /// Answer to [`AdminRequest::Listen`]: deliveries from now on will be streamed.
    Listening,
    /// One delivery; `header.bytes` payload bytes follow the line.
    Delivery(DeliveryHeader),
    /// While listening: this many deliveries were dropped because the listener fell
    /// behind (see [`crate::api::Deliveries`]).
    Lagged(u64),
    /// The request could not be served.
    Error(String),
}

/// Why the admin endpoint could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No node runs with this data directory (or it is not reachable).
    #[error(
        "no running node answers at {path}: {source} (is `overlay-node` running with this --data-dir?)"
    )]
    Connect {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The exchange failed.
    #[error("admin request failed: {0}")]
    Io(#[from] std::io::Error),
    /// The answer was not understood.
    #[error("malformed admin answer: {0}")]
    Malformed(String),
    /// The node answered with an error.
    #[error("{0}")]
    Node(String),
}

/// The admin socket path for a data directory.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(crate::api::files::ADMIN)
}

/// Serves admin requests for `node` on the socket in `data_dir` until the node stops.
pub async fn serve(node: Node, data_dir: PathBuf) -> std::io::Result<()> {
    let listener = bind(&data_dir)?;
    let slots = Arc::new(Semaphore::new(MAX_ADMIN_CONNECTIONS));
    let mut accept_errors = 0u64;
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, most often: wait for some to close and go on.
                    // Ending here left the node without an admin socket for good.
                    accept_errors += 1;
                    if accept_errors.is_power_of_two() {
                        warn!(error = %e, errors = accept_errors, "admin socket cannot accept");
                    }
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            () = node.stopped() => break,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse_busy(stream));
            continue;
        };
        let node = node.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = answer(node, stream).await {
                debug!(error = %e, "admin request failed");
            }
        });
    }
    let _ = std::fs::remove_file(socket_path(&data_dir));
    Ok(())
}

/// Admin connections served at once; further ones are told the node is busy and closed,
/// so idle clients cannot take every descriptor of the node.
pub const MAX_ADMIN_CONNECTIONS: usize = 256;
/// How long a client may take to send its request line (and, for a broadcast, between
/// two reads of its payload) before the connection is closed.
pub const ADMIN_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept before the next one.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Binds the admin socket of `data_dir`, replacing a stale one, mode 0600.
fn bind(data_dir: &Path) -> std::io::Result<tokio::net::UnixListener> {
    let path = socket_path(data_dir);
    // A socket left by a previous run of this node (killed) is stale: replace it.
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)?;
    // Whoever can use the socket can drive the node: its owner only, whatever the umask.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(listener)
}

async fn refuse_busy(stream: tokio::net::UnixStream) {
    let why = format!("the node is busy: {MAX_ADMIN_CONNECTIONS} admin connections are open");
    refuse_with(stream, why).await;
}

/// Answers a client with an error, whatever it asked.
async fn refuse_with(mut stream: tokio::net::UnixStream, why: String) {
    // The request is read (briefly) first: a client whose request is refused unread gets
    // a broken pipe instead of the reason.
    let mut line = String::new();
    let mut reader = BufReader::new(&mut stream).take(MAX_REQUEST_LINE);
    let _ = tokio::time::timeout(Duration::from_secs(1), reader.read_line(&mut line)).await;
    let busy = AdminResponse::Error(why);
    if let Ok(mut out) = serde_json::to_vec(&busy) {
        out.push(b'\n');
        let _ = tokio::time::timeout(ADMIN_READ_TIMEOUT, stream.write_all(&out)).await;
    }
}

async fn answer(node: Node, stream: tokio::net::UnixStream) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let Ok(read) = tokio::time::timeout(ADMIN_READ_TIMEOUT, read_request(read)).await else {
        let late = AdminResponse::Error(format!("no request within {ADMIN_READ_TIMEOUT:?}"));
        let mut out = serde_json::to_vec(&late).map_err(std::io::Error::other)?;
        out.push(b'\n');
        write.write_all(&out).await?;
        return write.shutdown().await;
    };
    let (request, mut body) = read?;
    let response = match request {
        Err(e) => {
            warn!(error = %e, "malformed admin request");
            AdminResponse::Error(format!("malformed request: {e}"))
        }
        Ok(AdminRequest::Listen) => return listen::serve(node, write).await,
        Ok(AdminRequest::Leave) => {
            let mut out =
                serde_json::to_vec(&AdminResponse::Left).map_err(std::io::Error::other)?;
            out.push(b'\n');
            write.write_all(&out).await?;
            write.shutdown().await?;
            node.leave().await;
            return Ok(());
        }
        Ok(AdminRequest::Publish { key, json }) => values::publish(&node, key, json).await,
        Ok(AdminRequest::Gather { key }) => values::gather(&node, key).await,
        Ok(AdminRequest::Reduce { key, op }) => values::reduce(&node, key, op).await,
        Ok(AdminRequest::Status) => match node.status().await {
            Ok(s) => AdminResponse::Status(Box::new(s)),
            Err(e) => AdminResponse::Error(e.to_string()),
        },
        Ok(AdminRequest::Tree { root }) => match resolve_root(&node, &root).await {
            Ok(id) => match node.tree_snapshot(id).await {
                Ok(t) => AdminResponse::Tree(t),
                Err(e) => AdminResponse::Error(e.to_string()),
            },
            Err(e) => AdminResponse::Error(e),
        },
        Ok(AdminRequest::Broadcast { len }) => match read_payload(&mut body, len).await {
            Err(e) => AdminResponse::Error(e),
            Ok(payload) => match node.broadcast(payload).await {
                Ok(r) => AdminResponse::Broadcast(r),
                Err(e) => AdminResponse::Error(e.to_string()),
            },
        },
        Ok(AdminRequest::GatherInfo) => values::gather_info(&node).await,
        Ok(AdminRequest::ReduceCount) => values::reduce_count(&node).await,
        Ok(AdminRequest::RotateToken) => AdminResponse::TokenRotated {
            token: node.rotate_token().to_string(),
        },
    };
    let mut out = serde_json::to_vec(&response).map_err(std::io::Error::other)?;
    out.push(b'\n');
    write.write_all(&out).await?;
    write.shutdown().await
}

/// Longest request line a node reads (requests other than the payload are small).
const MAX_REQUEST_LINE: u64 = 64 * 1024;

/// Reads a request's line (at most [`MAX_REQUEST_LINE`] bytes, UTF-8) from what a client
/// sent and parses it; the reader is returned where a broadcast's payload starts. Over
/// any reader, so that the fuzz entry point can feed it plain bytes.
pub(crate) async fn read_request<R: tokio::io::AsyncRead + Unpin>(
    read: R,
) -> std::io::Result<(serde_json::Result<AdminRequest>, BufReader<R>)> {
    let mut line = String::new();
    let mut reader = BufReader::new(read).take(MAX_REQUEST_LINE);
    reader.read_line(&mut line).await?;
    Ok((serde_json::from_str(&line), reader.into_inner()))
}

/// Reads the `len` payload bytes that follow a broadcast request, all of them or an error
/// saying what was wrong (too large, cut short).
pub(crate) async fn read_payload(
    body: &mut (impl tokio::io::AsyncRead + Unpin),
    len: u64,
) -> Result<Vec<u8>, String> {
    if len > MAX_STREAM_PAYLOAD {
        return Err(format!(
            "payload of {len} bytes exceeds the limit of {MAX_STREAM_PAYLOAD} bytes"
        ));
    }
    // Grow as bytes arrive rather than trusting the announced length up front; a client
    // that stops sending is given up on after ADMIN_READ_TIMEOUT without a byte.
    let mut payload = Vec::with_capacity(len.min(1 << 24) as usize);
    let mut body = body.take(len);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::time::timeout(ADMIN_READ_TIMEOUT, body.read(&mut chunk))
            .await
            .map_err(|_| format!("the payload stalled for {ADMIN_READ_TIMEOUT:?}"))?
            .map_err(|e| format!("reading the payload: {e}"))?;
        if n == 0 {
            break;
        }
        payload.extend_from_slice(&chunk[..n]);
    }
    if payload.len() as u64 != len {
        return Err(format!(
            "payload cut short: {} of {len} bytes arrived",
            payload.len()
        ));
    }
    Ok(payload)
}

/// Broadcasts `payload` from the node running with `data_dir` (any size up to
/// [`MAX_STREAM_PAYLOAD`]) and returns its report.
pub async fn broadcast(data_dir: &Path, payload: &[u8]) -> Result<BroadcastReport, AdminError> {
    let req = AdminRequest::Broadcast {
        len: payload.len() as u64,
    };
    match exchange(data_dir, &req, payload).await? {
        AdminResponse::Broadcast(r) => Ok(r),
        other => Err(AdminError::Malformed(format!(
            "a broadcast was answered with {other:?}"
        ))),
    }
}

/// Finds the member whose name, short id or full id is `text`, else the one member whose
/// id starts with it; a root that is dead or has left is an error (its tree is gone).
async fn resolve_root(node: &Node, text: &str) -> Result<NodeId, String> {
    let members = node.members().await.map_err(|e| e.to_string())?;
    let text = text.trim();
    let exact: Vec<&MemberInfo> = members
        .iter()
        .filter(|m| m.name == text || m.id.short() == text || m.id.to_hex() == text)
        .collect();
    let prefix: Vec<&MemberInfo> = members
        .iter()
        .filter(|m| {
            !text.is_empty()
                && (m.id.short().starts_with(text)
                    || m.id.to_hex().starts_with(&text.to_lowercase()))
        })
        .collect();
    let describe = |ms: &[&MemberInfo]| {
        ms.iter()
            .map(|m| format!("{} ({})", m.name, m.id.short()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let found = match (exact.as_slice(), prefix.as_slice()) {
        ([one], _) => *one,
        ([], [one]) => *one,
        ([], []) => {
            return Err(format!(
                "no member named {text:?} or with an id starting with it"
            ));
        }
        ([], many) => {
            return Err(format!(
                "{text:?} is the start of {} members' ids ({}); give more of the id",
                many.len(),
                describe(many)
            ));
        }
        (many, _) => {
            return Err(format!(
                "{text:?} names {} members ({}); give the id",
                many.len(),
                describe(many)
            ));
        }
    };
    match found.state {
        Liveness::Alive | Liveness::Suspect => Ok(found.id),
        state => Err(format!(
            "{} ({}) is {}: it is no root any more",
            found.name,
            found.id.short(),
            format!("{state:?}").to_lowercase()
        )),
    }
}

/// Sends one request to the node running with `data_dir` (a broadcast goes through
/// [`broadcast`], which sends its payload after the line).
pub async fn request(data_dir: &Path, req: &AdminRequest) -> Result<AdminResponse, AdminError> {
    exchange(data_dir, req, &[]).await
}

/// Connects to the node's admin socket and sends `req` (one line) and `payload`; returns
/// the reading half for the answer.
async fn send_request(
    data_dir: &Path,
    req: &AdminRequest,
    payload: &[u8],
) -> Result<tokio::net::unix::OwnedReadHalf, AdminError> {
    let path = socket_path(data_dir);
    let stream = tokio::net::UnixStream::connect(&path)
        .await
        .map_err(|source| AdminError::Connect {
            path: path.display().to_string(),
            source,
        })?;
    let (read, mut write) = stream.into_split();
    let mut body = serde_json::to_vec(req).map_err(std::io::Error::other)?;
    body.push(b'\n');
    write.write_all(&body).await?;
    write.write_all(payload).await?;
    Ok(read)
}

async fn exchange(
    data_dir: &Path,
    req: &AdminRequest,
    payload: &[u8],
) -> Result<AdminResponse, AdminError> {
    let read = send_request(data_dir, req, payload).await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    match serde_json::from_str(&line).map_err(|e| AdminError::Malformed(e.to_string()))? {
        AdminResponse::Error(e) => Err(AdminError::Node(e)),
        ok => Ok(ok),
    }
}
