//! What the driver reports to the API: status snapshots, tree answers, member events and
//! deliveries. These types live here, below [`crate::api`] (which re-exports them), so the
//! driver can build them without importing the API: imports flow proto <- net <- api.

use crate::proto::{ClusterView, DeliveryKind, DownReason, Liveness, NodeId, TreeView};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// A value that does not decode as the type asked for (the payload was not encoded from
/// it, or came from a different version of the application).
#[derive(Debug, thiserror::Error)]
#[error("cannot decode the value: {0}")]
pub struct DecodeError(#[from] pub postcard::Error);

/// A payload delivered to this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The node that started the operation.
    pub root: NodeId,
    /// The operation's number at that root.
    pub op: u64,
    /// A broadcast, this node's scatter item, or the result of an allreduce, allgather
    /// or barrier.
    pub kind: DeliveryKind,
    /// The bytes.
    pub payload: Bytes,
    /// The group it was sent to ([`crate::api::Group::broadcast`]); `None`: every member.
    pub group: Option<String>,
    /// When this node had it: when the connection read the message that delivered it (for
    /// a streamed payload, when the stream was complete; at the root, when it started).
    /// Earlier than when the application sees it by the driver's and the scheduler's
    /// latency, so latency measurements can start and stop at the network, as a socket
    /// timestamp would.
    pub received: std::time::Instant,
}

impl Delivery {
    /// Decodes a payload sent with `Node::broadcast_value`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, DecodeError> {
        postcard::from_bytes(&self.payload).map_err(DecodeError)
    }
}

/// One member as a node sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemberInfo {
    /// Its id.
    pub id: NodeId,
    /// Its readable name.
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Alive, suspect, dead or left.
    pub state: Liveness,
    /// Filtered RTT from this node, when measured.
    pub rtt_ms: Option<f64>,
    /// The groups it is a member of, sorted ([`crate::api::Group`]).
    #[serde(default)]
    pub groups: Vec<String>,
}

/// This node's place in one root's tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TreeInfo {
    /// The tree's root.
    pub root: NodeId,
    /// This node's parent (`None` at the root or while disconnected).
    pub parent: Option<NodeId>,
    /// This node's children.
    pub children: Vec<NodeId>,
    /// Distance to the root along the tree, in ms.
    pub dist_ms: f64,
    /// Largest serial of the root received.
    pub serial: u32,
    /// Whether this node has a path to the root.
    pub connected: bool,
}

impl TreeInfo {
    /// The API's view of the core's tree state (the core's type stays inside the crate).
    pub(crate) fn from_view(v: TreeView) -> Self {
        TreeInfo {
            root: v.root,
            parent: v.parent,
            children: v.children,
            dist_ms: v.dist.as_secs_f64() * 1e3,
            serial: v.serial,
            connected: v.connected,
        }
    }
}

/// A snapshot of a running node (also what `overlay-node status --json` prints).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// This node.
    pub id: NodeId,
    /// Its name.
    pub name: String,
    /// Its listen address.
    pub addr: SocketAddr,
    /// Every member known, this node included.
    pub members: Vec<MemberInfo>,
    /// This node's state in every tree.
    pub trees: Vec<TreeInfo>,
    /// Open peer connections.
    pub connections: usize,
    /// Frames received and decoded.
    pub frames_in: u64,
    /// Frames sent.
    pub frames_out: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Frames dropped because they did not decode.
    pub frames_rejected: u64,
    /// Connections closed for oversized or truncated frames.
    pub protocol_errors: u64,
    /// Connections refused for a bad join-token proof.
    pub auth_failures: u64,
    /// Inbound connections refused for any reason (handshakes over the limit or failed,
    /// bad token proofs, peers kept out).
    #[serde(default)]
    pub refused_connections: u64,
    /// Times a peer was kept out for too many malformed frames or protocol violations.
    #[serde(default)]
    pub peers_kept_out: u64,
    /// Admitted connections opened since start, dialed or accepted (each cost a
    /// handshake and a token proof).
    #[serde(default)]
    pub links_opened: u64,
    /// Membership records refused because their owner's signature did not verify
    /// (forged or altered by the member that sent them).
    #[serde(default)]
    pub forged_records: u64,
    /// Joins this node answered lightly (a few records; the joiner pulls the rest from
    /// another member) because full answers ran past its budget.
    #[serde(default)]
    pub light_joins: u64,
    /// How starved of CPU the node believes itself to be, 0 (healthy) to 8: its membership
    /// protocol's probe periods, probe timeouts and suspicion timeouts are stretched by
    /// one plus this (Lifeguard's local health; it rises when the node's event loop runs
    /// late or it must refute a suspicion of itself).
    #[serde(default)]
    pub local_health: u32,
    /// Packets dropped (queues full, peer unreachable).
    pub packets_dropped: u64,
    /// Time since start.
    pub uptime_ms: u64,
    /// The groups this node discovered from measured latencies, level by level (empty
    /// until its first summaries are in).
    #[serde(default)]
    pub clusters: Vec<ClusterLevel>,
    /// The cost of one send the in-cluster plan goes by, µs: measured on this node once
    /// it has sent a burst of an operation to several peers, configured until then.
    #[serde(default)]
    pub send_cost_us: u64,
    /// Whether `send_cost_us` is measured.
    #[serde(default)]
    pub send_cost_measured: bool,
    /// Times the transport reported that frames to a peer may have been lost (a dropped
    /// send, a failed dial, a closed connection).
    #[serde(default)]
    pub links_lost: u64,
    /// Times this node sent a peer its state again after such a report, once heard from
    /// (a peer that takes its adverts or shares a tree link with it).
    #[serde(default)]
    pub resyncs_after_loss: u64,
    /// Bandwidth between the discovered clusters as this node aggregated it from every
    /// node's measurements (directed; empty until the first trains are in).
    #[serde(default)]
    pub bandwidth: Vec<ClusterBandwidth>,
    /// What measuring bandwidth cost this node: train bytes sent and received.
    #[serde(default)]
    pub probe_bytes_sent: u64,
    #[serde(default)]
    pub probe_bytes_received: u64,
    /// Windows in which one of this node's connections ran its path full (QUIC's path
    /// statistics: it backed off for congestion while it carried data), and clusters this
    /// node measured again because a peer reported such a window far below its estimate.
    #[serde(default)]
    pub paths_saturated: u64,
    #[serde(default)]
    pub saturations_rechecked: u64,
    /// Real transfers whose rate this node took as a passive bandwidth measurement: a
    /// broadcast's data streams, and the large collectives' transfers (one figure per busy
    /// period of a peer's transfers here).
    #[serde(default)]
    pub transfers_measured: u64,
    /// The decision table of the large collectives this node planned (see
    /// `Node::collective_table`).
    #[serde(default)]
    pub collectives: Vec<crate::proto::bulk::TuneEntry>,
    /// Tokio tasks alive in the runtime the node runs on (the daemon's own; an embedding
    /// application's tasks count too when it shares its runtime). A count that keeps
    /// growing while the overlay is steady is a leak.
    #[serde(default)]
    pub tasks: u64,
    /// Frames and bytes by kind of message, each way (kinds that carried nothing left out).
    #[serde(default)]
    pub traffic: Vec<KindTraffic>,
    /// What QUIC put on the wire for the peer connections, beneath the frames above.
    #[serde(default)]
    pub quic: QuicCounters,
    /// How this node's peer connections came and went.
    #[serde(default)]
    pub links: LinkCounters,
    /// What the protocol core did: parent switches, adverts by reason, peers watched,
    /// probes merged (see [`crate::CoreStats`]).
    #[serde(default)]
    pub core: crate::proto::CoreStats,
}

/// What QUIC put on the wire for a node's admitted peer connections since it started,
/// closed connections included up to when the node let them go (their closing frames
/// and handshakes refused before admission are not counted).
///
/// Every datagram costs the sender a system call and the receiver a wake-up, whatever it
/// carries, so on an idle overlay these, more than bytes, are what CPU follows. A datagram
/// may carry several frames; one that carries only ACK frames is an acknowledgement the
/// peer's packets asked for.
///
/// ```
/// let q = overlay::QuicCounters::default();
/// assert_eq!(q.datagrams_sent, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuicCounters {
    /// UDP datagrams sent.
    pub datagrams_sent: u64,
    /// UDP datagrams received.
    pub datagrams_received: u64,
    /// ACK frames sent (alone or with other frames).
    pub ack_frames_sent: u64,
    /// PING frames sent: keep-alives of idle connections and loss probes.
    pub ping_frames_sent: u64,
    /// STREAM frames sent: the overlay's messages and data.
    pub stream_frames_sent: u64,
    /// Packets QUIC declared lost.
    pub packets_lost: u64,
}

impl std::ops::AddAssign for QuicCounters {
    fn add_assign(&mut self, o: QuicCounters) {
        self.datagrams_sent += o.datagrams_sent;
        self.datagrams_received += o.datagrams_received;
        self.ack_frames_sent += o.ack_frames_sent;
        self.ping_frames_sent += o.ping_frames_sent;
        self.stream_frames_sent += o.stream_frames_sent;
        self.packets_lost += o.packets_lost;
    }
}

/// What one kind of message cost a node (see [`crate::proto::packet_kind::PacketKind`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindTraffic {
    /// The kind's name (`probe`, `advert`, `tree_link`, `collective`, `cluster`,
    /// `bandwidth`, `membership`, `query`, `data`, `bulk`, `admission`). Headers of data
    /// streams and transfers (`data`, `bulk`) are counted as received only: their own
    /// tasks write them.
    pub kind: String,
    /// Frames received.
    pub frames_in: u64,
    /// Bytes received (encoded frames, without the length prefix).
    pub bytes_in: u64,
    /// Frames handed to connections.
    pub frames_out: u64,
    /// Bytes handed to connections (encoded frames, without the length prefix).
    pub bytes_out: u64,
}

/// One directed cluster-to-cluster bandwidth estimate (clusters named by their smallest
/// member, as in [`ClusterGroup::label`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterBandwidth {
    /// The sending cluster.
    pub from: NodeId,
    /// The receiving cluster (the same as `from`: inside it).
    pub to: NodeId,
    /// The estimate, Mbit/s: the median of the figures.
    pub mbit: f64,
    /// How many figures (measuring node and peer pairs) it rests on.
    pub figures: u32,
    /// Age of the newest figure, seconds.
    pub age_s: f64,
    /// The model's one-way latency between the two clusters, ms (half the smallest RTT
    /// published between their members; `None` where none is): with `mbit`, the pair's
    /// P-LogP-style model (latency L, gap g(m) = m / rate).
    #[serde(default)]
    pub latency_ms: Option<f64>,
}

/// One member's place in a tree, as it answered a tree query.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TreeNode {
    /// The member.
    pub id: NodeId,
    /// Its name.
    pub name: String,
    /// Its parent (`None` at the root, when disconnected, or if it did not answer).
    pub parent: Option<NodeId>,
    /// Its distance to the root in ms, when connected.
    pub dist_ms: Option<f64>,
    /// Whether it answered in time.
    pub answered: bool,
}

/// A whole tree as the members answered a node's query.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TreeSnapshot {
    /// The tree's root.
    pub root: NodeId,
    /// Every live member this node knows, sorted by id.
    pub nodes: Vec<TreeNode>,
}

impl TreeSnapshot {
    /// How many members reach the root by following parents (the root included), and the
    /// most hops any of them takes: `(spanned, depth)`. A member whose chain of parents
    /// breaks off or loops is not spanned.
    ///
    /// ```
    /// # use overlay::api::{TreeNode, TreeSnapshot};
    /// # use overlay::NodeId;
    /// let id = |n| NodeId::from_seed(1, n);
    /// let node = |n, parent| TreeNode {
    ///     id: id(n), name: String::new(), parent, dist_ms: None, answered: true,
    /// };
    /// let tree = TreeSnapshot {
    ///     root: id(0),
    ///     nodes: vec![node(0, None), node(1, Some(id(0))), node(2, Some(id(1))), node(3, None)],
    /// };
    /// assert_eq!(tree.reach(), (3, 2));
    /// ```
    pub fn reach(&self) -> (usize, usize) {
        let parent: std::collections::HashMap<NodeId, Option<NodeId>> =
            self.nodes.iter().map(|n| (n.id, n.parent)).collect();
        let (mut spanned, mut depth) = (0, 0);
        for n in &self.nodes {
            let (mut at, mut hops) = (n.id, 0);
            // A chain longer than the member count loops.
            while at != self.root && hops <= self.nodes.len() {
                match parent.get(&at).copied().flatten() {
                    Some(p) => (at, hops) = (p, hops + 1),
                    None => break,
                }
            }
            if at == self.root {
                spanned += 1;
                depth = depth.max(hops);
            }
        }
        (spanned, depth)
    }
}

/// Something that changed at a node.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// A member joined or came back.
    MemberUp(MemberInfo),
    /// A member left or was declared dead.
    MemberDown { id: NodeId, reason: DownReason },
    /// This node's parent in `root`'s tree changed.
    ParentChanged {
        root: NodeId,
        parent: Option<NodeId>,
    },
    /// This node gained or lost its path to `root`.
    TreeConnected { root: NodeId, connected: bool },
    /// A tree appeared.
    TreeAdded { root: NodeId },
    /// A tree was dropped (its root left or died, or with shared trees, this node no
    /// longer keeps it: see `Config::shared_trees_from`).
    TreeRemoved { root: NodeId },
    /// This consumer fell behind: `missed` events were dropped for it (the oldest); the
    /// events after this one are the oldest still queued. Read `status()` to resync.
    Lagged { missed: u64 },
}

/// One level of the discovered groups (level 1: clusters; 2: groups of clusters, such as
/// sites; and so on). Every level is a partition of the members.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterLevel {
    /// The level, from 1.
    pub level: usize,
    /// Its groups, sorted by label.
    pub groups: Vec<ClusterGroup>,
}

/// One discovered group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterGroup {
    /// Its name: the smallest member id (every node that has the same summaries agrees).
    pub label: NodeId,
    /// Its members, sorted by id.
    pub members: Vec<NodeId>,
    /// Their names, in the same order (empty where unknown).
    pub names: Vec<String>,
    /// The typical RTT holding it together, in ms (median of the published RTTs joining
    /// its parts); `None` for a member alone.
    pub rtt_ms: Option<f64>,
    /// Whether the reporting node is in it.
    pub mine: bool,
}

/// The levels of `view` as a status reports them; `name` gives a member's name.
pub(crate) fn cluster_levels(
    view: &ClusterView,
    me: NodeId,
    name: impl Fn(&NodeId) -> Option<String>,
) -> Vec<ClusterLevel> {
    view.levels
        .iter()
        .enumerate()
        .map(|(i, groups)| ClusterLevel {
            level: i + 1,
            groups: groups
                .iter()
                .map(|g| ClusterGroup {
                    label: g.label,
                    names: g
                        .members
                        .iter()
                        .map(|m| name(m).unwrap_or_default())
                        .collect(),
                    members: g.members.clone(),
                    rtt_ms: g.rtt_us.map(|us| us as f64 / 1e3),
                    mine: g.members.binary_search(&me).is_ok(),
                })
                .collect(),
        })
        .collect()
}

/// The members as the driver last saw them, shared with every API handle: the driver
/// writes one entry per membership change and refreshes the RTTs once a second; the API
/// reads it without a round trip to the driver (a concurrent map, so neither side waits
/// for the other).
///
/// Each entry is updated on its own, in the order the events happen, so a snapshot taken
/// during an update holds every member either before or after its own change: what the
/// node knew at some moment per member, never a torn record.
#[derive(Clone, Debug, Default)]
pub struct MemberView(std::sync::Arc<dashmap::DashMap<NodeId, MemberInfo>>);

impl MemberView {
    /// Makes the view hold exactly `members`.
    pub fn replace(&self, members: impl IntoIterator<Item = MemberInfo>) {
        let mut seen = std::collections::HashSet::new();
        for m in members {
            seen.insert(m.id);
            self.0.insert(m.id, m);
        }
        self.0.retain(|id, _| seen.contains(id));
    }

    /// Writes one member's entry (a member that joined or changed state).
    pub fn upsert(&self, member: MemberInfo) {
        self.0.insert(member.id, member);
    }

    /// Whether `id` is a member, alive or not, that has not left: one that may still
    /// hold the token of before a rotation (a node that crashed and restarts is not a new
    /// join; one that left is).
    pub fn is_known_member(&self, id: &NodeId) -> bool {
        self.0.get(id).is_some_and(|m| m.state != Liveness::Left)
    }

    /// Every member, sorted by id.
    pub fn snapshot(&self) -> Vec<MemberInfo> {
        let mut all: Vec<MemberInfo> = self.0.iter().map(|e| e.value().clone()).collect();
        all.sort_by_key(|m| m.id);
        all
    }
}

mod broadcast_plan;
mod links;
#[cfg(test)]
mod tests;

pub use broadcast_plan::{BroadcastPlan, PlannedTree};
pub use links::LinkCounters;
