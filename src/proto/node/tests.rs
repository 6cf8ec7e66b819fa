//! A few whole nodes in virtual time, connected by a queue with a fixed latency: joins go
//! through membership, trees form, restarts and departures reach the core, tree queries
//! are answered, and every transmit carries the class its message calls for.

use super::{Class, Node, NodeInput, NodeOutput};
use crate::proto::gossip::{Gossip, GossipConfig};
use crate::proto::{Command, Config, Core, DownReason, Message, NodeId, Packet, Time};
use std::collections::BTreeMap;
use std::time::Duration;

const LATENCY: Duration = Duration::from_millis(1);

/// Nodes, the packets in flight (by arrival time, then order sent) and what they output.
struct Net {
    nodes: Vec<Node>,
    up: Vec<bool>,
    in_flight: BTreeMap<(Time, u64), (usize, NodeId, Packet)>,
    sent: u64,
    now: Time,
    outputs: Vec<(usize, NodeOutput)>,
}

fn node(seed: u64, i: u64, incarnation: u64, now: Time) -> Node {
    let id = NodeId::from_seed(seed, i);
    let addr = format!("127.0.0.1:{}", 7000 + i).parse().expect("address");
    let core = Core::new(id, Config::test(), seed ^ incarnation ^ i, now);
    let gossip = Gossip::new(
        id,
        format!("n{i}"),
        addr,
        incarnation,
        GossipConfig::default(),
        seed + i,
        now,
    );
    Node::new(core, gossip)
}

impl Net {
    fn new(n: u64) -> Net {
        let nodes: Vec<Node> = (0..n).map(|i| node(7, i, 1, Time::ZERO)).collect();
        Net {
            up: vec![true; nodes.len()],
            nodes,
            in_flight: BTreeMap::new(),
            sent: 0,
            now: Time::ZERO,
            outputs: Vec::new(),
        }
    }

    fn index(&self, id: NodeId) -> Option<usize> {
        self.nodes.iter().position(|n| n.id() == id)
    }

    fn input(&mut self, i: usize, input: NodeInput) {
        self.nodes[i].handle(self.now, input);
        self.drain(i);
    }

    fn drain(&mut self, i: usize) {
        let from = self.nodes[i].id();
        while let Some(out) = self.nodes[i].poll_output() {
            if let NodeOutput::Transmit { to, packet, .. } = &out
                && let Some(j) = self.index(*to)
            {
                self.sent += 1;
                let at = self.now + LATENCY;
                self.in_flight
                    .insert((at, self.sent), (j, from, packet.clone()));
            }
            self.outputs.push((i, out));
        }
    }

    /// Runs until `until`: delivers packets to live nodes and fires their timers.
    fn run_until(&mut self, until: Time) {
        loop {
            let timer = (0..self.nodes.len())
                .filter(|&i| self.up[i])
                .filter_map(|i| self.nodes[i].poll_timeout().map(|t| (t, i)))
                .min();
            let packet = self.in_flight.keys().next().copied();
            match (packet, timer) {
                (Some((at, seq)), t) if at <= until && t.is_none_or(|(tt, _)| at <= tt) => {
                    let (j, from, packet) = self.in_flight.remove(&(at, seq)).expect("queued");
                    self.now = at;
                    if self.up[j] {
                        self.input(j, NodeInput::Received { from, packet });
                    }
                }
                (_, Some((t, i))) if t <= until => {
                    self.now = self.now.max(t);
                    self.input(i, NodeInput::Timeout);
                }
                _ => break,
            }
        }
        self.now = until;
    }

    fn members_up(&self, i: usize) -> Vec<NodeId> {
        let mut ids: Vec<NodeId> = self
            .outputs
            .iter()
            .filter(|(j, _)| *j == i)
            .filter_map(|(_, o)| match o {
                NodeOutput::MemberUp(r) => Some(r.id),
                _ => None,
            })
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }
}

fn at(secs: u64) -> Time {
    Time::ZERO + Duration::from_secs(secs)
}

/// Three nodes: 1 and 2 join through 0, then everyone's trees span all three.
fn joined() -> Net {
    let mut net = Net::new(3);
    let first = net.nodes[0].id();
    net.input(1, NodeInput::JoinVia { peer: first });
    net.input(2, NodeInput::JoinVia { peer: first });
    net.run_until(at(20));
    net
}

/// Node 0 measures `peer` at `rtt` `count` times, 100 ms apart (no timer runs).
fn samples_of(net: &mut Net, peer: NodeId, rtt: Duration, count: usize) {
    for _ in 0..count {
        net.now = net.now + Duration::from_millis(100);
        net.input(0, NodeInput::RttSample { peer, rtt });
    }
}

/// [`joined`], with node 1 and node 0's RTT estimate of it.
fn joined_with_rtt() -> (Net, NodeId, Duration) {
    let net = joined();
    let peer = net.nodes[1].id();
    let rtt = (net.nodes[0].core().rtt(peer)).expect("measured while joining");
    (net, peer, rtt)
}

#[test]
fn joins_go_through_membership_and_trees_form() {
    let net = joined();
    let ids: Vec<NodeId> = net.nodes.iter().map(|n| n.id()).collect();
    for i in 0..3 {
        let mut others: Vec<NodeId> = ids.iter().copied().filter(|&id| id != ids[i]).collect();
        others.sort();
        assert_eq!(
            net.members_up(i),
            others,
            "node {i} learnt the others from gossip"
        );
        for &root in &ids {
            let view = net.nodes[i].core().tree(root).expect("a tree per member");
            assert!(view.connected, "node {i} reaches root {root} in its tree");
        }
    }
    for i in 1..3 {
        assert!(
            net.outputs
                .iter()
                .any(|(j, o)| *j == i && matches!(o, NodeOutput::Joined { via } if *via == ids[0])),
            "node {i} was told its join was answered"
        );
    }
}

#[test]
fn tree_queries_are_answered_by_every_live_member() {
    let mut net = joined();
    let root = net.nodes[2].id();
    net.outputs.clear();
    net.input(0, NodeInput::AskTree { id: 9, root });
    net.run_until(at(21));
    let mut answered: Vec<NodeId> = net
        .outputs
        .iter()
        .filter_map(|(i, o)| match o {
            NodeOutput::TreeReply {
                from,
                id: 9,
                root: r,
                ..
            } if *i == 0 && *r == root => Some(*from),
            _ => None,
        })
        .collect();
    answered.sort();
    let mut expected = vec![net.nodes[1].id(), net.nodes[2].id()];
    expected.sort();
    assert_eq!(answered, expected);
}

#[test]
fn a_leave_reaches_the_others_trees_and_a_restart_replaces_the_old_run() {
    let mut net = joined();
    let (gone, back) = (net.nodes[2].id(), net.nodes[1].id());
    net.outputs.clear();
    net.input(2, NodeInput::Command(Command::Leave));
    net.run_until(at(25));
    net.up[2] = false;
    assert!(net.outputs.iter().any(|(i, o)| *i == 0
        && matches!(o, NodeOutput::MemberDown { id, reason: DownReason::Left } if *id == gone)));
    assert!(
        net.nodes[0].core().tree(gone).is_none(),
        "its tree is dropped"
    );

    // Node 1 restarts: same id, a higher incarnation, and joins again through node 0.
    net.nodes[1] = node(7, 1, 2, net.now);
    net.outputs.clear();
    let first = net.nodes[0].id();
    net.input(1, NodeInput::JoinVia { peer: first });
    net.run_until(at(45));
    let seen: Vec<&NodeOutput> = net
        .outputs
        .iter()
        .filter(|(i, _)| *i == 0)
        .map(|(_, o)| o)
        .filter(|o| match o {
            NodeOutput::MemberRestarted { id } => *id == back,
            NodeOutput::MemberUp(r) => r.id == back,
            _ => false,
        })
        .collect();
    assert!(
        matches!(
            seen.as_slice(),
            [
                NodeOutput::MemberRestarted { .. },
                NodeOutput::MemberUp(_),
                ..
            ]
        ),
        "the old run goes, then the new one comes: {seen:?}"
    );
    let view = net.nodes[0].core().tree(back).expect("the new run's tree");
    assert!(view.connected);
}

#[test]
fn transmits_carry_the_class_of_their_message() {
    let net = joined();
    let classes: Vec<(Class, &Packet)> = net
        .outputs
        .iter()
        .filter_map(|(_, o)| match o {
            NodeOutput::Transmit { class, packet, .. } => Some((*class, packet)),
            _ => None,
        })
        .collect();
    assert!(
        classes
            .iter()
            .any(|(c, _)| matches!(c, Class::Probe { .. }))
    );
    for (class, packet) in classes {
        let expected = match packet {
            Packet::Overlay(Message::Ping { watch, .. }) => Class::Probe { urgent: *watch },
            Packet::Overlay(Message::PongPing { .. }) => Class::Probe { urgent: true },
            Packet::Overlay(Message::Collective(_)) => continue,
            _ => Class::Control,
        };
        assert_eq!(class, expected, "{packet:?}");
    }
}

#[test]
fn a_probe_is_stamped_with_its_send_time_and_nothing_else_changes() {
    let ping = Packet::Overlay(Message::Ping {
        sent_us: 5,
        rtt_hint_us: Some(300),
        watch: true,
    });
    let stamped = ping.stamped(1_234);
    assert_eq!(
        stamped,
        Packet::Overlay(Message::Ping {
            sent_us: 1_234,
            rtt_hint_us: Some(300),
            watch: true,
        })
    );
    let merged = Packet::Overlay(Message::PongPing {
        sent_us: 5,
        ping_sent_us: 6,
        watch: false,
    });
    let stamped = merged.stamped(1_234);
    let Packet::Overlay(Message::PongPing {
        sent_us: 5,
        ping_sent_us: 1_234,
        watch: false,
    }) = stamped
    else {
        panic!("the probe part is stamped, the answer kept: {stamped:?}");
    };
    let other = Packet::Overlay(Message::Resync);
    assert_eq!(other.clone().stamped(9), other);
}

#[test]
fn rtt_samples_taken_during_a_bulk_transfer_do_not_raise_estimates() {
    let (mut net, peer, before) = joined_with_rtt();
    let samples = |net: &mut Net, count: usize| {
        samples_of(net, peer, before + Duration::from_millis(50), count);
    };
    net.input(0, NodeInput::BulkTransfer { active: true });
    samples(&mut net, 200);
    assert_eq!(
        net.nodes[0].core().rtt(peer),
        Some(before),
        "the path, not the queue"
    );
    net.input(0, NodeInput::BulkTransfer { active: false });
    // Right after, the queues still drain: still taken under load.
    samples(&mut net, 5);
    assert_eq!(net.nodes[0].core().rtt(peer), Some(before));
    // Once they have drained, samples count in full again (a real route change shows).
    net.now = net.now + crate::proto::BULK_SETTLE;
    samples(&mut net, 200);
    assert_eq!(
        net.nodes[0].core().rtt(peer),
        Some(before + Duration::from_millis(50))
    );
}

/// Probes (`Ping`, or a probe riding on an answer) node `i` sent among `outputs`.
fn probes_sent(outputs: &[(usize, NodeOutput)], i: usize) -> usize {
    (outputs.iter())
        .filter(|(j, o)| {
            *j == i
                && matches!(
                    o,
                    NodeOutput::Transmit {
                        packet: Packet::Overlay(Message::Ping { .. } | Message::PongPing { .. }),
                        ..
                    }
                )
        })
        .count()
}

#[test]
fn a_starved_node_probes_less_and_its_late_samples_do_not_raise_estimates() {
    let (mut net, peer, before) = joined_with_rtt();
    // Node 0's event loop runs 300 ms late all along, the others keep up.
    let late_for = |net: &mut Net, from: u64, to: u64| {
        let start = net.outputs.len();
        for s in from..to {
            let by = Duration::from_millis(300);
            net.input(0, NodeInput::RanLate { by });
            net.run_until(at(s + 1));
        }
        start
    };
    late_for(&mut net, 20, 40);
    let health = net.nodes[0].gossip().local_health();
    assert!(health > 0, "a loop late by 300 ms is a starved node");
    let start = late_for(&mut net, 40, 70);
    let window = &net.outputs[start..];
    let (starved, healthy) = (probes_sent(window, 0), probes_sent(window, 1));
    assert!(
        starved * 2 <= healthy,
        "at health {health} node 0 sent {starved} probes in 30 s, node 1 {healthy}"
    );
    // Samples it reads late never raise an estimate; they may lower it.
    samples_of(&mut net, peer, before + Duration::from_millis(50), 200);
    assert_eq!(net.nodes[0].core().rtt(peer), Some(before));
    // Once it keeps up again, the score falls and samples count in full.
    net.run_until(at(160));
    assert_eq!(net.nodes[0].gossip().local_health(), 0, "recovered");
    samples_of(&mut net, peer, before + Duration::from_millis(50), 200);
    assert_eq!(
        net.nodes[0].core().rtt(peer),
        Some(before + Duration::from_millis(50))
    );
}
