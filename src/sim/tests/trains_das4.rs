//! Packet trains with real cores on das-4: with bandwidth modelled, every node measures
//! the whole matrix, close to the topology's figures (which only the test reads), and
//! plans a broadcast whose bound is the topology's max flow; without, nothing is measured
//! and nothing breaks.

use crate::proto::{self, NodeId};
use crate::sim::{Sim, SimConfig, max_flow_mbit};
use crate::topology::Topology;
use std::time::Duration;

/// das-4 with a quarter of its nodes (4 at VU, 2 at each other cluster), two probers per
/// cluster (the library's default; the simulator's is none).
fn das4(bandwidth: bool) -> (Topology, Sim) {
    let topo = Topology::builtin("das-4")
        .expect("shipped topology")
        .scaled(0.25);
    let defaults = SimConfig::default();
    let cfg = SimConfig {
        seed: 5,
        bandwidth,
        core: proto::Config {
            bw_probers: 2,
            ..defaults.core.clone()
        },
        ..defaults
    };
    let sim = Sim::new(&topo, cfg);
    (topo, sim)
}

/// The topology's cluster of a discovered one (that of its first member).
pub(super) fn declared(sim: &Sim, members: &[NodeId]) -> Option<usize> {
    let i = sim.index_of(*members.first()?)?;
    Some(sim.cluster_of(i))
}

/// Runs until every node's view holds every cluster (a view of one cluster is complete
/// too) and every pair measured; how long that took.
pub(super) fn run_until_measured(topo: &Topology, sim: &mut Sim) -> Duration {
    let k = topo.clusters.len();
    let complete = |sim: &Sim| {
        sim.live_nodes().iter().all(|&i| {
            let view = sim.core(i).bandwidth_view();
            view.clusters.len() == k && view.complete()
        })
    };
    let mut waited = Duration::ZERO;
    while !complete(sim) && waited < Duration::from_secs(40) {
        sim.run_for(Duration::from_secs(1));
        waited += Duration::from_secs(1);
    }
    assert!(complete(sim), "views still incomplete after {waited:?}");
    waited
}

/// Whether `got` is within `share` of `want`.
pub(super) fn near(got: f64, want: f64, share: f64) -> bool {
    (got - want).abs() <= share * want
}

/// Every node's view becomes complete within the three quick rounds and some seconds
/// more; every figure of a VU node's view is within 15 % of the topology's link, and its
/// plan's bound within 10 % of the topology's max flow from VU.
#[test]
fn das4_trains_measure_the_topology() {
    let (topo, mut sim) = das4(true);
    let waited = run_until_measured(&topo, &mut sim);
    println!("every view complete at {waited:?}");
    // A few routine trains more, so the medians rest on several.
    sim.run_for(Duration::from_secs(20));
    let (sent, delivered) = sim.trains();
    assert!(
        delivered > 0 && delivered <= sent,
        "trains {sent} / {delivered}"
    );

    let vu = topo.cluster_index("VU").expect("das-4 has VU");
    let node = sim.nodes_in_cluster("VU")[0];
    let view = sim.core(node).bandwidth_view();
    assert_eq!(view.clusters.len(), topo.clusters.len(), "{view:?}");
    let mut checked = 0;
    for l in view.links.iter().filter(|l| l.from != l.to) {
        let a = declared(&sim, &view.clusters[l.from]).expect("known nodes");
        let b = declared(&sim, &view.clusters[l.to]).expect("known nodes");
        let want = topo.bandwidth_mbit(a, b).expect("das-4 gives every link") * 1e6;
        println!(
            "{} -> {}: {:.3} Mbit/s measured ({} figures), {:.3} in the topology",
            topo.clusters[a].name,
            topo.clusters[b].name,
            l.bps / 1e6,
            l.figures,
            want / 1e6
        );
        assert!(
            near(l.bps, want, 0.15),
            "{} -> {}: measured {:.2} Mbit/s, topology {:.2}",
            topo.clusters[a].name,
            topo.clusters[b].name,
            l.bps / 1e6,
            want / 1e6
        );
        checked += 1;
    }
    let k = topo.clusters.len();
    assert_eq!(checked, k * (k - 1));

    let plan = sim
        .core(node)
        .stripe_plan(16 << 20)
        .expect("a complete view plans");
    let bound = max_flow_mbit(&topo, vu) * 1e6;
    println!(
        "bound {:.3} Mbit/s planned, {:.3} max flow",
        plan.bound_bps / 1e6,
        bound / 1e6
    );
    assert!(
        near(plan.bound_bps, bound, 0.10),
        "bound {:.2} Mbit/s, topology's max flow {:.2}",
        plan.bound_bps / 1e6,
        bound / 1e6
    );
    // The train datagrams are counted apart from the control bytes.
    let kinds = sim.traffic();
    assert!(kinds.get("train").is_some_and(|t| t.bytes > 0));
    let control: u64 = kinds
        .iter()
        .filter(|(k, _)| **k != "train")
        .map(|(_, t)| t.bytes)
        .sum();
    assert_eq!(control, sim.control_bytes());
}

/// Without bandwidth every train arrives in one instant: the probers take it (it is the
/// train they asked for) but find no span to measure, so no estimate is made, no view
/// completes and no broadcast is planned; the trees are built as ever.
#[test]
fn das4_trains_without_bandwidth_measure_nothing() {
    let (_, mut sim) = das4(false);
    sim.run_for(Duration::from_secs(20));
    let (sent, delivered) = sim.trains();
    assert!(sent > 0 && delivered == sent, "trains {sent} / {delivered}");
    let received: u64 = (sim.live_nodes().iter())
        .map(|&i| sim.core(i).bandwidth_stats().trains_received)
        .sum();
    assert_eq!(received, delivered);
    for i in sim.live_nodes() {
        let core = sim.core(i);
        assert!(sim.ids().iter().all(|p| core.bandwidth_from(p).is_none()));
        assert!(!core.bandwidth_view().complete());
        assert!(core.stripe_plan(16 << 20).is_none());
    }
    assert_eq!(sim.cycles_seen(), 0);
    assert!(sim.snapshot().all_spanning());
}

/// A UvA node's connection to a VU node says it ran full at a tenth of the link: the
/// receiver (no prober, so it holds only the matrix's figure) and VU's two probers measure
/// UvA again at once, find the link as it was (the simulator's did not change), and the
/// matrix keeps it. The report is passed on once per interval only.
#[test]
fn a_saturated_path_is_checked_with_trains_by_the_receiving_cluster() {
    let (topo, mut sim) = das4(true);
    run_until_measured(&topo, &mut sim);
    sim.run_for(Duration::from_secs(5));
    let (vu, uva) = (
        topo.cluster_index("VU").expect("VU"),
        topo.cluster_index("UvA").expect("UvA"),
    );
    let mut members = sim.nodes_in_cluster("VU");
    members.sort_by_key(|&i| sim.id(i));
    let receiver = *members.last().expect("four at VU");
    let sender = sim.nodes_in_cluster("UvA")[0];
    let link = topo.bandwidth_mbit(uva, vu).expect("das-4 gives UvA -> VU") * 1e6;
    let asked = |sim: &Sim, i: usize| sim.core(i).bandwidth_stats().trains_asked;
    let receiver_asked = asked(&sim, receiver);
    let report = proto::Input::PathSaturated {
        to: sim.id(receiver),
        bytes: (link / 8.0 / 10.0) as u64,
        span: Duration::from_secs(1),
    };
    sim.measure(sender, report.clone());
    sim.run_for(Duration::from_secs(1));
    sim.measure(sender, report);
    sim.run_for(Duration::from_secs(8));

    let stats = |i: usize| sim.core(i).bandwidth_stats();
    assert_eq!(stats(sender).paths_saturated, 2);
    let rechecked: Vec<usize> = (members.iter().copied())
        .filter(|&i| stats(i).saturations_rechecked > 0)
        .collect();
    assert_eq!(
        rechecked,
        vec![members[0], members[1], receiver],
        "the probers and the receiver"
    );
    let told = sim.traffic().get("path_saturated").map(|t| t.messages);
    assert_eq!(told, Some(3), "passed on to three, once");
    assert!(
        asked(&sim, receiver) > receiver_asked,
        "the receiver measured UvA though it is no prober"
    );
    for &i in &members {
        let view = sim.core(i).bandwidth_view();
        let (a, b) = (
            view.cluster_of(&sim.id(sender)).expect("UvA"),
            view.cluster_of(&sim.id(i)).expect("VU"),
        );
        let got = view.bps(a, b).expect("measured");
        assert!(
            near(got, link, 0.15),
            "UvA -> VU at {:.2} Mbit/s after the false alarm, {:.2} in the topology",
            got / 1e6,
            link / 1e6
        );
    }
}
