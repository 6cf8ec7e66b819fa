//! The engine's records: one operation at a relay, one at its root, and the plans relays
//! pass along.

use super::REMEMBER;
use crate::proto::collective::OpKind;
use crate::proto::collective::acc::Acc;
use crate::proto::message::{DownBody, OpId, Purpose, Reducer};
use crate::proto::{NodeId, Time};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// This node's own part in an operation.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Own {
    /// Broadcast and scatter: nothing to contribute.
    None,
    /// Waiting for a published value or the application's answer.
    Pending,
    /// Contributed this (`None`: declined).
    Given(Option<Vec<u8>>),
    /// A streamed broadcast: waiting for the data plane to have the payload.
    Stream,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// A scatter whose further parts are still coming from the sender.
    AwaitMore,
    /// Waiting for children and this node's own part.
    Collecting,
    /// Answered; remembered for duplicates, late answers and direct requests.
    Done,
}

/// One operation at one node.
pub(super) struct Relay {
    /// Whom to answer (this node itself at the root).
    pub(super) from: NodeId,
    pub(super) kind: OpKind,
    pub(super) key: String,
    pub(super) request: Vec<u8>,
    pub(super) reducer: Option<Reducer>,
    pub(super) phase: Phase,
    pub(super) deadline: Time,
    pub(super) forget_at: Time,
    /// Nodes sent a part of the operation and not answered yet; `true` for tree children.
    pub(super) waiting: BTreeMap<NodeId, bool>,
    pub(super) acc: Acc,
    pub(super) own: Own,
    /// Whether the payload or item was delivered here.
    pub(super) delivered: bool,
    /// Scatter items received so far while more parts are coming.
    pub(super) pending_items: Vec<(NodeId, Vec<u8>)>,
    /// Scatter: the items came with a delegation inside the cluster, so they are passed on
    /// by plan, not along the tree.
    pub(super) delegated: bool,
    /// Direct requests waiting for this node's own part.
    pub(super) direct_waiters: Vec<NodeId>,
    /// Whether the operation entered this node's cluster here (it planned the spread).
    pub(super) entry: bool,
    /// The group the operation is scoped to: a node outside it relays and nothing more.
    pub(super) group: Option<String>,
}

impl Relay {
    /// A relay for an operation from `from`, before its kind and contents are known.
    pub(super) fn blank(from: NodeId, phase: Phase, deadline: Time) -> Relay {
        Relay {
            from,
            kind: OpKind::Broadcast,
            key: String::new(),
            request: Vec::new(),
            reducer: None,
            phase,
            deadline,
            forget_at: deadline + REMEMBER,
            waiting: BTreeMap::new(),
            acc: Acc::default(),
            own: Own::None,
            delivered: false,
            pending_items: Vec::new(),
            delegated: false,
            direct_waiters: Vec::new(),
            entry: false,
            group: None,
        }
    }
}

/// What a sender inside the cluster told the receiver about its part of the spread.
#[derive(Clone, Debug, Default)]
pub(in crate::proto::collective) struct Plan {
    /// The nodes the receiver is to pass the operation on to (empty: follow the tree).
    pub(super) delegation: Vec<NodeId>,
    /// Children outside the cluster the entry already sent to.
    pub(super) hoisted: Vec<NodeId>,
    /// Tags of the cluster's nodes the entry's plan reaches (empty: no plan; see
    /// [`CollectiveMessage::Down`]).
    pub(super) covered: Vec<u16>,
    /// The explicit tree the operation follows below the receiver, as (sender, receiver)
    /// edges (empty: the overlay's tree; see [`CollectiveMessage::Down`]).
    pub(super) route: Vec<(NodeId, NodeId)>,
    /// The group the operation is scoped to (see [`CollectiveMessage::Down`]).
    pub(super) group: Option<String>,
}

/// One send of a relay: to whom, and what that node is told (see [`Plan`]).
pub(in crate::proto::collective) struct Target {
    pub(super) to: NodeId,
    pub(super) plan: Plan,
}

/// The in-cluster part of an accepted operation, left until the sends across the wide
/// area it came with are drained: those have the long way to go, and working out the
/// cluster's plan before they leave would delay every other cluster by that much. The
/// core runs it when its transmits run dry ([`crate::proto::Core::poll_transmit`]), or
/// before its next input, at the same `now`, so the outputs and their order are those of
/// one uninterrupted call.
pub(in crate::proto::collective) struct Deferred {
    pub(super) now: Time,
    pub(super) op: OpId,
    pub(super) from: NodeId,
    pub(super) budget_us: u32,
    pub(super) plan: Plan,
    pub(super) body: DownBody,
}

/// An operation this node started, as its root.
pub(super) struct Origin {
    pub(super) kind: OpKind,
    pub(super) purpose: Purpose,
    pub(super) started: Time,
    pub(super) deadline: Time,
    /// The body sent to members asked directly.
    pub(super) body: DownBody,
    pub(super) expected: Vec<NodeId>,
    pub(super) unknown: Vec<NodeId>,
    /// Scatter: each destination's item, for direct retries.
    pub(super) items: HashMap<NodeId, Vec<u8>>,
    pub(super) acc: Acc,
    /// The tree phase is over (the root's own relay answered).
    pub(super) tree_done: bool,
    pub(super) next_retry: Time,
    pub(super) retry_gap: Duration,
    /// For a barrier: its name.
    pub(super) barrier: Option<String>,
    /// The group it is scoped to.
    pub(super) group: Option<String>,
}

/// A wake-up: which operation, and whether for its relay or its origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Slot {
    Relay,
    Origin,
}
