//! The sans-IO protocol core.
//!
//! No tokio, no sockets, no clock reads, no global RNG: a [`Core`] is a pure state machine
//! driven by the QUIC driver (`net`) or by the deterministic simulator (`sim`).
//!
//! # The drain rule
//!
//! Inputs go in through [`Core::handle`]. After **every** call to `handle`, the driver
//! drains [`Core::poll_transmit`] and [`Core::poll_event`] until both return `None`, then
//! sleeps until [`Core::poll_timeout`] and calls `handle(now, Input::Timeout)` when it is
//! reached (earlier inputs are fine; the core re-arms its deadline). Outputs that are not
//! drained accumulate; they are never dropped.
//!
//! One output is lazy: when a collective operation arrives with sends across the wide area,
//! its in-cluster part is worked out only once those are drained, inside `poll_transmit`
//! (or before the next input), at the same `now`, so the outputs are those of one call. A
//! driver that wants the far copies on the wire before that work sends what
//! [`Core::poll_ready_transmit`] gives while [`Core::has_deferred`] holds, lets its
//! connections run, then drains as usual (the QUIC driver does; the simulator need not).
//!
//! Where to find things:
//! - the tree rules (conditions (1)-(4), shortcut, feasibility, oscillation guard): [`tree`];
//! - the wire format: [`message`];
//! - members: [`membership`]; RTT filter: [`rtt`]; candidate set: [`candidates`];
//! - clusters and sites discovered from the measured latencies: [`clusters`];
//! - timers: [`timers`]; the tree state machine: [`core`]; the whole node (core, membership
//!   and tree-query answers behind one input and one output type, its own drain rule): [`node`].

// Without the `sim` feature this module is private to the crate, and the parts only the
// simulator, the harnesses and the tests use would be reported unused.
#![cfg_attr(not(feature = "sim"), allow(dead_code, unused_imports))]

pub mod bandwidth;
pub mod bulk;
pub mod candidates;
pub mod clusters;
pub mod collective;
pub mod config;
pub mod core;
pub(crate) mod drain;
pub mod gossip;
pub mod id;
pub mod membership;
pub mod message;
pub mod node;
pub mod outbox;
pub mod packet_kind;
pub mod rng;
pub mod rtt;
pub mod stripe;
pub mod time;
pub mod timers;
pub mod tree;

pub use self::clusters::{ClusterView, Group};
pub use self::collective::{Delivered, DeliveryKind, OpKind, OpReport, ReduceFn, Start, StartKind};
pub use self::config::Config;
pub use self::core::{Core, CoreStats, StripePlan};
pub use self::id::NodeId;
pub use self::membership::MemberState;
pub use self::message::{
    AdvertEntry, BandwidthEdge, BulkHeader, ClusterEdge, ClusterMessage, ClusterSummary,
    CollectiveMessage, DataHeader, DownBody, GossipMessage, Liveness, MemberRecord, Message,
    NumKind, OpId, Packet, Purpose, QueryMessage, Reducer, WireError,
};
pub use self::node::{Class, Node, NodeInput, NodeOutput};
pub use self::time::Time;

use std::time::Duration;

/// Everything that can happen to a core. One input type; see the drain rule above.
#[derive(Clone, Debug)]
pub enum Input {
    /// A message arrived from an authenticated peer.
    Received { from: NodeId, msg: Message },
    /// The deadline returned by [`Core::poll_timeout`] was reached.
    Timeout,
    /// A member joined (or was learnt about).
    MemberUp { id: NodeId },
    /// A member left gracefully or was declared dead.
    MemberDown { id: NodeId, reason: DownReason },
    /// The groups member `id` (or this node) is in changed: collectives scoped to a group
    /// expect, and deliver to, its members only ([`Start::group`]).
    MemberGroups { id: NodeId, groups: Vec<String> },
    /// An RTT sample measured by the driver (e.g. from the QUIC connection).
    RttSample { peer: NodeId, rtt: Duration },
    /// The driver measured how long one send of a collective operation took to leave this
    /// node (a burst's span over its sends). From then on the in-cluster plan goes by the
    /// median of the recent measurements instead of [`Config::send_cost`].
    SendCost { per_send: Duration },
    /// The transport may have lost messages to `peer`: a send was dropped (full queue,
    /// failed dial) or a connection to it closed with frames perhaps unsent. Adverts are
    /// deltas and tree state travels only when it changes, so one lost leaves `peer` with a
    /// stale view of our trees until our next full advert (every `full_advert_every`
    /// serial periods or more) or the tree's next refresh. Once `peer` is heard
    /// from again, which shows the way back works, the core sends it its full state (if it
    /// takes our adverts) and repeats its attaches and entries in the trees they share; at
    /// most four times per serial period. Collective and cluster messages are not resent
    /// (they have their own repair).
    LinkLost { peer: NodeId },
    /// This node started (`active`) or stopped moving bulk data (data-plane streams in or
    /// out, or large inline payloads: the QUIC driver counts a frame of 64 KiB or more as
    /// bulk for a second). A transfer fills the queues of the links it crosses, so the RTT samples taken
    /// meanwhile, and for [`BULK_SETTLE`] after, measure queueing as much as the path: they
    /// may lower an estimate but never raise it, and the latency trees of small messages
    /// stay where they are during large ones.
    BulkTransfer { active: bool },
    /// A packet train this node asked for ([`Message::TrainRequest`]) arrived from `from`:
    /// `received` datagrams of `size` bytes, of which the last `spread` arrived over
    /// `span` (the driver may leave the head of the train out of the spread).
    TrainArrived {
        from: NodeId,
        id: u32,
        received: u16,
        size: u16,
        spread: u16,
        span: Duration,
    },
    /// A real transfer from `from` (a data-plane stream) moved `bytes` in `span`: a
    /// passive bandwidth measurement.
    TransferRate {
        from: NodeId,
        bytes: u64,
        span: Duration,
    },
    /// This node's connection to `to` backed off for congestion while it carried data:
    /// over `span` it delivered `bytes` (sent minus lost, read from QUIC's path
    /// statistics). The path toward `to` ran full at about that rate: a passive
    /// measurement, passed on to `to` ([`Message::PathSaturated`]), which holds the
    /// inbound estimate and checks it with a train when it is far off.
    PathSaturated {
        to: NodeId,
        bytes: u64,
        span: Duration,
    },
    /// This node's local health score changed (the membership's, see
    /// [`crate::proto::gossip::Gossip::local_health`]; 0 when the node keeps up). While it
    /// is above 0 the host is short of CPU: RTT samples, read late, may lower an estimate
    /// but never raise it (as during [`Input::BulkTransfer`]), and probe rounds and the
    /// gaps between advert flushes are stretched by `1 + score`, so a starved node moves
    /// fewer trees on the strength of its own slowness and spends less of the CPU it lacks.
    LocalHealth { score: u32 },
    /// A request from the application.
    Command(Command),
}

/// How long after a bulk transfer RTT samples still count as taken under load (the
/// queues it filled drain).
pub const BULK_SETTLE: Duration = Duration::from_secs(1);

/// Why a member went away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DownReason {
    /// It announced its departure.
    Left,
    /// It stopped answering and was declared dead.
    Dead,
}

/// Application requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Leave the overlay: detach from every tree and stop.
    Leave,
    /// Start a collective operation with this node as root; its [`Event::Report`] follows.
    Start(Start),
    /// Publish this node's value for `key`: gathers and reduces naming the key take it
    /// without asking the application.
    Publish { key: String, value: Vec<u8> },
    /// Withdraw a published value.
    Withdraw { key: String },
    /// The application's answer to [`Event::ContributionNeeded`] (`None`: decline).
    Contribute { op: OpId, value: Option<Vec<u8>> },
    /// The data plane received (and checked) the payload of a streamed broadcast, or
    /// failed to (`ok` false). At the root, sent before its [`StartKind::Stream`].
    StreamDone { op: OpId, ok: bool },
}

/// A message to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Destination.
    pub to: NodeId,
    /// What to send.
    pub msg: Message,
}

/// Things the core reports to its driver and application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// This node's parent in `root`'s tree changed (`None`: no parent).
    ParentChanged {
        root: NodeId,
        old: Option<NodeId>,
        new: Option<NodeId>,
    },
    /// This node gained or lost its path to `root`.
    ConnectedChanged { root: NodeId, connected: bool },
    /// A new tree is tracked (a member appeared, or with shared trees, discovery placed
    /// it where this node keeps its tree).
    RootAdded { root: NodeId },
    /// A tree was dropped (its root left or died, or with shared trees, it is of another
    /// cluster than this node's and not its representative).
    RootRemoved { root: NodeId },
    /// Membership changed.
    MemberUp { id: NodeId },
    /// A member left or died.
    MemberDown { id: NodeId, reason: DownReason },
    /// [`Command::Leave`] completed: the core has said goodbye and does nothing more.
    Left,
    /// A broadcast payload, scatter item or composite result arrived (once per operation).
    Delivered(Delivered),
    /// A gather or reduce asks for this node's value for `key` and none is published:
    /// answer with [`Command::Contribute`] before the operation's deadline.
    ContributionNeeded {
        op: OpId,
        key: String,
        request: Vec<u8>,
    },
    /// An operation this node started is over.
    Report(Box<OpReport>),
    /// Send `to` a packet train: `packets` datagrams of `size` bytes back to back, tagged
    /// with `id` (it asked with [`Message::TrainRequest`], and the budget allowed it).
    SendTrain {
        to: NodeId,
        id: u32,
        packets: u16,
        size: u16,
    },
    /// `from` sent a message nobody asked for: it is no member (a joiner sends membership
    /// messages only; a departed member's last ones are few), or it is about an operation
    /// this node has no record of (every node that takes part keeps one for a minute past
    /// the deadline, so it is forged or far too late). It was dropped, not passed on;
    /// `bytes` is what it carried (at least [`collective::UNSOLICITED_MIN_BYTES`] for a
    /// collective message, 64 for another), for the driver to hold against the sender.
    Unsolicited { from: NodeId, bytes: u64 },
}

/// A snapshot of this node's state in one tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeView {
    /// The tree's root.
    pub root: NodeId,
    /// This node's parent (`None` at the root, or while disconnected with no parent).
    pub parent: Option<NodeId>,
    /// This node's children, sorted.
    pub children: Vec<NodeId>,
    /// The largest serial of `root` received.
    pub serial: u32,
    /// Distance to the root along the tree.
    pub dist: Duration,
    /// Feasibility distance for the current serial.
    pub fd: Duration,
    /// Whether this node has a path to the root.
    pub connected: bool,
}
