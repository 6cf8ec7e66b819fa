//! Collectives in the simulator under churn: phoenix-168, joins, leaves and crashes of 20%
//! of the nodes while 1000 broadcasts (and 100 reduces) start from random roots, over 20
//! seeds. Checked for every operation:
//! - every node delivers each broadcast at most once, and every node alive for the whole
//!   run delivers every broadcast exactly once;
//! - each report names exactly who missed it: everyone it lists as reached delivered, and
//!   everyone it lists as missing had left or crashed by the time of the report;
//! - a reduce's value is exactly the sum over the contributors it names (so nobody is
//!   counted twice), and only departed members are missing from it.
//!
//! `cargo test --release --test sim_collectives -- --nocapture` prints the figures.

use overlay::net::guard::MAX_UNSOLICITED_BYTES;
use overlay::proto::rng::SplitMix64;
use overlay::proto::{
    Command, Config, Core, DeliveryKind, Event, Input, NodeId, NumKind, OpKind, Reducer, Start,
    StartKind, Time,
};
use overlay::sim::{Action, NetModel, Sim, SimConfig, Spawn};
use overlay::topology::Topology;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

const BROADCASTS: u64 = 1000;
const REDUCE_EVERY: u64 = 10;
const SEEDS: u64 = 20;

fn topology(name: &str) -> Topology {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("topologies")
        .join(format!("{name}.toml"));
    Topology::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Each node's published value: derived from its id, so the test can recompute any sum.
fn value_of(id: &NodeId) -> u64 {
    u64::from(id.0[0]) + 1
}

struct Outcome {
    broadcasts: usize,
    reduces: usize,
    deliveries: usize,
    missing_reported: usize,
    mean_ms: f64,
    max_ms: f64,
}

fn run(topo: &Topology, seed: u64, shared: Option<usize>) -> Outcome {
    let mut cfg = SimConfig {
        seed,
        ..SimConfig::default()
    };
    cfg.core.shared_trees_from = shared;
    let core_cfg: Config = cfg.core.clone();
    let factory = Box::new(move |s: Spawn| {
        let mut core = Core::new(s.id, core_cfg.clone(), s.seed, s.now);
        let value = postcard::to_allocvec(&vec![value_of(&s.id)]).unwrap();
        core.handle(
            s.now,
            Input::Command(Command::Publish {
                key: "v".into(),
                value,
            }),
        );
        core
    });
    let mut sim = Sim::with_nodes(NetModel::from_topology(topo), cfg, factory);
    assert!(
        sim.run_until_spanning(Duration::from_secs(60)).is_some(),
        "seed {seed}: trees never spanned"
    );
    if shared.is_some() {
        // Until every node keeps only its cluster's trees and the other clusters'
        // representatives' (as discovery groups them): the operations below then leave
        // each cluster along its representative's tree.
        let shares = |sim: &Sim| {
            sim.live_nodes().into_iter().all(|i| {
                let c = sim.core(i);
                let live = sim.live_nodes();
                let want = live.iter().filter(|&&r| c.tracks_tree(sim.id(r))).count();
                want < live.len() && c.roots().len() == want
            })
        };
        let deadline = sim.now() + Duration::from_secs(30);
        while !shares(&sim) {
            assert!(sim.now() < deadline, "seed {seed}: trees never shared");
            sim.run_for(Duration::from_millis(500));
        }
        assert!(
            sim.run_until_spanning(Duration::from_secs(30)).is_some(),
            "seed {seed}: shared trees never spanned"
        );
    }
    let mut rng = SplitMix64::new(seed ^ 0xC011_EC71);
    let gap = Duration::from_millis(20);
    let start = sim.now();
    let end = start + gap * BROADCASTS as u32;
    let plan = sim.schedule_churn(20.0, start..end, &mut rng);
    let mut gone_at: HashMap<usize, Time> = HashMap::new();
    for (at, a) in &plan {
        if let Action::Leave { node } | Action::Crash { node } = a {
            gone_at.insert(*node, *at);
        }
    }
    let initial = sim.total_nodes();
    let stable: Vec<usize> = (0..initial).filter(|i| !gone_at.contains_key(i)).collect();
    sim.record_events(true);
    let mut started: HashMap<u64, (usize, OpKind)> = HashMap::new();
    let mut events = Vec::new();
    for n in 0..BROADCASTS {
        sim.run_for(gap);
        events.extend(sim.take_events());
        let root = stable[rng.below(stable.len() as u64) as usize];
        let nonce = n * 2;
        sim.command(
            root,
            Command::Start(Start {
                group: None,
                nonce,
                timeout: Duration::from_secs(5),
                what: StartKind::Broadcast {
                    payload: nonce.to_le_bytes().to_vec(),
                },
            }),
        );
        started.insert(nonce, (root, OpKind::Broadcast));
        if n % REDUCE_EVERY == 0 {
            let root = stable[rng.below(stable.len() as u64) as usize];
            sim.command(
                root,
                Command::Start(Start {
                    group: None,
                    nonce: nonce + 1,
                    timeout: Duration::from_secs(5),
                    what: StartKind::Reduce {
                        key: "v".into(),
                        request: Vec::new(),
                        reducer: Reducer::Sum(NumKind::U64),
                    },
                }),
            );
            started.insert(nonce + 1, (root, OpKind::Reduce));
        }
    }
    sim.run_for(Duration::from_secs(8));
    events.extend(sim.take_events());
    assert_eq!(sim.cycles_seen(), 0, "seed {seed}: a tree had a cycle");
    // Late answers and a dead member's last messages under churn: never enough for a real
    // node to cut an honest peer off.
    let most = sim.unsolicited_most();
    assert!(
        most < MAX_UNSOLICITED_BYTES / 8,
        "seed {seed}: {most} bytes nobody asked for from one peer"
    );

    // Ground truth from the nodes' own events.
    let mut delivered: HashMap<(usize, u64), u32> = HashMap::new();
    let mut reports = HashMap::new();
    for (t, node, ev) in events {
        match ev {
            Event::Delivered(d) if d.kind == DeliveryKind::Broadcast => {
                *delivered.entry((node, d.op.nonce)).or_default() += 1;
            }
            Event::Report(r) => {
                let op = r.op.expect("op");
                assert_eq!(started.get(&op.nonce).map(|s| s.0), Some(node));
                assert!(reports.insert(op.nonce, (t, r)).is_none(), "two reports");
            }
            _ => {}
        }
    }
    for ((node, nonce), count) in &delivered {
        assert_eq!(
            *count, 1,
            "seed {seed}: node {node} delivered op {nonce} {count} times"
        );
    }
    let whole_run: Vec<usize> = stable.clone();
    let mut times = Vec::new();
    let mut missing_reported = 0;
    for (nonce, (root, kind)) in &started {
        let (t, r) = reports
            .get(nonce)
            .unwrap_or_else(|| panic!("seed {seed}: op {nonce} from {root} never reported"));
        assert!(r.error.is_none(), "{:?}", r.error);
        let reached: HashSet<NodeId> = r.reached.iter().copied().collect();
        let expected: BTreeSet<NodeId> = r.expected.iter().copied().collect();
        for m in &r.missing {
            let i = sim.index_of(*m).expect("known node");
            let gone = gone_at.get(&i).is_some_and(|g| g <= t);
            assert!(
                gone,
                "seed {seed}: op {nonce} reports node {i} missing, but it was alive"
            );
            assert!(expected.contains(m));
        }
        missing_reported += r.missing.len();
        match kind {
            OpKind::Broadcast => {
                for &i in &whole_run {
                    assert_eq!(
                        delivered.get(&(i, *nonce)),
                        Some(&1),
                        "seed {seed}: node {i}, alive throughout, missed broadcast {nonce}"
                    );
                    assert!(
                        reached.contains(&sim.id(i)),
                        "seed {seed}: op {nonce} lacks {i}"
                    );
                }
                for id in &reached {
                    let i = sim.index_of(*id).expect("known");
                    assert!(
                        delivered.contains_key(&(i, *nonce)),
                        "reported but not delivered"
                    );
                }
                let unaccounted: Vec<_> =
                    expected.iter().filter(|x| !reached.contains(x)).collect();
                assert_eq!(
                    unaccounted.len(),
                    r.missing.len(),
                    "missing = expected - reached"
                );
                times.push(r.elapsed.as_secs_f64() * 1e3);
            }
            OpKind::Reduce => {
                let sum: Vec<u64> = postcard::from_bytes(r.value.as_ref().expect("value")).unwrap();
                let exact: u64 = r.contributors.iter().map(value_of).sum();
                assert_eq!(
                    sum,
                    vec![exact],
                    "seed {seed}: reduce {nonce} != sum over contributors"
                );
                let unique: HashSet<&NodeId> = r.contributors.iter().collect();
                assert_eq!(unique.len(), r.contributors.len());
                for &i in &whole_run {
                    assert!(
                        r.contributors.contains(&sim.id(i)),
                        "seed {seed}: {i} not in reduce {nonce}"
                    );
                }
            }
            _ => unreachable!(),
        }
    }
    times.sort_by(f64::total_cmp);
    Outcome {
        broadcasts: BROADCASTS as usize,
        reduces: started.values().filter(|s| s.1 == OpKind::Reduce).count(),
        deliveries: delivered.len(),
        missing_reported,
        mean_ms: times.iter().sum::<f64>() / times.len() as f64,
        max_ms: times.last().copied().unwrap_or(0.0),
    }
}

#[test]
fn broadcasts_and_reduces_under_churn_are_exact_on_phoenix_168() {
    let topo = topology("phoenix-168");
    // Two workers: the seeds are independent runs.
    let next = std::sync::atomic::AtomicU64::new(1);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if seed > SEEDS {
                        break;
                    }
                    one_seed(&topo, seed, None);
                }
            });
        }
    });
}

/// The same with the trees of a cluster's roots shared outside it (`shared_trees_from`):
/// operations leave their cluster along its representative's tree, and every node is still
/// reached once and counted once, under the same churn (representatives crash too). Two
/// seeds share from the start; two from 100 members on, so every node turns sharing on in
/// the middle of the cold start and drops the trees it kept until then.
#[test]
fn broadcasts_and_reduces_over_shared_trees_under_churn_are_exact_on_phoenix_168() {
    let topo = topology("phoenix-168");
    for (seed, from) in [(1, 2), (2, 2), (3, 100), (4, 100)] {
        one_seed(&topo, seed, Some(from));
    }
}

fn one_seed(topo: &Topology, seed: u64, shared: Option<usize>) {
    {
        let wall = std::time::Instant::now();
        let o = run(topo, seed, shared);
        println!(
            "seed {seed:2}{}: {} broadcasts + {} reduces, {} deliveries, {} missing reported \
             (all departed), broadcast report after {:.0} ms mean / {:.0} ms max; {:.1} s wall",
            shared.map_or(String::new(), |n| format!(" (shared from {n})")),
            o.broadcasts,
            o.reduces,
            o.deliveries,
            o.missing_reported,
            o.mean_ms,
            o.max_ms,
            wall.elapsed().as_secs_f64()
        );
    }
}
