//! The local admin endpoint: a Unix socket in the node's data directory through which
//! `overlay-node status` and `overlay-node tree` talk to the running node. One JSON request
//! per connection, one JSON response back. Only local users with access to the data
//! directory can reach it.

use crate::api::{Node, NodeStatus, TreeSnapshot};
use crate::proto::NodeId;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tracing::{debug, warn};

/// A request to the running node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminRequest {
    /// Members, trees and counters.
    Status,
    /// The whole tree of the root whose id or name starts with `root` (or equals it).
    Tree { root: String },
}

/// The node's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum AdminResponse {
    /// Answer to [`AdminRequest::Status`].
    Status(Box<NodeStatus>),
    /// Answer to [`AdminRequest::Tree`].
    Tree(TreeSnapshot),
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
    let path = socket_path(&data_dir);
    // A socket left by a previous run of this node (killed) is stale: replace it.
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)?;
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = wait_stopped(&node) => break,
        };
        let node = node.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(node, stream).await {
                debug!(error = %e, "admin request failed");
            }
        });
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

async fn wait_stopped(node: &Node) {
    while !node.is_stopped() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn answer(node: Node, stream: tokio::net::UnixStream) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read).take(64 * 1024);
    reader.read_line(&mut line).await?;
    let response = match serde_json::from_str::<AdminRequest>(&line) {
        Err(e) => {
            warn!(error = %e, "malformed admin request");
            AdminResponse::Error(format!("malformed request: {e}"))
        }
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
    };
    let mut out = serde_json::to_vec(&response).map_err(std::io::Error::other)?;
    out.push(b'\n');
    write.write_all(&out).await?;
    write.shutdown().await
}

/// Finds the member whose full id, short id or name matches `text`.
async fn resolve_root(node: &Node, text: &str) -> Result<NodeId, String> {
    let members = node.members().await.map_err(|e| e.to_string())?;
    let text = text.trim();
    let matches: Vec<NodeId> = members
        .iter()
        .filter(|m| {
            m.name == text || m.id.short().starts_with(text) || m.id.to_hex().starts_with(text)
        })
        .map(|m| m.id)
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!(
            "no member named or with an id starting with {text:?}"
        )),
        _ => Err(format!(
            "{text:?} matches {} members; give more of the id",
            matches.len()
        )),
    }
}

/// Sends one request to the node running with `data_dir`.
pub async fn request(data_dir: &Path, req: &AdminRequest) -> Result<AdminResponse, AdminError> {
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
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    match serde_json::from_str(&line).map_err(|e| AdminError::Malformed(e.to_string()))? {
        AdminResponse::Error(e) => Err(AdminError::Node(e)),
        ok => Ok(ok),
    }
}

/// A tree as indented text: each member under its parent, with its distance to the root.
pub fn render_text(tree: &TreeSnapshot) -> String {
    let mut out = String::new();
    let name = |id: NodeId| {
        tree.nodes
            .iter()
            .find(|n| n.id == id)
            .map(|n| format!("{} ({})", n.name, id.short()))
            .unwrap_or_else(|| id.short())
    };
    fn walk(
        tree: &TreeSnapshot,
        id: NodeId,
        depth: usize,
        out: &mut String,
        seen: &mut Vec<NodeId>,
        name: &dyn Fn(NodeId) -> String,
    ) {
        if seen.contains(&id) || depth > tree.nodes.len() {
            return;
        }
        seen.push(id);
        let dist = tree
            .nodes
            .iter()
            .find(|n| n.id == id)
            .and_then(|n| n.dist_ms)
            .map(|d| format!("  {d:.1} ms"))
            .unwrap_or_default();
        let _ = writeln!(out, "{}{}{}", "  ".repeat(depth), name(id), dist);
        for child in tree.nodes.iter().filter(|n| n.parent == Some(id)) {
            walk(tree, child.id, depth + 1, out, seen, name);
        }
    }
    let mut seen = Vec::new();
    let _ = writeln!(out, "tree of {}", name(tree.root));
    walk(tree, tree.root, 0, &mut out, &mut seen, &name);
    let detached: Vec<String> = tree
        .nodes
        .iter()
        .filter(|n| !seen.contains(&n.id))
        .map(|n| {
            if n.answered {
                format!("{} (not connected)", name(n.id))
            } else {
                format!("{} (no answer)", name(n.id))
            }
        })
        .collect();
    if !detached.is_empty() {
        let _ = writeln!(out, "not in the tree: {}", detached.join(", "));
    }
    out
}

/// A tree as Graphviz DOT: an edge from every parent to its child.
pub fn render_dot(tree: &TreeSnapshot) -> String {
    let mut out = String::from("digraph tree {\n  rankdir=TB;\n");
    for n in &tree.nodes {
        let shape = if n.id == tree.root {
            "doublecircle"
        } else {
            "ellipse"
        };
        let _ = writeln!(
            out,
            "  \"{}\" [label=\"{}\\n{}\" shape={shape}];",
            n.id.short(),
            n.name.replace('"', "'"),
            n.id.short()
        );
    }
    for n in &tree.nodes {
        if let Some(p) = n.parent {
            let label = n
                .dist_ms
                .map(|d| format!(" [label=\"{d:.1} ms\"]"))
                .unwrap_or_default();
            let _ = writeln!(out, "  \"{}\" -> \"{}\"{label};", p.short(), n.id.short());
        }
    }
    out.push_str("}\n");
    out
}
