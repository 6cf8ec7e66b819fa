//! Wire types of cluster discovery: the summaries every node publishes of its measured
//! latencies and bandwidths, and the messages that spread them ([`crate::proto::clusters`]).

use super::BandwidthEdge;
use crate::proto::id::NodeId;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// At most this many edges in one [`ClusterSummary`]; a longer list is cut on receipt.
pub const MAX_CLUSTER_EDGES: usize = 32;

/// At most this many summaries in one [`ClusterMessage::Summaries`]; more go in several.
pub const MAX_CLUSTER_SUMMARIES: usize = 64;

/// At most this many entries in one [`ClusterMessage::Versions`] (about 180 KB).
pub const MAX_CLUSTER_VERSIONS: usize = 8192;

/// One measured latency a node publishes: its filtered RTT to `peer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterEdge {
    /// The peer measured.
    pub peer: NodeId,
    /// The filtered RTT, in microseconds.
    pub rtt_us: u32,
}

/// What one node publishes for cluster discovery: a few of its measured latencies, chosen
/// so that the union over all nodes holds the links that join groups (see
/// [`crate::proto::clusters`]). About 21 bytes per edge, at most [`MAX_CLUSTER_EDGES`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSummary {
    /// The node that measured.
    pub node: NodeId,
    /// Bumped by `node` whenever its summary changes; the higher version wins.
    pub version: u32,
    /// The latencies it publishes. Shared, not copied, by every table that holds this
    /// version (on the wire a plain sequence): in the simulator, a copy per node of every
    /// summary was O(N²) memory.
    pub edges: Arc<[ClusterEdge]>,
    /// Bandwidths it measured arriving from peers in other clusters (at most
    /// [`MAX_BANDWIDTH_EDGES`](super::MAX_BANDWIDTH_EDGES)); shared as `edges` is.
    pub bandwidth: Arc<[BandwidthEdge]>,
}

/// How many buckets the cluster summaries are split into (by the first byte of the node
/// id) when two nodes find out where their tables differ, and how many fine buckets (by the
/// second byte) each of those is split into when it is full.
pub const CLUSTER_BUCKETS: usize = 32;

/// Messages that spread the cluster summaries (news pushed, then push-pull anti-entropy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClusterMessage {
    /// A fingerprint of the summaries the sender holds (`count` of them); a receiver whose
    /// own differs answers with [`ClusterMessage::Buckets`].
    Digest { hash: u64, count: u32 },
    /// The fingerprints of the sender's summaries bucket by bucket ([`CLUSTER_BUCKETS`] of
    /// them): the receiver answers with its versions of the buckets that differ, or, for a
    /// bucket holding many summaries, with [`ClusterMessage::FineBuckets`], so one new
    /// summary costs a list of a few versions, not of all.
    Buckets { hashes: Vec<u32> },
    /// The fingerprints of the fine buckets of each bucket set in `buckets` ([`CLUSTER_BUCKETS`]
    /// per bucket, in order): the receiver answers with its versions of the fine buckets
    /// that differ.
    FineBuckets { buckets: u32, hashes: Vec<u32> },
    /// The version of every summary the sender holds in the buckets set in `buckets` (bit
    /// `i`: bucket `i`) and in the fine buckets listed in `fine` (bucket times
    /// [`CLUSTER_BUCKETS`] plus fine bucket). The receiver pushes the summaries of those
    /// buckets it holds in a newer version (or that the list lacks), and answers with its
    /// own list of the same buckets when `reply` is set, so both sides end up with the
    /// newer of each.
    Versions {
        versions: Vec<(NodeId, u32)>,
        buckets: u32,
        fine: Vec<u16>,
        reply: bool,
    },
    /// Summaries, new ones or ones the receiver lacks. Each is shared, not copied, by the
    /// tables that hold it (on the wire a plain summary).
    Summaries { summaries: Vec<Arc<ClusterSummary>> },
}
