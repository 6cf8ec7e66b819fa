//! One protocol node: the tree [`Core`], membership [`Gossip`] and the answers to tree
//! queries behind one input type ([`NodeInput`]) and one drained output type
//! ([`NodeOutput`]). A driver moves bytes, clock readings and timers; every protocol
//! decision (what a member change means for the trees, which peer a message goes to, how
//! urgent it is, whether it opens a data stream) is made here.
//!
//! # The drain rule
//!
//! Inputs go in through [`Node::handle`]. After **every** call, the driver drains
//! [`Node::poll_output`] until it returns `None`, then sleeps until [`Node::poll_timeout`]
//! and calls `handle(now, NodeInput::Timeout)` when it is reached (earlier is fine). An
//! input may be fed between two polls (an application handler answering a
//! [`Event::ContributionNeeded`], say): outputs keep their order and none is dropped.
//!
//! One output is lazy, as in [`Core`]: while [`Node::has_deferred`] holds, an operation's
//! sends across the wide area are ready and its in-cluster part is worked out only once
//! they are drained. A driver that wants the far copies on the wire first takes them with
//! [`Node::poll_ready_output`], lets its connections run, then drains as usual.

use super::collective::ReduceFn;
use super::gossip::{Gossip, GossipEvent};
use super::id::{IdMap, NodeId};
use super::message::{
    CollectiveMessage, DownBody, Liveness, MemberRecord, Message, OpId, Packet, QueryMessage,
};
use super::time::Time;
use super::{Command, Core, DownReason, Event, Input, Transmit};
use std::collections::VecDeque;
use std::time::Duration;

/// Everything that can happen to a [`Node`].
#[derive(Clone, Debug)]
pub enum NodeInput {
    /// The deadline of [`Node::poll_timeout`] was reached.
    Timeout,
    /// A packet arrived from an authenticated peer.
    Received { from: NodeId, packet: Packet },
    /// A connection to a member opened for a join: ask it to admit this node.
    JoinVia { peer: NodeId },
    /// A peer could not be reached (a dial failed).
    Unreachable { peer: NodeId },
    /// Frames to `peer` may have been lost (see [`Input::LinkLost`]).
    LinkLost { peer: NodeId },
    /// What one send of an operation cost to leave this node (see [`Input::SendCost`]).
    SendCost { per_send: Duration },
    /// The driver's event loop woke `by` after a deadline it slept until: the host is short
    /// of CPU, so the membership protocol stretches its timings (see
    /// [`crate::proto::gossip::Gossip::handle_lateness`]).
    RanLate { by: Duration },
    /// An RTT sample measured by the driver.
    RttSample { peer: NodeId, rtt: Duration },
    /// This node started or stopped moving bulk data (see [`Input::BulkTransfer`]).
    BulkTransfer { active: bool },
    /// A bandwidth measurement: a packet train arrived ([`Input::TrainArrived`]), a
    /// transfer's rate was measured ([`Input::TransferRate`]) or a connection ran its path
    /// full ([`Input::PathSaturated`]); other inputs are ignored.
    Measured(Input),
    /// A command of the application; [`Command::Leave`] also says goodbye to every member.
    Command(Command),
    /// Ask every live member for its place in `root`'s tree; the answers come back as
    /// [`NodeOutput::TreeReply`] with this `id`.
    AskTree { id: u64, root: NodeId },
    /// This node is now a member of exactly these groups (sorted, within
    /// [`crate::proto::message::MAX_GROUPS`]): its record changes and spreads; an invalid
    /// list changes nothing.
    SetGroups { groups: Vec<String> },
}

/// How a driver should send a [`NodeOutput::Transmit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Protocol traffic: send at once, dialling the peer if needed.
    Control,
    /// An RTT probe: stamp it again with the time it really leaves (with
    /// [`Packet::stamped`]) if it waited for a connection. `urgent: false` is a one-off
    /// measurement that may wait behind protocol traffic for a dial.
    Probe { urgent: bool },
    /// A message of a collective operation's plan: its send counts towards the send cost
    /// the driver measures ([`NodeInput::SendCost`]).
    Operation,
    /// Announces a data stream: once this is sent, open a stream to the same peer and
    /// send the payload of `op` on it (`len` bytes, SHA-256 `digest`).
    Stream {
        op: OpId,
        len: u64,
        digest: [u8; 32],
    },
}

/// What a [`Node`] asks of its driver and tells its application.
#[derive(Clone, Debug)]
// Transmits dominate and are moved once; boxing them would cost an allocation each.
#[allow(clippy::large_enum_variant)]
pub enum NodeOutput {
    /// Send `packet` to `to`.
    Transmit {
        to: NodeId,
        class: Class,
        packet: Packet,
    },
    /// A tree or collective event of the core (member changes come as the variants below).
    Core(Event),
    /// A member joined, came back, or its record changed.
    MemberUp(std::sync::Arc<MemberRecord>),
    /// A member restarted: its previous run is forgotten (close its old connection
    /// quietly); a [`NodeOutput::MemberUp`] for the new run follows.
    MemberRestarted { id: NodeId },
    /// A member left or was declared dead.
    MemberDown { id: NodeId, reason: DownReason },
    /// A member is suspected (it is still a member).
    MemberSuspect { id: NodeId },
    /// A join was answered: this node is part of the overlay.
    Joined { via: NodeId },
    /// A member answered this node's tree query `id`.
    TreeReply {
        from: NodeId,
        id: u64,
        root: NodeId,
        parent: Option<NodeId>,
        dist_us: Option<u64>,
    },
}

/// The tree core and membership of one node, composed.
pub struct Node {
    core: Core,
    gossip: Gossip,
    /// Boot value of each member as last fed to the core (detects restarts).
    boots: IdMap<NodeId, u64>,
    /// Groups of each member as last fed to the core.
    groups: IdMap<NodeId, Vec<String>>,
    /// Outputs worked out while handling gossip's events, in order.
    pending: VecDeque<NodeOutput>,
    /// The time of the last input: gossip's events are handled at it.
    now: Time,
}

impl Node {
    /// Composes a core and a membership of the same node.
    pub fn new(core: Core, gossip: Gossip) -> Node {
        debug_assert_eq!(core.id(), gossip.me().id, "core and gossip of one node");
        Node {
            core,
            gossip,
            boots: IdMap::default(),
            groups: IdMap::default(),
            pending: VecDeque::new(),
            now: Time::ZERO,
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.core.id()
    }

    /// The tree core, to read its state (trees, RTTs, clusters, counters).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The membership, to read its records.
    pub fn gossip(&self) -> &Gossip {
        &self.gossip
    }

    /// Registers a named reducer (a function, so not a wire-able command).
    pub fn register_reducer(&mut self, name: String, f: ReduceFn) {
        self.core.register_reducer(name, f);
    }

    /// Handles one input; drain [`Node::poll_output`] afterwards (the drain rule).
    pub fn handle(&mut self, now: Time, input: NodeInput) {
        self.now = now;
        match input {
            NodeInput::Timeout => {
                self.core.handle(now, Input::Timeout);
                self.gossip.handle_timeout(now);
            }
            NodeInput::Received { from, packet } => self.received(now, from, packet),
            NodeInput::JoinVia { peer } => self.gossip.join(now, peer),
            NodeInput::Unreachable { peer } => self.gossip.handle_unreachable(now, peer),
            NodeInput::LinkLost { peer } => self.core.handle(now, Input::LinkLost { peer }),
            NodeInput::SendCost { per_send } => self.core.handle(now, Input::SendCost { per_send }),
            NodeInput::RanLate { by } => self.gossip.handle_lateness(by),
            NodeInput::RttSample { peer, rtt } => {
                self.core.handle(now, Input::RttSample { peer, rtt })
            }
            NodeInput::BulkTransfer { active } => {
                self.core.handle(now, Input::BulkTransfer { active })
            }
            NodeInput::Measured(
                m @ (Input::TrainArrived { .. }
                | Input::TransferRate { .. }
                | Input::PathSaturated { .. }),
            ) => self.core.handle(now, m),
            NodeInput::Measured(_) => {}
            NodeInput::Command(Command::Leave) => {
                self.core.handle(now, Input::Command(Command::Leave));
                self.gossip.leave(now);
            }
            NodeInput::Command(cmd) => self.core.handle(now, Input::Command(cmd)),
            NodeInput::SetGroups { groups } => {
                if self.gossip.set_groups(now, groups.clone()) {
                    let id = self.id();
                    self.core.handle(now, Input::MemberGroups { id, groups });
                }
            }
            NodeInput::AskTree { id, root } => {
                let members: Vec<NodeId> = self.gossip.live_members().map(|r| r.id).collect();
                for to in members {
                    self.pending.push_back(NodeOutput::Transmit {
                        to,
                        class: Class::Control,
                        packet: Packet::Query(QueryMessage::TreeRequest { id, root }),
                    });
                }
            }
        }
        // The membership judges the local health (timers late, suspicions refuted); the
        // core slows down with it.
        let score = self.gossip.local_health();
        if score != self.core.local_health() {
            self.core.handle(now, Input::LocalHealth { score });
        }
    }

    fn received(&mut self, now: Time, from: NodeId, packet: Packet) {
        match packet {
            Packet::Overlay(msg) => self.core.handle(now, Input::Received { from, msg }),
            Packet::Gossip(msg) => self.gossip.handle_message(now, from, msg),
            Packet::Query(QueryMessage::TreeRequest { id, root }) => {
                let view = self.core.tree(root);
                let reply = QueryMessage::TreeReply {
                    id,
                    root,
                    parent: view.as_ref().and_then(|v| v.parent),
                    dist_us: view
                        .filter(|v| v.connected)
                        .map(|v| v.dist.as_micros() as u64),
                };
                self.pending.push_back(NodeOutput::Transmit {
                    to: from,
                    class: Class::Control,
                    packet: Packet::Query(reply),
                });
            }
            Packet::Query(QueryMessage::TreeReply {
                id,
                root,
                parent,
                dist_us,
            }) => self.pending.push_back(NodeOutput::TreeReply {
                from,
                id,
                root,
                parent,
                dist_us,
            }),
            // Only ever the first frame of a data stream, which the driver reads itself; a
            // token is the network layer's.
            Packet::Data(_) | Packet::Bulk(_) | Packet::Token(_) => {}
        }
    }

    /// The next output, or `None` when everything is drained.
    pub fn poll_output(&mut self) -> Option<NodeOutput> {
        loop {
            if let Some(out) = super::drain::pop_front(&mut self.pending) {
                return Some(out);
            }
            if let Some(t) = self.core.poll_transmit() {
                return Some(overlay_transmit(t));
            }
            if let Some(e) = self.core.poll_event() {
                match e {
                    // Members are reported from gossip, which knows names and addresses.
                    Event::MemberUp { .. } | Event::MemberDown { .. } | Event::Left => continue,
                    e => return Some(NodeOutput::Core(e)),
                }
            }
            if let Some(t) = self.gossip.poll_transmit() {
                return Some(NodeOutput::Transmit {
                    to: t.to,
                    class: Class::Control,
                    packet: Packet::Gossip(t.msg),
                });
            }
            let e = self.gossip.poll_event()?;
            self.gossip_event(e);
        }
    }

    /// Whether an operation's wide-area sends are ready ahead of its in-cluster part.
    pub fn has_deferred(&self) -> bool {
        self.core.has_deferred()
    }

    /// The ready wide-area sends of an operation, before its in-cluster part is worked
    /// out (see the module's drain rule).
    pub fn poll_ready_output(&mut self) -> Option<NodeOutput> {
        self.core.poll_ready_transmit().map(overlay_transmit)
    }

    /// The earliest deadline of the core and the membership.
    pub fn poll_timeout(&self) -> Option<Time> {
        [self.core.poll_timeout(), self.gossip.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// What a membership event means for the trees: the core learns of members coming
    /// and going (a restart is the old run going down, then the new one up).
    fn gossip_event(&mut self, event: GossipEvent) {
        let now = self.now;
        match event {
            GossipEvent::Up(record) => {
                let id = record.id;
                let previous = self.boots.insert(id, record.boot);
                if previous.is_some_and(|b| b != record.boot) {
                    let reason = DownReason::Dead;
                    self.core.handle(now, Input::MemberDown { id, reason });
                    self.pending.push_back(NodeOutput::MemberRestarted { id });
                }
                let new_run = previous != Some(record.boot);
                if new_run {
                    self.core.handle(now, Input::MemberUp { id });
                }
                let groups_changed = self
                    .groups
                    .get(&id)
                    .map_or(!record.groups.is_empty(), |g| *g != record.groups);
                if groups_changed {
                    self.groups.insert(id, record.groups.clone());
                    let groups = record.groups.clone();
                    self.core.handle(now, Input::MemberGroups { id, groups });
                }
                if new_run || groups_changed {
                    self.pending.push_back(NodeOutput::MemberUp(record));
                }
            }
            GossipEvent::Suspect(id) => self.pending.push_back(NodeOutput::MemberSuspect { id }),
            GossipEvent::Down { id, state } => {
                let reason = match state {
                    Liveness::Left => DownReason::Left,
                    _ => DownReason::Dead,
                };
                self.boots.remove(&id);
                if self.groups.remove(&id).is_some() {
                    let groups = Vec::new();
                    self.core.handle(now, Input::MemberGroups { id, groups });
                }
                self.core.handle(now, Input::MemberDown { id, reason });
                self.pending
                    .push_back(NodeOutput::MemberDown { id, reason });
            }
            GossipEvent::Joined { via } => self.pending.push_back(NodeOutput::Joined { via }),
        }
    }
}

/// A core transmit with its class, read from the message once here so that drivers never
/// look into messages.
fn overlay_transmit(t: Transmit) -> NodeOutput {
    let class = match &t.msg {
        Message::Ping { watch, .. } => Class::Probe { urgent: *watch },
        Message::PongPing { .. } => Class::Probe { urgent: true },
        Message::Collective(CollectiveMessage::Down {
            op,
            body: DownBody::Stream { len, digest },
            ..
        }) => Class::Stream {
            op: *op,
            len: *len,
            digest: *digest,
        },
        Message::Collective(CollectiveMessage::Down { .. }) => Class::Operation,
        _ => Class::Control,
    };
    NodeOutput::Transmit {
        to: t.to,
        class,
        packet: Packet::Overlay(t.msg),
    }
}

#[cfg(test)]
mod tests;
