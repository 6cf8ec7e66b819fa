//! The simulator running whole protocol nodes, membership protocol included: nodes join
//! through the first, learn of each other, of departures and of crashes from membership
//! messages only (the simulator tells them nothing), and those messages count in the
//! traffic figures.
//!
//! `cargo test --release --test integration sim_membership -- --nocapture` prints the figures.

use overlay::proto::gossip::GossipConfig;
use overlay::sim::{Action, Sim, SimConfig};
use overlay::topology::Topology;
use std::path::Path;
use std::time::Duration;

fn topology(name: &str) -> Topology {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("topologies")
        .join(format!("{name}.toml"));
    Topology::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn gossip_sim(name: &str, seed: u64) -> Sim<overlay::sim::MemberNode> {
    let config = SimConfig {
        seed,
        ..SimConfig::default()
    };
    Sim::with_membership(&topology(name), config, GossipConfig::default())
}

#[test]
fn nodes_that_learn_members_by_gossip_build_optimal_trees_and_gossip_is_counted() {
    for (name, seed) in [("phoenix-27", 1), ("das-4", 2)] {
        let mut sim = gossip_sim(name, seed);
        let converged = sim.run_until_converged(Duration::from_secs(60));
        let report = sim.report();
        eprintln!(
            "{name} seed {seed} with membership: converged {converged:?}, steady {:?} B/node/s",
            report.steady_control_bytes_per_node_per_s
        );
        assert!(
            converged.is_some(),
            "{name}: not converged\n{}",
            sim.explain(3)
        );
        assert_eq!(sim.cycles_seen(), 0);
        let by_kind = report
            .steady_control_bytes_per_node_per_s_by_kind
            .expect("steady figures once converged");
        let gossip: f64 = (by_kind.iter())
            .filter(|(k, _)| k.starts_with("gossip"))
            .map(|(_, v)| v)
            .sum();
        assert!(
            gossip > 0.0,
            "{name}: membership traffic is counted: {by_kind:?}"
        );
    }
}

#[test]
fn a_crash_is_found_by_the_membership_protocol_and_repaired() {
    let mut sim = gossip_sim("phoenix-27", 3);
    assert!(sim.run_until_converged(Duration::from_secs(60)).is_some());
    // Crash a node that is not the first (every node joined through the first).
    let victim = sim.live_nodes()[5];
    let victim_id = sim.id(victim);
    sim.schedule(sim.now(), Action::Crash { node: victim });
    sim.run_for(Duration::from_millis(500));
    // Nobody is told: half a second later, the others still count it as a member.
    let still_known = sim
        .live_nodes()
        .into_iter()
        .filter(|&i| sim.core(i).tree(victim_id).is_some())
        .count();
    assert!(
        still_known > 0,
        "the crash was not told to anyone, so not known yet"
    );
    // Probes, suspicion and its timeout take seconds; then the trees repair.
    sim.run_for(Duration::from_secs(20));
    let repaired = sim.run_until_converged(Duration::from_secs(60));
    assert!(repaired.is_some(), "{}", sim.explain(3));
    for i in sim.live_nodes() {
        assert!(
            sim.core(i).tree(victim_id).is_none(),
            "node {i} dropped the crashed node's tree once gossip declared it dead"
        );
    }
    let report = sim.report();
    eprintln!(
        "phoenix-27 crash with membership: repair {:?} ms (max), {} unrepaired",
        report.repair_ms_max, report.unrepaired
    );
    assert_eq!(report.unrepaired, 0);
    assert_eq!(sim.cycles_seen(), 0);
}

#[test]
fn a_join_whose_contact_crashes_before_answering_goes_to_another_member() {
    let mut sim = gossip_sim("phoenix-27", 4);
    assert!(sim.run_until_converged(Duration::from_secs(60)).is_some());
    // The newcomer asks the first live node, which crashes before the request arrives.
    let contact = sim.live_nodes()[0];
    let now = sim.now();
    sim.schedule(now, Action::Join { cluster: 0 });
    sim.schedule(now, Action::Crash { node: contact });
    sim.run_for(Duration::from_secs(5));
    let newcomer = *sim.live_nodes().last().expect("a node");
    let newcomer_id = sim.id(newcomer);
    assert!(
        sim.live_nodes()
            .into_iter()
            .filter(|&i| i != newcomer)
            .all(|i| sim.core(i).tree(newcomer_id).is_none()),
        "nobody admitted the newcomer yet: its request went to a crashed node"
    );
    // After its join wait the newcomer asks another member and is admitted by all.
    let converged = sim.run_until_converged(Duration::from_secs(90));
    assert!(converged.is_some(), "{}", sim.explain(3));
    for i in sim.live_nodes() {
        if i != newcomer {
            assert!(
                sim.core(i).tree(newcomer_id).is_some(),
                "node {i} has the newcomer's tree"
            );
        }
    }
}
