//! A whole protocol node in the simulator: the very [`proto::Node`](Node) the QUIC driver
//! runs, the tree core and the membership protocol together. Its outputs are sorted into
//! what the simulator carries: tree messages, membership messages and core events (the
//! member changes it reports are already fed to its own core).

use super::node::{SimNode, Spawn};
use crate::proto::gossip::{Gossip, GossipConfig};
use crate::proto::{
    Config, Core, Event, GossipMessage, Input, Node, NodeId, NodeInput, NodeOutput, Packet, Time,
    Transmit,
};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};

/// A [`Node`] with its outputs sorted for the simulator.
pub struct MemberNode {
    node: Node,
    transmits: VecDeque<Transmit>,
    gossip: VecDeque<(NodeId, GossipMessage)>,
    events: VecDeque<Event>,
}

impl MemberNode {
    /// The node of `spawn` with these settings. Its address (only carried in membership
    /// records here) is made up from its index: 10.x.y.z:7400.
    pub fn new(spawn: Spawn, core: Config, gossip: GossipConfig) -> MemberNode {
        let i = spawn.index as u32 + 1;
        let ip = Ipv4Addr::new(10, (i >> 16) as u8, (i >> 8) as u8, i as u8);
        let addr = SocketAddr::from((ip, 7400));
        let core = Core::new(spawn.id, core, spawn.seed, spawn.now);
        let gossip = Gossip::new(
            spawn.id,
            format!("n{}", spawn.index),
            addr,
            1,
            gossip,
            spawn.seed ^ 0x6055_1900_0000_0001,
            spawn.now,
        );
        MemberNode {
            node: Node::new(core, gossip),
            transmits: VecDeque::new(),
            gossip: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The protocol node itself.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Drains the node's outputs into the three queues, in order.
    fn pump(&mut self) {
        while let Some(out) = self.node.poll_output() {
            match out {
                NodeOutput::Transmit { to, packet, .. } => match packet {
                    Packet::Overlay(msg) => self.transmits.push_back(Transmit { to, msg }),
                    Packet::Gossip(msg) => self.gossip.push_back((to, msg)),
                    // Tree queries come from operators, data streams from the QUIC data
                    // plane: neither is simulated.
                    Packet::Query(_) | Packet::Data(_) | Packet::Bulk(_) | Packet::Token(_) => {}
                },
                NodeOutput::Core(event) => self.events.push_back(event),
                NodeOutput::MemberUp(_)
                | NodeOutput::MemberRestarted { .. }
                | NodeOutput::MemberDown { .. }
                | NodeOutput::MemberSuspect { .. }
                | NodeOutput::Joined { .. }
                | NodeOutput::TreeReply { .. } => {}
            }
        }
    }
}

impl SimNode for MemberNode {
    const OWN_MEMBERSHIP: bool = true;

    fn core(&self) -> Option<&crate::proto::Core> {
        Some(self.node().core())
    }

    fn handle(&mut self, now: Time, input: Input) {
        let input = match input {
            Input::Received { from, msg } => NodeInput::Received {
                from,
                packet: Packet::Overlay(msg),
            },
            Input::Timeout => NodeInput::Timeout,
            Input::Command(cmd) => NodeInput::Command(cmd),
            Input::LinkLost { peer } => NodeInput::LinkLost { peer },
            Input::SendCost { per_send } => NodeInput::SendCost { per_send },
            Input::RttSample { peer, rtt } => NodeInput::RttSample { peer, rtt },
            Input::BulkTransfer { active } => NodeInput::BulkTransfer { active },
            m @ (Input::TrainArrived { .. }
            | Input::TransferRate { .. }
            | Input::PathSaturated { .. }) => NodeInput::Measured(m),
            // Its own membership tells it of members, and judges its health.
            Input::MemberUp { .. }
            | Input::MemberDown { .. }
            | Input::MemberGroups { .. }
            | Input::LocalHealth { .. } => {
                return;
            }
        };
        self.node.handle(now, input);
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.pump();
        crate::proto::drain::pop_front(&mut self.transmits)
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.pump();
        crate::proto::drain::pop_front(&mut self.events)
    }

    fn poll_timeout(&mut self) -> Option<Time> {
        self.node.poll_timeout()
    }

    fn parent(&self, root: NodeId) -> Option<NodeId> {
        self.node.core().parent(root)
    }

    fn join_via(&mut self, now: Time, via: NodeId) {
        self.node.handle(now, NodeInput::JoinVia { peer: via });
    }

    fn joining(&self) -> Option<NodeId> {
        self.node.gossip().joining()
    }

    fn poll_gossip(&mut self) -> Option<(NodeId, GossipMessage)> {
        self.pump();
        crate::proto::drain::pop_front(&mut self.gossip)
    }

    fn receive_gossip(&mut self, now: Time, from: NodeId, msg: GossipMessage) {
        self.node.handle(
            now,
            NodeInput::Received {
                from,
                packet: Packet::Gossip(msg),
            },
        );
    }
}
