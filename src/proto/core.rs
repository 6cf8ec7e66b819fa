//! (in progress) The state machine.
use super::*;
use std::collections::VecDeque;

/// The protocol core of one node.
pub struct Core {
    id: NodeId,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
}

impl Core {
    /// A core for node `id`, with its own seeded RNG, started at `now`.
    pub fn new(id: NodeId, _config: Config, _seed: u64, _now: Time) -> Self {
        Core { id, transmits: VecDeque::new(), events: VecDeque::new() }
    }
    /// This node's id.
    pub fn id(&self) -> NodeId { self.id }
    /// Feeds one input.
    pub fn handle(&mut self, _now: Time, _input: Input) {}
    /// Next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> { self.transmits.pop_front() }
    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> { self.events.pop_front() }
    /// When to call `handle(now, Input::Timeout)` next.
    pub fn poll_timeout(&self) -> Option<Time> { None }
    /// This node's parent in `root`'s tree.
    pub fn parent(&self, _root: NodeId) -> Option<NodeId> { None }
    /// Whether this node has a path to `root`.
    pub fn is_connected(&self, root: NodeId) -> bool { root == self.id }
    /// Snapshot of this node's state in `root`'s tree.
    pub fn tree(&self, _root: NodeId) -> Option<TreeView> { None }
    /// Roots tracked.
    pub fn roots(&self) -> Vec<NodeId> { vec![self.id] }
    /// Filtered RTT estimate to `peer`.
    pub fn rtt(&self, _peer: NodeId) -> Option<std::time::Duration> { None }
    /// Known members and their state.
    pub fn members(&self) -> Vec<(NodeId, MemberState)> { vec![] }
}
