//! Collective operations along the live trees: broadcast, scatter, gather, reduce, and
//! allreduce, allgather and barrier built on them (docs/DESIGN.md §5).
//!
//! An operation is started by a root and travels the root's own tree. Every node that
//! receives it for the first time (a *relay*):
//! 1. delivers it (broadcast), takes its own item (scatter) or contributes (gather, reduce:
//!    a published value, or the application's answer to [`Event::ContributionNeeded`](crate::proto::Event::ContributionNeeded));
//! 2. forwards it to its current children in that tree, the child with the most descendants
//!    first, each with a smaller time budget than its own;
//! 3. answers the node it received it from once every child has answered, died, or the
//!    budget ran out: the nodes reached, and the values gathered or combined so far.
//!
//! A node that receives the same operation again (it switched parents mid-operation)
//! answers that sender at once with nothing, so it is counted once, through the path that
//! reached it first. A partial answer whose upstream is gone goes straight to the root.
//!
//! The root then asks every expected member that has not answered directly, until its
//! deadline (retries; nothing is forwarded from a direct request), and reports: who was
//! reached, who is missing, who contributed. The root never merges a partial result that
//! counts someone already counted, so a reduce never counts a node twice.
//!
//! Payloads are carried inline in the messages, up to [`MAX_INLINE_PAYLOAD`]. Larger
//! broadcasts ([`StartKind::Stream`]) carry only the payload's length and digest: the
//! network driver streams the bytes beside each control message, from the same sender, and
//! forwards them as they arrive; it tells the core with [`crate::proto::Command::StreamDone`]
//! when a node has the whole payload, and only then does the node count as reached.

mod acc;
mod engine;
mod plan;
mod reduce;
#[cfg(test)]
mod tests;

pub use self::engine::Collectives;

/// What the key a node publishes its arrival at a barrier under starts with (then the
/// barrier's name). A node asked for such a key before it arrived answers once it does.
pub const BARRIER_KEY_PREFIX: &str = "barrier:";
pub use self::reduce::{ReduceFn, Reducers};

use super::id::NodeId;
use super::message::{OpId, Purpose, Reducer};
use std::time::Duration;

/// Largest payload (broadcast) or total of items (scatter) carried in control messages.
pub const MAX_INLINE_PAYLOAD: usize = 960 * 1024;

/// Largest payload of a streamed broadcast (a `StartKind::Stream` operation).
pub const MAX_STREAM_PAYLOAD: u64 = 1 << 30;

/// Each collective message nobody asked for ([`crate::proto::Event::Unsolicited`]) counts
/// at least this many bytes: a flood of small ones costs its handling, not its size.
pub const UNSOLICITED_MIN_BYTES: u64 = 1024;

/// Answers larger than this are split into several messages.
const PART_LIMIT: usize = 512 * 1024;

/// Default deadline of an operation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A collective operation for this node to start as root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    /// Picked by the caller, unique among this node's operations; the report carries it.
    pub nonce: u64,
    /// How long the root waits for answers before reporting the rest as missing.
    pub timeout: Duration,
    /// What to do.
    pub what: StartKind,
    /// Scope: `Some(g)` expects, delivers to and takes values from the live members of
    /// group `g` only (members outside it still relay along the trees). Broadcast (inline
    /// or streamed down the tree), gather, reduce and their `all` forms; not stripes (a
    /// stream with a route), scatters (they name their destinations) or barriers.
    pub group: Option<String>,
}

/// The kinds of operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartKind {
    /// Every member delivers `payload` once.
    Broadcast { payload: Vec<u8> },
    /// Every member delivers a large payload the driver streams beside the control
    /// messages (pipelined, hop by hop); `digest` is its SHA-256.
    ///
    /// `route`, when not empty, is the tree the payload follows instead of the overlay's:
    /// (sender, receiver) edges spanning every member from the root (a stripe of a large
    /// broadcast, see [`crate::proto::stripe`]).
    Stream {
        len: u64,
        digest: [u8; 32],
        route: Vec<(NodeId, NodeId)>,
    },
    /// Each destination delivers its own item.
    Scatter { items: Vec<(NodeId, Vec<u8>)> },
    /// Every member contributes its value for `key`; the root gets them all.
    Gather { key: String, request: Vec<u8> },
    /// Every member contributes its value for `key`; the values are combined on the way up.
    Reduce {
        key: String,
        request: Vec<u8>,
        reducer: Reducer,
    },
    /// A gather whose result is then broadcast to every member.
    AllGather { key: String, request: Vec<u8> },
    /// A reduce whose result is then broadcast to every member.
    AllReduce {
        key: String,
        request: Vec<u8>,
        reducer: Reducer,
    },
    /// Releases every member once all have reached the barrier `name`.
    Barrier { name: String },
}

/// The four basic operations (composites report as their parts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum OpKind {
    /// Broadcast.
    Broadcast,
    /// Scatter.
    Scatter,
    /// Gather.
    Gather,
    /// Reduce.
    Reduce,
}

/// What a delivery is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryKind {
    /// A broadcast payload.
    Broadcast,
    /// This node's item of a scatter.
    Scatter,
    /// The result of an allreduce: a postcard [`ReduceOutcome`].
    AllReduce,
    /// The result of an allgather: postcard `Vec<(NodeId, Vec<u8>)>`.
    AllGather,
    /// A barrier was released: a postcard [`BarrierOutcome`].
    Barrier,
}

/// A payload the core delivered to this node (the driver turns it into the
/// application's `Delivery`, stamped with when it was received).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The operation (its root is `op.root`).
    pub op: OpId,
    /// The group it was scoped to ([`Start::group`]).
    pub group: Option<String>,
    /// The node it came from (this node itself at the root).
    pub from: NodeId,
    /// What it is.
    pub kind: DeliveryKind,
    /// The bytes.
    pub payload: Vec<u8>,
}

/// The result of a reduce, as an allreduce spreads it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReduceOutcome {
    /// Who is counted in `value`.
    pub contributors: Vec<NodeId>,
    /// The combined value (`None` when nobody contributed).
    pub value: Option<Vec<u8>>,
}

/// The outcome of a barrier, as its release spreads it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BarrierOutcome {
    /// The barrier's name.
    pub name: String,
    /// Members that did not reach it before the deadline (empty: everyone did).
    pub missing: Vec<NodeId>,
}

/// The root's account of one operation.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpReport {
    /// The operation.
    pub op: Option<OpId>,
    /// Its kind.
    pub kind: Option<OpKind>,
    /// Whether it was the first half of a composite operation.
    pub purpose: Option<Purpose>,
    /// Who was expected to take part: the live members when it started (the destinations
    /// for a scatter), the root included.
    pub expected: Vec<NodeId>,
    /// Broadcast: who delivered; scatter: destinations that took their item; gather and
    /// reduce: who was reached.
    pub reached: Vec<NodeId>,
    /// Expected members that did not answer before the deadline.
    pub missing: Vec<NodeId>,
    /// Scatter destinations that are not live members (nothing was sent to them).
    pub unknown: Vec<NodeId>,
    /// Gather and reduce: who contributed.
    pub contributors: Vec<NodeId>,
    /// Gather and reduce: who answered without a value.
    pub declined: Vec<NodeId>,
    /// Gather: the values, by contributor.
    pub items: Vec<(NodeId, Vec<u8>)>,
    /// Reduce: the combined value of `contributors`.
    pub value: Option<Vec<u8>>,
    /// From start to report.
    pub elapsed: Duration,
    /// Why the operation could not run at all (then nothing was sent).
    pub error: Option<OpRefused>,
}

/// Why the node refused to start a collective operation (nothing was sent).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[non_exhaustive]
pub enum OpRefused {
    /// The operation's number is in use by a running operation.
    #[error("operation {nonce} is already in use")]
    InUse {
        /// The number asked for.
        nonce: u64,
    },
    /// This node takes part in too many operations of its own (or in all) to start
    /// another now; the running ones finish or are forgotten within their timeout.
    #[error("busy: {running} operations started here are still running; try again later")]
    Busy {
        /// Operations started at this node and not reported yet.
        running: usize,
    },
    /// Only broadcasts (not the stripes of a striped one), gathers, reduces and their
    /// `all` forms can be scoped to a group (scatters and barriers cannot).
    #[error("this operation cannot be scoped to a group")]
    Unscoped,
    /// The payload is larger than the operation carries.
    #[error("payload of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The payload's length.
        len: u64,
        /// The largest length accepted.
        limit: u64,
    },
}

/// What the core's collective engine needs to know about the overlay.
pub trait Overlay {
    /// This node.
    fn me(&self) -> NodeId;
    /// The other live members.
    fn alive_members(&self) -> &[NodeId];
    /// Whether `id` is a live member (this node included).
    fn is_alive(&self, id: &NodeId) -> bool;
    /// This node's children in `root`'s tree.
    fn children(&self, root: NodeId) -> Vec<NodeId>;
    /// The RTT estimate to `peer`, µs.
    fn rtt_us(&self, peer: NodeId) -> Option<u32>;
    /// Whether operations spread inside clusters by plan (see `plan.rs`) rather than
    /// along the tree.
    fn plans(&self) -> bool {
        false
    }
    /// Whether `peer` is in this node's cluster (the group cluster discovery found, or
    /// before it has, the peers within `Config::cluster_rtt`).
    fn in_cluster(&self, _peer: &NodeId) -> bool {
        false
    }
    /// The cost of one send, µs, as the in-cluster plan assumes it.
    fn send_cost_us(&self) -> u32 {
        30
    }
    /// Whether children with the most descendants are served first (else in id order).
    fn descendants_first(&self) -> bool {
        true
    }
    /// Whether live member `id` (this node included) is in `group`.
    fn in_group(&self, _id: &NodeId, _group: &str) -> bool {
        false
    }
    /// The live members of `group`, this node included if it is one, sorted.
    fn group_members(&self, group: &str) -> Vec<NodeId> {
        let me = self.me();
        let mut m: Vec<NodeId> = (self.alive_members().iter().copied())
            .chain([me])
            .filter(|id| self.in_group(id, group))
            .collect();
        m.sort_unstable();
        m.dedup();
        m
    }
}
