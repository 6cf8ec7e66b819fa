//! What the simulator needs from a node: the core's driver-facing API.

use crate::proto::{Core, Event, GossipMessage, Input, NodeId, Time, Transmit};

/// The part of the core's API the simulator drives. Implemented by [`Core`]; the
/// simulator's own tests implement it with small scripted fakes.
///
/// `Send`: the nodes of a window are handled on several threads.
pub trait SimNode: Send {
    /// Feeds one input (see [`Core::handle`]).
    fn handle(&mut self, now: Time, input: Input);
    /// Next message to send (see [`Core::poll_transmit`]).
    fn poll_transmit(&mut self) -> Option<Transmit>;
    /// Next event (see [`Core::poll_event`]).
    fn poll_event(&mut self) -> Option<Event>;
    /// Next deadline (see [`Core::poll_timeout`]).
    fn poll_timeout(&mut self) -> Option<Time>;
    /// This node's parent in `root`'s tree (see [`Core::parent`]).
    fn parent(&self, root: NodeId) -> Option<NodeId>;

    /// Whether the node runs its own membership protocol. If so the simulator tells it of
    /// no member (no [`Input::MemberUp`] or [`Input::MemberDown`]): a node joins through a
    /// live member ([`SimNode::join_via`]) and learns of the others, their departures and
    /// their crashes from the membership messages it exchanges over the simulated network.
    const OWN_MEMBERSHIP: bool = false;

    /// Asks `via`, a live member, to admit this node (nodes with their own membership).
    fn join_via(&mut self, _now: Time, _via: NodeId) {}

    /// The member this node's join waits on, if no member has admitted it yet.
    fn joining(&self) -> Option<NodeId> {
        None
    }

    /// Next membership message to send (nodes with their own membership).
    fn poll_gossip(&mut self) -> Option<(NodeId, GossipMessage)> {
        None
    }

    /// A membership message arrived.
    fn receive_gossip(&mut self, _now: Time, _from: NodeId, _msg: GossipMessage) {}

    /// The node's tree core, for diagnosis (`None` for scripted fakes).
    fn core(&self) -> Option<&Core> {
        None
    }
}

impl SimNode for Core {
    fn handle(&mut self, now: Time, input: Input) {
        Core::handle(self, now, input)
    }

    fn core(&self) -> Option<&Core> {
        Some(self)
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        Core::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<Event> {
        Core::poll_event(self)
    }
    fn poll_timeout(&mut self) -> Option<Time> {
        Core::poll_timeout(self)
    }
    fn parent(&self, root: NodeId) -> Option<NodeId> {
        Core::parent(self, root)
    }
}

/// Everything known about a node when the simulator creates it.
#[derive(Clone, Copy, Debug)]
pub struct Spawn {
    /// Its id (`NodeId::from_seed(sim seed, index)`).
    pub id: NodeId,
    /// Its index in the simulator (dense, in creation order).
    pub index: usize,
    /// Its cluster (index into the topology's clusters).
    pub cluster: usize,
    /// Its own RNG seed, derived from the simulator's seed.
    pub seed: u64,
    /// When it starts.
    pub now: Time,
}
