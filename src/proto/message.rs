//! The wire format: every message two nodes exchange, as one serde enum encoded with
//! postcard behind a version byte, with a size limit. Decoding never panics.

use super::id::NodeId;
use serde::{Deserialize, Serialize};

mod bandwidth;
mod cluster;
mod membership;
pub use self::bandwidth::{BandwidthEdge, MAX_BANDWIDTH_EDGES, MAX_TRAIN_PACKETS};
pub use self::cluster::{
    CLUSTER_BUCKETS, ClusterEdge, ClusterMessage, ClusterSummary, MAX_CLUSTER_EDGES,
    MAX_CLUSTER_SUMMARIES, MAX_CLUSTER_VERSIONS,
};
pub use self::membership::{
    GossipMessage, Liveness, MAX_GROUP_NAME, MAX_GROUPS, MemberRecord, groups_valid,
};

/// Version byte that starts every frame. Bumped on any incompatible change.
pub const WIRE_VERSION: u8 = 4;

/// Largest encoded control message accepted (version byte included).
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// One root's tree state as a node advertises it to its candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdvertEntry {
    /// The root of the tree.
    pub root: NodeId,
    /// The largest serial of `root` the sender has received.
    pub serial: u32,
    /// The sender's distance to the root along the tree, in microseconds.
    pub dist_us: u32,
    /// Whether the sender has a path to the root.
    pub connected: bool,
}

/// Every message of the protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// RTT probe. `sent_us` is echoed back; `rtt_hint_us` is the sender's current RTT
    /// estimate to the receiver (RTT is symmetric, so a peer that probes us lends us its
    /// estimate until we measure our own). `watch` is set when the sender keeps us as a
    /// candidate and wants our adverts; a one-off measurement leaves it unset.
    Ping {
        sent_us: u64,
        rtt_hint_us: Option<u32>,
        watch: bool,
    },
    /// Answer to a [`Message::Ping`].
    Pong { sent_us: u64 },
    /// Answer to a [`Message::Ping`] that carries the answerer's own probe of the pinger,
    /// due about now: the pinger answers `ping_sent_us` with a [`Message::Pong`], so one
    /// exchange of three frames gives both ends a sample, where two exchanges took four.
    /// `watch` is the answerer's, as in a ping.
    PongPing {
        sent_us: u64,
        ping_sent_us: u64,
        watch: bool,
    },
    /// Tree state for some roots, batched; only roots that changed since the last advert
    /// to this peer, except on periodic full refreshes.
    Advert { entries: Vec<AdvertEntry> },
    /// Pushed by a parent to its children when the serial or its dist changes.
    TreeUpdate(AdvertEntry),
    /// The sender chose the receiver as its parent in `root`'s tree.
    Attach { root: NodeId },
    /// The sender no longer has the receiver as its parent in `root`'s tree.
    Detach { root: NodeId },
    /// Ask `root` for a serial of at least `serial` (Babel's seqno request), sent by a
    /// node that lost its parent so repair does not wait for the next periodic serial.
    SerialRequest { root: NodeId, serial: u32 },
    /// Ask a candidate for its current state in these trees, as soon as its serial for the
    /// root reaches the given one (it answers with an [`Message::Advert`]). A node asks when
    /// a candidate looks like a better parent but what it heard from it is older than its
    /// own serial, so feasibility cannot be judged yet.
    AdvertRequest { roots: Vec<(NodeId, u32)> },
    /// Ask a candidate who its parents are in these trees (to find a better entry point).
    ParentQuery { roots: Vec<NodeId> },
    /// Answer to [`Message::ParentQuery`]: `(root, parent)` pairs.
    ParentHint { parents: Vec<(NodeId, NodeId)> },
    /// Several [`Message::Attach`] and [`Message::Detach`] in one message (the sender
    /// changed parents in several trees while handling one input). Added after version 1's
    /// first variants, so older frames still decode.
    Links {
        attach: Vec<NodeId>,
        detach: Vec<NodeId>,
    },
    /// Several [`Message::TreeUpdate`]s from a parent to one child in one message.
    TreeUpdates(Vec<AdvertEntry>),
    /// Ask for a full [`Message::Advert`] of every tree the receiver is connected to: the
    /// sender watches the receiver again and has forgotten what it heard from it before
    /// (the receiver only sends changes to peers it already advertises to), or has just
    /// seen the receiver come back after declaring it dead. The receiver also repeats its
    /// attaches to the sender and its state in the trees the sender is its child in.
    Resync,
    /// A collective operation (broadcast, scatter, gather, reduce) travelling a tree;
    /// handled by [`crate::proto::collective`].
    Collective(CollectiveMessage),
    /// Cluster discovery: the summaries every node publishes of its measured latencies,
    /// spread to every member; handled by [`crate::proto::clusters`]. Added after the
    /// other variants, so older frames still decode.
    Cluster(ClusterMessage),
    /// Ask the receiver to send `packets` datagrams of `size` bytes back to back (a packet
    /// train): their spread on arrival measures the path's bandwidth toward the sender.
    /// The receiver honours it only within its probe budget.
    TrainRequest { id: u32, packets: u16, size: u16 },
    /// The sender's connection to the receiver backed off for congestion while it
    /// delivered `kbps` (QUIC's path statistics, see `crate::net`): the path toward the
    /// receiver seems to carry about that. The receiver measures it again with a train if
    /// that is far below what it holds ([`crate::proto::Input::PathSaturated`]).
    PathSaturated { kbps: u32 },
}

/// Names one collective operation: the root that started it and a number the root picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpId {
    /// The node that started the operation; it travels this root's tree.
    pub root: NodeId,
    /// Chosen by the root, unique among its operations (random in the network driver).
    pub nonce: u64,
}

/// The 16-bit tag of `id` in operation `op`'s [`CollectiveMessage::Down::covered`] lists:
/// two bytes per node instead of sixteen, salted by the operation so that two nodes whose
/// tags collide (one chance in 65536) do so in one operation only; a node taken for covered
/// by such a collision is reached by the root's direct retry.
pub fn cover_tag(op: &OpId, id: &NodeId) -> u16 {
    let half = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let root = half(&op.root.0[..8]) ^ half(&op.root.0[8..]);
    // splitmix64's finaliser over the node, the operation's root and its nonce.
    let mut x = half(&id.0[..8]) ^ half(&id.0[8..]).rotate_left(29) ^ root ^ op.nonce;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    x as u16
}

/// The element type of a built-in reduction: values are postcard-encoded vectors of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NumKind {
    /// `Vec<i64>` (sums saturate).
    I64,
    /// `Vec<u64>` (sums saturate).
    U64,
    /// `Vec<f64>`.
    F64,
}

/// How the partial results of a reduce are combined at each hop.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reducer {
    /// Element-wise sum.
    Sum(NumKind),
    /// Element-wise minimum.
    Min(NumKind),
    /// Element-wise maximum.
    Max(NumKind),
    /// A user-defined associative function registered under this name on every node.
    Named(String),
}

/// Why a broadcast or gather was sent: for itself, or as part of a composite operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Purpose {
    /// An application operation.
    Data,
    /// Allreduce: a reduce, then its result spread to every member.
    AllReduce { of: u64 },
    /// Allgather: a gather, then its result spread to every member.
    AllGather { of: u64 },
    /// Barrier: a gather of arrivals, then the release spread to every member.
    BarrierRelease { of: u64 },
}

/// What travels down a tree (or directly, when the root retries a member).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DownBody {
    /// Every member delivers `payload`.
    Broadcast { payload: Vec<u8>, purpose: Purpose },
    /// Each destination delivers its own item; the rest is split among the subtrees.
    Scatter { items: Vec<(NodeId, Vec<u8>)> },
    /// Every member delivers a large payload that travels beside the control messages, on
    /// the network driver's data plane, from the sender of this message (`digest`: its
    /// SHA-256). Added after the other variants, so older frames still decode.
    Stream { len: u64, digest: [u8; 32] },
    /// Every member contributes its value for `key` (a published value or an answer of the
    /// application to `request`).
    Gather {
        key: String,
        request: Vec<u8>,
        purpose: Purpose,
    },
    /// As gather, but the values are combined with `reducer` at every hop.
    Reduce {
        key: String,
        request: Vec<u8>,
        reducer: Reducer,
        purpose: Purpose,
    },
}

/// The answer of a subtree, flowing up to the node it received the operation from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpPart {
    /// Nodes the operation reached (they delivered, took their item, or were asked).
    pub reached: Vec<NodeId>,
    /// Nodes that were asked to contribute and did not (no value, or it could not be
    /// combined).
    pub declined: Vec<NodeId>,
    /// Gather: the contributed values.
    pub items: Vec<(NodeId, Vec<u8>)>,
    /// Reduce: who is counted in `value`.
    pub contributors: Vec<NodeId>,
    /// Reduce: the combined value of `contributors`.
    pub value: Option<Vec<u8>>,
    /// Where the subtree passed the operation on out of its cluster: `(node, its tree child
    /// in another cluster)`. A cluster entry sends to those children itself next time (one
    /// in-cluster hop less for every other cluster) and serves the nodes first. An entry
    /// answering across a cluster boundary leaves its own cluster's pairs out.
    pub exits: Vec<(NodeId, NodeId)>,
}

/// Messages of the collective operations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CollectiveMessage {
    /// The operation reaches the receiver. `budget_us` is how long the receiver may take to
    /// answer; `direct` means the sender asks the receiver alone (a retry, or a scatter item
    /// outside every subtree) and it must not forward; `more` means further parts of the
    /// same operation follow from the sender. `plan` is the receiver's delegation inside a
    /// cluster: the nodes it is to pass the operation on to (see `collective/plan.rs`).
    /// `hoisted` are tree children outside the cluster, of the receiver or of its
    /// delegation, that the cluster's entry already sent to: they are not sent again.
    /// `covered` is set when the sender planned: the tags ([`cover_tag`]) of every node of
    /// the cluster the plan reaches, so the receiver passes the operation on along the tree
    /// only to those of its children in the cluster that the plan does not reach (nodes
    /// new below it since the plan was learned). Empty when the sender followed the tree.
    /// `route`, when not empty, replaces all of that: the operation follows an explicit
    /// tree chosen by its root (a stripe of a large broadcast), and these are the
    /// (sender, receiver) edges of the receiver's subtree in it; a leaf of the route gets
    /// the single edge (itself, itself) and passes the operation on to no one.
    /// `group`, when set, scopes the operation to that group's members: the others relay
    /// it but neither deliver nor contribute, and are not counted as reached.
    Down {
        op: OpId,
        budget_us: u32,
        direct: bool,
        more: bool,
        plan: Vec<NodeId>,
        hoisted: Vec<NodeId>,
        covered: Vec<u16>,
        body: DownBody,
        route: Vec<(NodeId, NodeId)>,
        group: Option<String>,
    },
    /// The answer of the sender's subtree (or of the sender alone after a direct request);
    /// `last` is false when further parts follow.
    Up { op: OpId, last: bool, part: UpPart },
}

/// Why bytes could not be decoded into a [`Message`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// Nothing to decode.
    #[error("empty frame")]
    Empty,
    /// The frame is larger than [`MAX_MESSAGE_BYTES`].
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge { len: usize, limit: usize },
    /// The first byte is not [`WIRE_VERSION`].
    #[error("unsupported wire version {got} (expected {expected})")]
    Version { got: u8, expected: u8 },
    /// The payload is not a valid message.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// Decoding succeeded but bytes were left over.
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}

/// Encodes any wire value as one frame: version byte, then postcard, within the size limit.
fn encode_frame<T: Serialize>(value: &T) -> Result<Vec<u8>, WireError> {
    let framed = postcard::to_extend(value, vec![WIRE_VERSION])
        .map_err(|e| WireError::Malformed(e.to_string()))?;
    if framed.len() > MAX_MESSAGE_BYTES {
        return Err(WireError::TooLarge {
            len: framed.len(),
            limit: MAX_MESSAGE_BYTES,
        });
    }
    Ok(framed)
}

/// Decodes one frame made by [`encode_frame`]; never panics, whatever the bytes.
fn decode_frame<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, WireError> {
    let (&version, body) = bytes.split_first().ok_or(WireError::Empty)?;
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(WireError::TooLarge {
            len: bytes.len(),
            limit: MAX_MESSAGE_BYTES,
        });
    }
    if version != WIRE_VERSION {
        return Err(WireError::Version {
            got: version,
            expected: WIRE_VERSION,
        });
    }
    let (value, rest) =
        postcard::take_from_bytes::<T>(body).map_err(|e| WireError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(WireError::Trailing(rest.len()));
    }
    Ok(value)
}

impl Message {
    /// Encodes the message as one frame: version byte, then postcard.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        encode_frame(self)
    }

    /// Decodes one frame made by [`Message::encode`]. Any input, however malformed,
    /// returns an error rather than panicking.
    pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
        decode_frame(bytes)
    }

    /// The encoded size in bytes (what the simulator charges as control traffic).
    pub fn encoded_len(&self) -> usize {
        1 + postcard::experimental::serialized_size(self).unwrap_or(0)
    }
}

/// Questions a node's operator asks other members (e.g. to draw a whole tree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueryMessage {
    /// "Who is your parent in `root`'s tree?"
    TreeRequest { id: u64, root: NodeId },
    /// Answer to [`QueryMessage::TreeRequest`]; `dist_us` is `None` when disconnected.
    TreeReply {
        id: u64,
        root: NodeId,
        parent: Option<NodeId>,
        dist_us: Option<u64>,
    },
}

/// What travels in one frame between two connected nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Packet {
    /// Tree protocol, handled by the [`crate::proto::Core`].
    Overlay(Message),
    /// Membership, handled by [`crate::proto::gossip::Gossip`].
    Gossip(GossipMessage),
    /// Operator queries, answered by the network driver from the core's state.
    Query(QueryMessage),
    /// First frame of a data-plane stream: the raw bytes of a [`DownBody::Stream`] payload
    /// follow on the same QUIC stream.
    Data(DataHeader),
    /// First frame of a point-to-point transfer of a large collective: the raw bytes
    /// follow on the same QUIC stream (see `crate::net::bulk`).
    Bulk(BulkHeader),
    /// The overlay's join token after a rotation, sent only over admitted connections and
    /// handled by the network layer (see `crate::net::token_ring`). Added after the
    /// other variants, so older frames still decode.
    Token(TokenUpdate),
}

/// Opens a point-to-point transfer (see [`Packet::Bulk`]). The sender is the connection's
/// authenticated peer, never a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BulkHeader {
    /// The operation (and attempt) the bytes belong to.
    pub op: u64,
    /// Which transfer of it (phase and chunk).
    pub tag: u32,
    /// How many bytes follow.
    pub len: u64,
}

/// Opens a data-plane stream (see [`Packet::Data`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataHeader {
    /// The broadcast the bytes belong to.
    pub op: OpId,
    /// How many bytes follow.
    pub len: u64,
    /// SHA-256 of the bytes.
    pub digest: [u8; 32],
}

impl Packet {
    /// Encodes the packet as one frame: version byte, then postcard.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        encode_frame(self)
    }

    /// Decodes one frame made by [`Packet::encode`]; never panics.
    pub fn decode(bytes: &[u8]) -> Result<Packet, WireError> {
        decode_frame(bytes)
    }

    /// The packet as sent at `now_us` (µs on the sender's clock): an RTT probe carries
    /// its send time, which must not count a wait for the connection; other packets are
    /// unchanged.
    pub fn stamped(self, now_us: u64) -> Packet {
        match self {
            Packet::Overlay(Message::Ping {
                rtt_hint_us, watch, ..
            }) => Packet::Overlay(Message::Ping {
                sent_us: now_us,
                rtt_hint_us,
                watch,
            }),
            Packet::Overlay(Message::PongPing { sent_us, watch, .. }) => {
                Packet::Overlay(Message::PongPing {
                    sent_us,
                    ping_sent_us: now_us,
                    watch,
                })
            }
            other => other,
        }
    }
}

mod token;
pub use self::token::TokenUpdate;

#[cfg(test)]
mod tests;
