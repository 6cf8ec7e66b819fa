//! Wire types of bandwidth measurement: what a node asks a peer to send it (a packet
//! train) and what it publishes of what it measured (in its cluster summary).

use crate::proto::id::NodeId;
use serde::{Deserialize, Serialize};

/// At most this many bandwidth figures in one [`crate::proto::ClusterSummary`]; a longer
/// list is cut on receipt.
pub const MAX_BANDWIDTH_EDGES: usize = 16;

/// At most this many datagrams in one train a peer may ask for.
pub const MAX_TRAIN_PACKETS: u16 = 64;

/// One bandwidth figure a node publishes: what it measured arriving from `from`.
///
/// Inbound, because the receiver is the one that sees a train's dispersion or a
/// transfer's rate; links may be asymmetric, so the direction matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BandwidthEdge {
    /// The sending peer.
    pub from: NodeId,
    /// The estimate, kilobits per second.
    pub kbps: u32,
    /// How many measurements it rests on (saturating).
    pub samples: u8,
}
