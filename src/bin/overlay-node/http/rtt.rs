//! The RTT matrix of the web view. A node measures only its own RTTs, so every daemon
//! answers gathers of [`RTT_KEY`] with its row, and the node serving the view gathers
//! the rows of every member. Members that run without this answer leave their row empty.

use overlay::api::Node;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The gather key under which each daemon answers with its [`RttRow`].
pub const RTT_KEY: &str = "overlay-node.rtt-row";
/// How often a daemon refreshes the row it answers with.
const REFRESH: Duration = Duration::from_secs(2);
/// Above this many members the view gathers no rows: the matrix would be unreadable and
/// the answers large; it shows this node's row only.
pub const MAX_MATRIX: usize = 64;

/// One member's measured RTTs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RttRow {
    /// The measuring member (full id, hex).
    pub id: String,
    /// RTT in ms to each peer it measured, by full id (hex).
    pub rtt_ms: Vec<(String, f64)>,
}

/// Answers gathers of [`RTT_KEY`] from now on with this node's row, refreshed every
/// couple of seconds by a task (the gather handler runs on the node's task and must not
/// wait, so it hands out the last row).
pub async fn publish_rtt_row(node: &Node) -> anyhow::Result<()> {
    let row: Arc<RwLock<Vec<u8>>> = Arc::default();
    let answer = row.clone();
    node.on_request(RTT_KEY, move |_| {
        let row = answer.read().unwrap_or_else(|p| p.into_inner());
        (!row.is_empty()).then(|| row.clone())
    })
    .await?;
    let node = node.clone();
    tokio::spawn(async move {
        while let Ok(fresh) = own_row(&node).await {
            if let Ok(bytes) = serde_json::to_vec(&fresh) {
                *row.write().unwrap_or_else(|p| p.into_inner()) = bytes;
            }
            tokio::time::sleep(REFRESH).await;
        }
    });
    Ok(())
}

/// This node's row, from its member view.
pub async fn own_row(node: &Node) -> Result<RttRow, overlay::api::NodeError> {
    let members = node.members().await?;
    Ok(RttRow {
        id: node.id().to_hex(),
        rtt_ms: members
            .iter()
            .filter_map(|m| Some((m.id.to_hex(), m.rtt_ms?)))
            .collect(),
    })
}

/// Every member's row that answered (this node's first), or this node's alone in an
/// overlay larger than [`MAX_MATRIX`].
pub async fn gather_rows(node: &Node) -> Result<Vec<RttRow>, overlay::api::NodeError> {
    let mine = own_row(node).await?;
    if node.members().await?.len() > MAX_MATRIX {
        return Ok(vec![mine]);
    }
    let gathered = node.gather(RTT_KEY, Vec::new()).await?;
    let mut rows = vec![mine];
    for (id, bytes) in &gathered.items {
        if *id == node.id() {
            continue;
        }
        // A member answering with something else is left out rather than failing all.
        if let Ok(row) = serde_json::from_slice::<RttRow>(bytes) {
            rows.push(row);
        }
    }
    Ok(rows)
}
