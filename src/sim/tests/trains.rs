//! Packet trains in the simulator with scripted nodes: what the asker is told of a train
//! (as the QUIC driver computes it), through which pipes, when, and what is lost.

use crate::proto::{Event, Input, NodeId, Time, Transmit};
use crate::sim::train::{Flight, TRAIN_IDLE};
use crate::sim::{NetModel, Sim, SimConfig, SimNode, Spawn};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// One-way latency between the two clusters of the scripted runs.
const LATENCY_US: u64 = 10_000;
/// Bytes per datagram of the scripted trains.
const SIZE: u16 = 1000;

fn us(x: u64) -> Duration {
    Duration::from_micros(x)
}

/// A flight of `count` datagrams whose datagram `seq` arrives at `at(seq)` µs (`None`:
/// lost), measured.
fn measured(count: u16, at: impl Fn(u16) -> Option<u64>) -> Option<(u16, u16, Duration, Duration)> {
    let mut f = Flight::new(0, 1, 7, count, SIZE);
    for seq in 0..count {
        let done = f.resolve(seq, at(seq).map(us));
        assert_eq!(done, seq + 1 == count);
    }
    f.measure().map(|m| (m.received, m.spread, m.span, m.at))
}

/// The driver's arithmetic: the head (a third, at least one datagram) is left out of the
/// spread; a train whose last datagram is lost is reported `TRAIN_IDLE` after its last
/// arrival; with too few arrivals the whole train is the spread; none, no report.
#[test]
fn a_train_is_measured_as_the_driver_measures_it() {
    // 9 datagrams 1 ms apart: the tail starts at the fourth.
    let whole = measured(9, |s| Some(1000 * s as u64));
    assert_eq!(whole, Some((9, 6, us(5000), us(8000))));
    // The last one lost: 8 came, the tail is datagrams 3..=7, reported after the idle wait.
    let cut = measured(9, |s| (s < 8).then_some(1000 * s as u64));
    assert_eq!(cut, Some((8, 5, us(4000), us(7000) + TRAIN_IDLE)));
    // Only the first and the last: too few for a tail.
    let two = measured(9, |s| (s == 0 || s == 8).then_some(1000 * s as u64));
    assert_eq!(two, Some((2, 2, us(8000), us(8000))));
    // A train of two: the head is still one datagram, the tail the other (no span).
    assert_eq!(
        measured(2, |s| Some(10 * s as u64)),
        Some((2, 1, Duration::ZERO, us(10)))
    );
    assert_eq!(measured(4, |_| None), None);
}

/// One thing a node saw: (node, when in µs, what), what being a train report
/// `(received, spread, span)` or `Err(peer)` for a loss the node was told of.
type Sight = (usize, u64, Result<(u16, u16, Duration), usize>);
type Seen = Arc<Mutex<Vec<Sight>>>;

/// Node 0 sends node 1 a train of `packets` datagrams as soon as it learns of it; every
/// node notes the train reports and losses it is told of.
struct Trainer {
    index: usize,
    seed: u64,
    packets: u16,
    seen: Seen,
    events: VecDeque<Event>,
}

impl SimNode for Trainer {
    fn handle(&mut self, now: Time, input: Input) {
        let seed = self.seed;
        let index_of = move |id: NodeId| (0..8).find(|&i| NodeId::from_seed(seed, i) == id);
        let note = |what| {
            (self.seen.lock().expect("not poisoned")).push((self.index, now.as_micros(), what))
        };
        match input {
            Input::MemberUp { id } if self.index == 0 && index_of(id) == Some(1) => {
                self.events.push_back(Event::SendTrain {
                    to: id,
                    id: 42,
                    packets: self.packets,
                    size: SIZE,
                });
            }
            Input::TrainArrived {
                id,
                received,
                size,
                spread,
                span,
                from,
            } => {
                assert_eq!((id, size, index_of(from)), (42, SIZE, Some(0)));
                note(Ok((received, spread, span)));
            }
            Input::LinkLost { peer } => note(Err(index_of(peer).unwrap_or(99) as usize)),
            _ => {}
        }
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        None
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
    fn poll_timeout(&mut self) -> Option<Time> {
        None
    }
    fn parent(&self, _root: NodeId) -> Option<NodeId> {
        None
    }
}

/// Clusters A (node 0) and B (node 1), `LATENCY_US` apart, with an A -> B link of
/// `link` Mbit/s.
fn net(link: Option<f64>) -> NetModel {
    let i = us(20);
    let x = us(LATENCY_US);
    NetModel::new("two", &["A", "B"], &[vec![i, x], vec![x, i]], None, &[0, 1])
        .with_bandwidth(&[None, None], &[vec![None, link], vec![None, None]])
}

/// Runs `net` for two seconds with no CPU costs and a train of `packets`; returns what
/// was seen and the simulator.
fn run(
    net: NetModel,
    bandwidth: bool,
    packets: u16,
    partitioned: bool,
) -> (Vec<Sight>, Sim<Trainer>) {
    let cfg = SimConfig {
        cpu_send: Duration::ZERO,
        cpu_recv: Duration::ZERO,
        bandwidth,
        ..SimConfig::default()
    };
    let seed = cfg.seed;
    let seen = Seen::default();
    let log = seen.clone();
    let mut net = net;
    if partitioned {
        net.partition(0, 1);
    }
    let factory = Box::new(move |s: Spawn| Trainer {
        index: s.index,
        seed,
        packets,
        seen: log.clone(),
        events: VecDeque::new(),
    });
    let mut sim = Sim::with_nodes(net, cfg, factory);
    sim.run_until(Time::from_micros(2_000_000));
    let got = seen.lock().expect("not poisoned").clone();
    (got, sim)
}

/// A train over an 8 Mbit/s link (a byte per µs) arrives spread by the link: 16
/// datagrams, the last 11 over 10 gaps of `SIZE` µs, reported one latency after the
/// last datagram left the link; its bytes count as kind `train`, not as control bytes.
#[test]
fn a_train_is_spread_by_the_link_and_reported_at_its_last_datagram() {
    let (seen, sim) = run(net(Some(8.0)), true, 16, false);
    let s = SIZE as u64;
    let want = (1, LATENCY_US + 16 * s, Ok((16, 11, us(10 * s))));
    assert_eq!(seen, vec![want]);
    assert_eq!(sim.trains(), (1, 1));
    assert_eq!(sim.train_drops(), 0);
    let kind = sim.traffic().get("train").copied().unwrap_or_default();
    assert_eq!((kind.messages, kind.bytes), (16, 16 * s));
    assert_eq!((sim.control_bytes(), sim.messages_sent()), (0, 0));
    let r = sim.report();
    assert!(r.train_bytes_per_node_per_s > 0.0);
    assert!(!r.control_bytes_per_node_per_s_by_kind.contains_key("train"));
}

/// A train longer than the link's buffer (64 KiB at 8 Mbit/s) loses its tail: the
/// datagrams that fit are reported once the driver has waited `TRAIN_IDLE` for the
/// rest, and the sender is not told of the losses (datagrams are unreliable).
#[test]
fn a_train_cut_by_a_full_buffer_is_reported_after_the_idle_wait() {
    let (seen, sim) = run(net(Some(8.0)), true, 100, false);
    let s = SIZE as u64;
    let fit = (crate::topology::timeline::MIN_BUFFER as u64 / s) as u16;
    let last = LATENCY_US + fit as u64 * s;
    let idle = TRAIN_IDLE.as_micros() as u64;
    let tail = fit - 100 / 3;
    let want = (1, last + idle, Ok((fit, tail, us((tail as u64 - 1) * s))));
    assert_eq!(seen, vec![want]);
    assert_eq!(sim.train_drops(), 100 - fit as u64);
    assert_eq!((sim.messages_dropped(), sim.tail_drops()), (0, 0));
}

/// Without bandwidth (switched off, or no figure on the path) every datagram arrives at
/// once: the train is reported with no span, which the core discards (it takes no span
/// under 200 µs); across a partition nothing arrives and nothing is reported.
#[test]
fn a_train_without_bandwidth_has_no_span_and_a_cut_one_no_report() {
    for (link, on) in [(Some(8.0), false), (None, true)] {
        let (seen, sim) = run(net(link), on, 16, false);
        assert_eq!(seen, vec![(1, LATENCY_US, Ok((16, 11, Duration::ZERO)))]);
        assert_eq!(sim.trains(), (1, 1));
    }
    let (seen, sim) = run(net(Some(8.0)), true, 16, true);
    assert_eq!(seen, vec![]);
    assert_eq!((sim.trains(), sim.train_drops()), ((1, 0), 16));
}
