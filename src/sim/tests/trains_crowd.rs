//! Packet trains among many members per cluster: das-4 with 64 nodes at each site. Before
//! discovery settles every node sees clusters of one and is its own prober; the trains
//! that asks for, and the figures they leave behind, must not outvote what the probers
//! measure once the clusters are known.

use super::trains_das4::{declared, near, run_until_measured};
use crate::proto;
use crate::sim::{Sim, SimConfig};
use crate::topology::Topology;

/// Every node's matrix is the topology's within 15 % five probe intervals after every
/// view completed, the 400 Mbit/s LANs included (a first train sized from no estimate is
/// too short to measure one); only the probers hold figures; no node asked more than the
/// cap allows.
#[test]
fn crowded_clusters_measure_the_topology_and_only_the_probers_keep_figures() {
    let mut topo = Topology::builtin("das-4").expect("shipped topology");
    for c in &mut topo.clusters {
        c.nodes = 64;
    }
    let defaults = SimConfig::default();
    let probers = 2;
    let cfg = SimConfig {
        seed: 3,
        bandwidth: true,
        core: proto::Config {
            bw_probers: probers,
            ..defaults.core.clone()
        },
        ..defaults
    };
    let interval = cfg.core.bw_probe_interval;
    let mut sim = Sim::new(&topo, cfg);
    let waited = run_until_measured(&topo, &mut sim);
    sim.run_for(interval * 5);
    let k = topo.clusters.len();
    let mut wrong = Vec::new();
    for i in sim.live_nodes() {
        let view = sim.core(i).bandwidth_view();
        assert_eq!(view.clusters.len(), k);
        assert_eq!(
            view.links.len(),
            k * k,
            "node {i}: every pair and every LAN"
        );
        for l in &view.links {
            let a = declared(&sim, &view.clusters[l.from]).expect("known nodes");
            let b = declared(&sim, &view.clusters[l.to]).expect("known nodes");
            let want = topo.bandwidth_mbit(a, b).expect("das-4 gives every link") * 1e6;
            if !near(l.bps, want, 0.15) {
                wrong.push(format!(
                    "node {i}: {} -> {} {:.1} Mbit/s, topology {:.1}",
                    topo.clusters[a].name,
                    topo.clusters[b].name,
                    l.bps / 1e6,
                    want / 1e6
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "views complete after {waited:?}; {} wrong figures, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(6)]
    );
    let ids = sim.ids().to_vec();
    for c in 0..k {
        let mut members = sim.nodes_in_cluster(&topo.clusters[c].name);
        members.sort_by_key(|&i| sim.id(i));
        for (rank, &i) in members.iter().enumerate() {
            let holds = ids
                .iter()
                .filter(|p| sim.core(i).bandwidth_from(p).is_some())
                .count();
            if rank < probers {
                assert!(holds > 0, "prober {i} holds no figure");
            } else {
                assert_eq!(holds, 0, "node {i} is no prober but holds {holds} figures");
            }
        }
    }
    // Quick and catch-up rounds, then one per interval, each at most eight others and
    // one inside; rechecks would come on top, and the bound leaves no room for a storm.
    let elapsed = sim.now().saturating_since(proto::Time::ZERO);
    let rounds = 3 + 10 + (elapsed.as_secs_f64() / (interval.as_secs_f64() * 0.75)).ceil() as u64;
    for i in sim.live_nodes() {
        let asked = sim.core(i).bandwidth_stats().trains_asked;
        assert!(
            asked <= rounds * 9,
            "node {i} asked {asked} trains in {rounds} rounds"
        );
    }
}
