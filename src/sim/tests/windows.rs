//! Windows spread the nodes' handling over threads (`simulator::window`): a run's results
//! must not depend on how many there are.

use crate::proto::Time;
use crate::proto::gossip::GossipConfig;
use crate::sim::{Sim, SimConfig};
use crate::topology::Topology;

/// What a run ends with: its counters and every live node's parent in every tree.
type Outcome = (
    u64,
    u64,
    (u64, u64),
    u64,
    (u64, u64),
    Vec<Option<usize>>,
    u64,
);

/// das-4 with 24 nodes per site, whole nodes (membership included), bandwidth, trains and
/// some loss, for 4 s simulated, on a pool of `threads` threads.
fn run(threads: usize) -> Outcome {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool");
    pool.install(|| {
        let mut topo = Topology::builtin("das-4").expect("shipped topology");
        for c in &mut topo.clusters {
            c.nodes = 24;
        }
        let defaults = SimConfig::default();
        let cfg = SimConfig {
            seed: 11,
            bandwidth: true,
            loss: 0.002,
            core: crate::proto::Config {
                bw_probers: 2,
                ..defaults.core.clone()
            },
            ..defaults
        };
        let mut sim = Sim::with_membership(&topo, cfg, GossipConfig::default());
        sim.run_until(Time::from_micros(4_000_000));
        let live = sim.live_nodes();
        let parents = live
            .iter()
            .flat_map(|&root| live.iter().map(move |&node| (root, node)))
            .map(|(root, node)| sim.parent_of(root, node))
            .collect();
        (
            sim.messages_sent(),
            sim.control_bytes(),
            sim.parent_change_counts(),
            sim.messages_dropped(),
            sim.trains(),
            parents,
            sim.windows().1,
        )
    })
}

#[test]
fn a_run_is_the_same_on_one_thread_and_on_two() {
    let one = run(1);
    let two = run(2);
    assert!(
        two.6 > 1000,
        "the run spread {} windows over the threads: too few to tell",
        two.6
    );
    assert!(one.2.0 > 0 && one.4.0 > 0, "trees and trains at work");
    assert_eq!(one, two);
}
