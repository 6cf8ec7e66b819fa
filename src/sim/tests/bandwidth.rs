//! Bandwidth in virtual time: NIC and shared-link serialization, tail drop and its loss
//! report, a link shared by two senders, and no change where there is no bandwidth.

use crate::proto::{Event, Input, Message, NodeId, Time, Transmit};
use crate::sim::{NetModel, Sim, SimConfig, SimNode, Spawn};
use crate::topology::timeline::MIN_BUFFER;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// One-way latency between the two clusters of every test.
const LATENCY_US: u64 = 10_000;

/// What the nodes saw: (node, handle time µs, what) with what = `Ok(bytes received)` or
/// `Err(peer index told lost)`.
/// One datagram seen: (receiver, arrival in microseconds, its sequence number or a drop).
type Arrival = (usize, u64, Result<usize, usize>);
type Seen = Arc<Mutex<Vec<Arrival>>>;

/// A node that, when it learns of member `to`, sends it `count` copies of `msg` at once,
/// and notes what it receives and the losses it is told of.
struct Burst {
    index: usize,
    seed: u64,
    plan: Option<(usize, usize, Message)>,
    seen: Seen,
    out: VecDeque<Transmit>,
}

impl SimNode for Burst {
    fn handle(&mut self, now: Time, input: Input) {
        let seed = self.seed;
        let index_of = move |id: NodeId| (0..64).find(|&i| NodeId::from_seed(seed, i) == id);
        match input {
            Input::MemberUp { id } => {
                if let Some((to, count, msg)) = &self.plan
                    && index_of(id) == Some(*to as u64)
                {
                    for _ in 0..*count {
                        self.out.push_back(Transmit {
                            to: id,
                            msg: msg.clone(),
                        });
                    }
                }
            }
            Input::Received { msg, .. } => {
                let len = msg.encoded_len();
                (self.seen.lock().expect("not poisoned")).push((
                    self.index,
                    now.as_micros(),
                    Ok(len),
                ));
            }
            Input::LinkLost { peer } => {
                let peer = index_of(peer).expect("a node of the run") as usize;
                (self.seen.lock().expect("not poisoned")).push((
                    self.index,
                    now.as_micros(),
                    Err(peer),
                ));
            }
            _ => {}
        }
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }
    fn poll_event(&mut self) -> Option<Event> {
        None
    }
    fn poll_timeout(&mut self) -> Option<Time> {
        None
    }
    fn parent(&self, _root: NodeId) -> Option<NodeId> {
        None
    }
}

/// A message of about `bytes` bytes (the tests use its exact `encoded_len`).
fn message(bytes: usize) -> Message {
    let roots = vec![NodeId::from_seed(9, 9); bytes / 17];
    Message::ParentQuery { roots }
}

/// Clusters A and B, `LATENCY_US` apart, with the given NIC and A -> B link bandwidths
/// (B -> A unlimited) and initial nodes.
fn net(nic: [Option<f64>; 2], a_to_b: Option<f64>, initial: &[usize]) -> NetModel {
    let i = Duration::from_micros(20);
    let x = Duration::from_micros(LATENCY_US);
    NetModel::new("two", &["A", "B"], &[vec![i, x], vec![x, i]], None, initial)
        .with_bandwidth(&nic, &[vec![None, a_to_b], vec![None, None]])
}

/// Runs `net` for a second with no CPU costs; node `i` follows `plans(i)`. Returns what
/// was seen and the simulator.
fn run(
    net: NetModel,
    bandwidth: bool,
    plans: impl Fn(usize) -> Option<(usize, usize, Message)> + 'static,
) -> (Vec<Arrival>, Sim<Burst>) {
    let cfg = SimConfig {
        cpu_send: Duration::ZERO,
        cpu_recv: Duration::ZERO,
        bandwidth,
        ..SimConfig::default()
    };
    let seed = cfg.seed;
    let seen = Seen::default();
    let log = seen.clone();
    let factory = Box::new(move |s: Spawn| Burst {
        index: s.index,
        seed,
        plan: plans(s.index),
        seen: log.clone(),
        out: VecDeque::new(),
    });
    let mut sim = Sim::with_nodes(net, cfg, factory);
    sim.run_until(Time::from_micros(1_000_000));
    let got = seen.lock().expect("not poisoned").clone();
    (got, sim)
}

/// Arrival times (µs) of what `node` received.
fn arrivals(seen: &[(usize, u64, Result<usize, usize>)], node: usize) -> Vec<u64> {
    seen.iter()
        .filter(|(n, _, w)| *n == node && w.is_ok())
        .map(|(_, t, _)| *t)
        .collect()
}

/// Whether every arrival is within a microsecond of `want` (a pipe's clock is exact to
/// the nanosecond; events fall on the next whole µs).
fn near(got: &[u64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (*g as f64 - w).abs() <= 1.0)
}

/// A burst of 10 datagrams of S bytes from A to B arrives spread by S * 8 / bandwidth:
/// on a link of 8 Mbit/s (one byte per µs), on a NIC of 8 Mbit/s, and through both a NIC
/// of 16 and a link of 8 Mbit/s (the NIC's half a datagram first, then the link's pace).
#[test]
fn a_burst_arrives_spread_by_its_serialization_time() {
    let msg = message(1000);
    let s = msg.encoded_len() as f64;
    let lat = LATENCY_US as f64;
    let cases: [([Option<f64>; 2], Option<f64>, f64); 3] = [
        ([None, None], Some(8.0), 0.0),
        ([Some(8.0), None], None, 0.0),
        ([Some(16.0), None], Some(8.0), s / 2.0),
    ];
    for (nic, link, nic_first) in cases {
        let plan = msg.clone();
        let (seen, sim) = run(net(nic, link, &[0, 1]), true, move |i| {
            (i == 0).then(|| (1, 10, plan.clone()))
        });
        let got = arrivals(&seen, 1);
        let want: Vec<f64> = (1..=10).map(|k| lat + nic_first + k as f64 * s).collect();
        assert!(
            near(&got, &want),
            "nic {nic:?} link {link:?}: {got:?}, want {want:?}"
        );
        assert_eq!(sim.tail_drops(), 0);
    }
}

/// The same burst with bandwidth off, or on a network without figures, arrives all at
/// once, one latency after it was sent: the latency-only network of before.
#[test]
fn without_bandwidth_nothing_changes() {
    let msg = message(1000);
    for (net, on) in [
        (net([Some(8.0); 2], Some(8.0), &[0, 1]), false),
        (net([None; 2], None, &[0, 1]), true),
    ] {
        let plan = msg.clone();
        let (seen, _) = run(net, on, move |i| (i == 0).then(|| (1, 10, plan.clone())));
        assert_eq!(arrivals(&seen, 1), vec![LATENCY_US; 10]);
    }
}

/// A burst larger than the link's buffer (the 64 KiB floor at 8 Mbit/s) is cut at the
/// tail: the datagrams that fit arrive at the link's pace, each one dropped is reported to
/// its sender as lost, at once, and counted.
#[test]
fn a_full_link_drops_the_tail_and_tells_the_sender() {
    let msg = message(1000);
    let s = msg.encoded_len();
    let plan = msg.clone();
    let (seen, sim) = run(net([None; 2], Some(8.0), &[0, 1]), true, move |i| {
        (i == 0).then(|| (1, 100, plan.clone()))
    });
    // The idle link takes the first; each next one fits while the bytes ahead plus its own
    // are within the buffer.
    let fit = MIN_BUFFER / s;
    let got = arrivals(&seen, 1);
    let want: Vec<f64> = (1..=fit)
        .map(|k| (LATENCY_US as f64) + (k * s) as f64)
        .collect();
    assert!(near(&got, &want), "{got:?}, want {want:?}");
    let lost: Vec<(u64, Result<usize, usize>)> = seen
        .iter()
        .filter(|(n, _, _)| *n == 0)
        .map(|(_, t, w)| (*t, *w))
        .collect();
    assert_eq!(lost, vec![(0, Err(1)); 100 - fit]);
    assert_eq!(sim.tail_drops(), (100 - fit) as u64);
    assert_eq!(sim.messages_dropped(), (100 - fit) as u64);
}

/// Two nodes of A, each with an 8 Mbit/s NIC, send 20 datagrams each to B over one shared
/// A -> B link of 8 Mbit/s: the link carries one datagram per S µs in turn, so each sender
/// gets half of it (its k-th datagram arrives after 2k S rather than k S).
#[test]
fn two_senders_share_one_cluster_link() {
    let msg = message(1000);
    let s = msg.encoded_len() as f64;
    let plan = msg.clone();
    let (seen, sim) = run(
        net([Some(8.0), None], Some(8.0), &[0, 0, 1]),
        true,
        move |i| (i < 2).then(|| (2, 20, plan.clone())),
    );
    // Node 2 notes arrivals only, so tell the senders apart by order: the link serves the
    // two NICs' datagrams alternately (node 0's first at each instant).
    let got = arrivals(&seen, 2);
    let want: Vec<f64> = (0..40)
        .map(|j| LATENCY_US as f64 + (j + 2) as f64 * s)
        .collect();
    assert!(near(&got, &want), "{got:?}, want {want:?}");
    assert_eq!(sim.tail_drops(), 0);
    // Alone, one sender's 20 datagrams take half as long.
    let plan = msg.clone();
    let (seen, _) = run(
        net([Some(8.0), None], Some(8.0), &[0, 0, 1]),
        true,
        move |i| (i == 0).then(|| (2, 20, plan.clone())),
    );
    let last = *arrivals(&seen, 2).last().expect("arrived");
    assert!(
        (last as f64 - (LATENCY_US as f64 + 21.0 * s)).abs() <= 1.0,
        "{last}"
    );
}

/// Inside a cluster only the NICs limit: no link is crossed.
#[test]
fn inside_a_cluster_only_the_nic_limits() {
    let msg = message(1000);
    let s = msg.encoded_len() as f64;
    let plan = msg.clone();
    let (seen, _) = run(
        net([Some(8.0), None], Some(0.001), &[0, 0]),
        true,
        move |i| (i == 0).then(|| (1, 5, plan.clone())),
    );
    let want: Vec<f64> = (1..=5).map(|k| 20.0 + k as f64 * s).collect();
    let got = arrivals(&seen, 1);
    assert!(near(&got, &want), "{got:?}, want {want:?}");
}
