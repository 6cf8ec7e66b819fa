//! Gossip on an in-memory network with virtual time: join, crash detection, a slow probe
//! that must not kill, refutation, leave and restart.

use super::*;

/// A tiny deterministic network: every message takes `delay`; `down` nodes neither send
/// nor receive; `drop_direct_probes_to` loses direct probes to one node (indirect ones pass).
struct Net {
    nodes: Vec<Gossip>,
    down: Vec<bool>,
    now: Time,
    delay: Duration,
    in_flight: Vec<(Time, usize, usize, GossipMessage)>,
    events: Vec<Vec<GossipEvent>>,
    drop_direct_probes_to: Option<usize>,
    /// Messages between nodes below and at or above this index are dropped.
    cut: Option<usize>,
    /// Messages to this node arrive this much later (a starved node reads its inbox late).
    slow: Option<(usize, Duration)>,
    /// Every node is starved: its messages are read and its timers fire this much late,
    /// and its driver says so ([`Gossip::handle_lateness`]).
    starved: Option<Duration>,
    /// Sends so far of full record sets (`Sync`) and of digests.
    syncs: usize,
    digests: usize,
    /// Records sent in `Sync` messages, per sender.
    sync_records: Vec<usize>,
    /// Rumors sent so far.
    rumors: usize,
}

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7400 + i as u16))
}

impl Net {
    fn new(n: usize) -> Net {
        Self::with_config(n, GossipConfig::default())
    }

    fn with_config(n: usize, config: GossipConfig) -> Net {
        let nodes = (0..n)
            .map(|i| {
                Gossip::new(
                    NodeId::from_seed(9, i as u64),
                    format!("n{i}"),
                    addr(i),
                    1,
                    config.clone(),
                    i as u64,
                    Time::ZERO,
                )
            })
            .collect();
        Net {
            nodes,
            down: vec![false; n],
            now: Time::ZERO,
            delay: Duration::from_millis(5),
            in_flight: Vec::new(),
            events: vec![Vec::new(); n],
            drop_direct_probes_to: None,
            cut: None,
            slow: None,
            starved: None,
            syncs: 0,
            digests: 0,
            sync_records: vec![0; n],
            rumors: 0,
        }
    }

    fn id(&self, i: usize) -> NodeId {
        self.nodes[i].me().id
    }

    fn index(&self, id: NodeId) -> usize {
        self.nodes.iter().position(|g| g.me().id == id).unwrap()
    }

    fn drain(&mut self, i: usize) {
        while let Some(t) = self.nodes[i].poll_transmit() {
            match t.msg {
                GossipMessage::Sync { ref members, .. } => {
                    self.syncs += 1;
                    self.sync_records[i] += members.len();
                }
                GossipMessage::Digest { .. } => self.digests += 1,
                GossipMessage::Rumor { .. } => self.rumors += 1,
                _ => {}
            }
            let to = self.index(t.to);
            if self.down[i] || self.down[to] || self.cut.is_some_and(|k| (i < k) != (to < k)) {
                continue;
            }
            if Some(to) == self.drop_direct_probes_to
                && matches!(t.msg, GossipMessage::Probe { .. })
                && !self.is_relay(i)
            {
                continue;
            }
            let late = (self.slow)
                .filter(|&(k, _)| k == to)
                .map_or(Duration::ZERO, |(_, d)| d)
                + self.starved.unwrap_or_default();
            self.in_flight
                .push((self.now + self.delay + late, i, to, t.msg));
        }
        while let Some(e) = self.nodes[i].poll_event() {
            self.events[i].push(e);
        }
    }

    /// Relayed probes come from nodes that hold a relay entry.
    fn is_relay(&self, i: usize) -> bool {
        !self.nodes[i].relays.is_empty()
    }

    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let next_msg = self.in_flight.iter().map(|m| m.0).min();
            let late = self.starved.unwrap_or_default();
            let next_timer = (0..self.nodes.len())
                .filter(|&i| !self.down[i])
                .filter_map(|i| self.nodes[i].poll_timeout())
                .min()
                .map(|t| t + late);
            let Some(next) = [next_msg, next_timer].into_iter().flatten().min() else {
                break;
            };
            if next > end {
                break;
            }
            self.now = next;
            if let Some(k) = self.in_flight.iter().position(|m| m.0 <= self.now) {
                let (_, from, to, msg) = self.in_flight.remove(k);
                if !self.down[to] {
                    let from_id = self.id(from);
                    self.nodes[to].handle_message(self.now, from_id, msg);
                    self.drain(to);
                }
                continue;
            }
            for i in 0..self.nodes.len() {
                if !self.down[i]
                    && (self.nodes[i].poll_timeout()).is_some_and(|t| t + late <= self.now)
                {
                    if !late.is_zero() {
                        self.nodes[i].handle_lateness(late);
                    }
                    self.nodes[i].handle_timeout(self.now);
                    self.drain(i);
                }
            }
        }
        self.now = end;
    }

    fn join_all(&mut self) {
        for i in 1..self.nodes.len() {
            let via = self.id(0);
            self.nodes[i].join(self.now, via);
            self.drain(i);
        }
        self.run_for(Duration::from_secs(3));
    }

    fn state_of(&self, at: usize, about: usize) -> Option<Liveness> {
        self.nodes[at].record(&self.id(about)).map(|r| r.state)
    }
}

#[test]
fn nodes_joining_through_one_member_all_learn_each_other() {
    let mut net = Net::new(8);
    net.join_all();
    for i in 0..8 {
        assert_eq!(net.nodes[i].live_members().count(), 7, "node {i}");
        assert!(!net.nodes[i].is_joining());
    }
    assert!(net.events[3].contains(&GossipEvent::Joined { via: net.id(0) }));
}

#[test]
fn a_crashed_member_is_suspected_then_declared_dead_everywhere() {
    let mut net = Net::new(6);
    net.join_all();
    net.down[4] = true;
    net.run_for(Duration::from_secs(2));
    assert!(
        (0..6)
            .filter(|&i| i != 4)
            .all(|i| net.state_of(i, 4) != Some(Liveness::Dead)),
        "nobody declares death before the suspicion timeout"
    );
    net.run_for(Duration::from_secs(20));
    for i in (0..6).filter(|&i| i != 4) {
        assert_eq!(net.state_of(i, 4), Some(Liveness::Dead), "node {i}");
        assert!(net.events[i].contains(&GossipEvent::Down {
            id: net.id(4),
            state: Liveness::Dead
        }));
    }
}

#[test]
fn lost_direct_probes_do_not_kill_a_member_that_answers_indirectly() {
    let mut net = Net::new(6);
    net.join_all();
    net.drop_direct_probes_to = Some(2);
    net.run_for(Duration::from_secs(30));
    for i in (0..6).filter(|&i| i != 2) {
        assert_eq!(net.state_of(i, 2), Some(Liveness::Alive), "node {i}");
    }
}

#[test]
fn a_suspected_member_refutes_with_a_higher_incarnation() {
    let mut net = Net::new(5);
    net.join_all();
    let mut rumour = net.nodes[0].record(&net.id(3)).unwrap().clone();
    rumour.state = Liveness::Suspect;
    let from = net.id(1);
    net.nodes[0].handle_message(
        net.now,
        from,
        GossipMessage::Sync {
            members: vec![rumour.clone().into()],
            reply: false,
        },
    );
    net.drain(0);
    assert_eq!(net.state_of(0, 3), Some(Liveness::Suspect));
    net.run_for(Duration::from_secs(15));
    for i in (0..5).filter(|&i| i != 3) {
        let r = net.nodes[i].record(&net.id(3)).unwrap();
        assert_eq!(r.state, Liveness::Alive, "node {i}");
        assert!(r.incarnation > rumour.incarnation);
    }
}

#[test]
fn a_record_at_the_last_incarnation_is_refused_about_anyone() {
    // Nobody could refute it: a death at u64::MAX would be for good (and the refutation's
    // "+ 1" would overflow).
    let mut net = Net::new(4);
    net.join_all();
    for about in [0, 3] {
        let mut forged = net.nodes[0].record(&net.id(about)).unwrap().clone();
        forged.state = Liveness::Dead;
        forged.incarnation = u64::MAX;
        let from = net.id(1);
        net.nodes[0].handle_message(
            net.now,
            from,
            GossipMessage::Sync {
                members: vec![forged.into()],
                reply: false,
            },
        );
        net.drain(0);
    }
    net.run_for(Duration::from_secs(5));
    for i in 0..4 {
        for about in (0..4).filter(|&a| a != i) {
            assert_eq!(
                net.state_of(i, about),
                Some(Liveness::Alive),
                "{i} about {about}"
            );
        }
    }
}

#[test]
fn a_leaving_member_is_removed_everywhere_and_a_restart_brings_it_back() {
    let mut net = Net::new(5);
    net.join_all();
    net.nodes[2].leave(net.now);
    net.drain(2);
    net.run_for(Duration::from_secs(1));
    for i in (0..5).filter(|&i| i != 2) {
        assert_eq!(net.state_of(i, 2), Some(Liveness::Left), "node {i}");
    }
    // Restart: same id, higher incarnation, joins again through node 4.
    let id = net.id(2);
    net.nodes[2] = Gossip::new(
        id,
        "n2".into(),
        addr(2),
        1_000,
        GossipConfig::default(),
        77,
        net.now,
    );
    let via = net.id(4);
    net.nodes[2].join(net.now, via);
    net.drain(2);
    net.run_for(Duration::from_secs(10));
    for i in (0..5).filter(|&i| i != 2) {
        assert_eq!(net.state_of(i, 2), Some(Liveness::Alive), "node {i}");
    }
    assert_eq!(net.nodes[2].live_members().count(), 4);
}

#[test]
fn a_join_with_a_foreign_id_is_ignored() {
    let mut net = Net::new(2);
    let mut forged = net.nodes[1].me().clone();
    forged.id = NodeId::from_seed(1, 1234);
    let from = net.id(1);
    net.nodes[0].handle_message(net.now, from, GossipMessage::Join { me: forged });
    assert_eq!(net.nodes[0].live_members().count(), 0);
}

#[test]
fn two_sides_that_declared_each_other_dead_merge_after_a_long_partition() {
    let mut net = Net::new(6);
    net.join_all();
    net.cut = Some(3); // {0, 1, 2} | {3, 4, 5}
    net.run_for(Duration::from_secs(60));
    assert_eq!(net.state_of(0, 4), Some(Liveness::Dead));
    assert_eq!(net.state_of(4, 0), Some(Liveness::Dead));
    net.cut = None;
    net.run_for(Duration::from_secs(60));
    for i in 0..6 {
        for j in (0..6).filter(|&j| j != i) {
            assert_eq!(net.state_of(i, j), Some(Liveness::Alive), "{i} about {j}");
        }
    }
}

#[test]
fn a_settled_membership_trades_digests_not_records() {
    let mut net = Net::new(20);
    net.join_all();
    net.run_for(Duration::from_secs(20));
    for i in 0..20 {
        for j in 0..20 {
            assert_eq!(net.state_of(i, j), Some(Liveness::Alive), "{i} about {j}");
        }
    }
    let (syncs, digests) = (net.syncs, net.digests);
    net.run_for(Duration::from_secs(60));
    // About one digest per node per 5 s, and no record set: every table agrees.
    assert!(
        net.digests - digests >= 20 * 60 / 7,
        "{} digests",
        net.digests - digests
    );
    assert_eq!(
        net.syncs, syncs,
        "records traded although every table agrees"
    );
    // A crash makes the tables differ while the news spreads; they agree again after.
    net.down[7] = true;
    net.run_for(Duration::from_secs(30));
    for i in (0..20).filter(|&i| i != 7) {
        assert_eq!(net.state_of(i, 7), Some(Liveness::Dead), "{i} about 7");
    }
    let syncs = net.syncs;
    net.run_for(Duration::from_secs(60));
    assert_eq!(
        net.syncs, syncs,
        "records traded once the news of the crash spread"
    );
}

#[test]
fn the_digest_covers_what_a_merge_looks_at() {
    let g = |addr: SocketAddr, inc: u64, state: Liveness| {
        let mut n = Gossip::new(
            NodeId::from_seed(9, 0),
            "n0".into(),
            addr,
            inc,
            GossipConfig::default(),
            0,
            Time::ZERO,
        );
        std::sync::Arc::make_mut(&mut n.me).state = state;
        n.digest()
    };
    let base = g(addr(0), 1, Liveness::Alive);
    assert_eq!(base, g(addr(0), 1, Liveness::Alive));
    assert_ne!(base, g(addr(1), 1, Liveness::Alive));
    assert_ne!(base, g(addr(0), 2, Liveness::Alive));
    assert_ne!(base, g(addr(0), 1, Liveness::Suspect));
}

#[test]
fn a_members_groups_spread_to_everyone_and_only_valid_lists_are_taken() {
    let mut net = Net::new(12);
    net.join_all();
    net.run_for(Duration::from_secs(10));
    let groups = vec!["train".to_string(), "workers".to_string()];
    let now = net.now;
    assert!(net.nodes[5].set_groups(now, groups.clone()));
    let incarnation = net.nodes[5].me().incarnation;
    net.drain(5);
    net.run_for(Duration::from_secs(5));
    let id = net.id(5);
    for i in (0..12).filter(|&i| i != 5) {
        let r = net.nodes[i].record(&id).expect("known");
        assert_eq!(r.groups, groups, "node {i}");
        assert_eq!(r.incarnation, incarnation, "node {i}");
    }
    // Unsorted, repeated, empty or too long names, or too many: refused, nothing changes.
    let long = "x".repeat(65);
    let too_many: Vec<String> = (0..33).map(|k| format!("g{k:02}")).collect();
    for bad in [
        vec!["b".to_string(), "a".to_string()],
        vec!["a".to_string(), "a".to_string()],
        vec![String::new()],
        vec![long],
        too_many,
    ] {
        assert!(!net.nodes[5].set_groups(now, bad.clone()), "{bad:?}");
        assert_eq!(net.nodes[5].me().groups, groups);
        // Nor does a record carrying one get in from the wire.
        let mut forged = net.nodes[6].me().clone();
        forged.incarnation += 10;
        forged.groups = bad;
        let from = net.id(6);
        net.nodes[0].handle_message(
            now,
            from,
            GossipMessage::Rumor {
                updates: vec![forged.into()],
            },
        );
        let r = net.nodes[0].record(&from).expect("known");
        assert!(r.groups.is_empty(), "a bad list was taken: {:?}", r.groups);
    }
}

mod admission;
mod revive;
mod rumors;
mod signed;
mod starved;
