//! The simulator on the shipped topologies: the trees converge to spanning, wide-area (and
//! site) optimal trees with no cycle, and the paper's Fig. 2 case settles without
//! oscillating. Uses the core's default configuration (bounded candidate set).
//!
//! Figures (convergence time, control bytes per node per second) are printed; run with
//! `cargo test --release --test sim_topologies -- --nocapture` to see them.

use overlay::sim::{Sim, SimConfig};
use overlay::topology::Topology;
use std::path::Path;
use std::time::Duration;

fn topology(name: &str) -> Topology {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("topologies")
        .join(format!("{name}.toml"));
    Topology::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn config(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        ..SimConfig::default()
    }
}

/// Runs `name` with `seed` until converged (at most `max` simulated), prints the figures and
/// asserts that every tree spans every node, is wide-area optimal (and site optimal when the
/// topology has sites), and that no cycle was ever seen.
fn converges(name: &str, seed: u64, max: Duration) -> Sim {
    converges_with(name, config(seed), max)
}

/// [`converges`] with these settings.
fn converges_with(name: &str, cfg: SimConfig, max: Duration) -> Sim {
    let seed = cfg.seed;
    let topo = topology(name);
    let mut sim = Sim::new(&topo, cfg);
    let converged = sim.run_until_converged(max);
    let r = sim.report();
    println!(
        "{name} seed {seed}: every tree optimal from {} ms, converged {} ms, {:.0} B/node/s overall, {} B/node/s steady, depth max {} mean {:.2}, \
         max fan-out {}, {} messages, {} parent changes",
        r.optimal_ms.map_or("-".into(), |v| format!("{v:.0}")),
        r.converged_ms.map_or("-".into(), |v| format!("{v:.0}")),
        r.control_bytes_per_node_per_s,
        r.steady_control_bytes_per_node_per_s
            .map_or("-".into(), |v| format!("{v:.0}")),
        r.max_depth,
        r.mean_depth,
        r.max_fanout,
        r.messages,
        r.parent_changes,
    );
    assert_eq!(
        r.cycles_seen,
        0,
        "{name} seed {seed}: cycles:\n{}",
        sim.explain(0)
    );
    assert!(
        converged.is_some(),
        "{name} seed {seed}: not converged within {max:?} (a tree must stay spanning and optimal with no parent \
         change for {:?}):\n{r}\n{}",
        sim.config().stable_for,
        sim.explain(5)
    );
    let (optimal, stable) = (
        r.optimal_ms.expect("set on convergence"),
        r.converged_ms.expect("converged"),
    );
    assert!(
        optimal <= stable,
        "{name} seed {seed}: every tree optimal from {optimal} ms, after the stable period began ({stable} ms)"
    );
    assert_eq!(r.nodes, topo.node_count());
    assert_eq!(r.trees, r.nodes);
    assert_eq!(
        r.spanning,
        r.trees,
        "{name} seed {seed}:\n{}",
        sim.explain(5)
    );
    assert_eq!(
        r.wide_area_optimal,
        r.trees,
        "{name} seed {seed}:\n{}",
        sim.explain(5)
    );
    if topo.has_sites() {
        assert_eq!(
            r.site_optimal,
            r.trees,
            "{name} seed {seed}:\n{}",
            sim.explain(5)
        );
    }
    sim
}

#[test]
fn fig2_shortcut_settles_with_b_under_the_root() {
    for seed in 1..=5 {
        let topo = topology("fig2-shortcut");
        let mut sim = Sim::new(&topo, config(seed));
        let root = sim.nodes_in_cluster("root")[0];
        let b = sim.nodes_in_cluster("B")[0];
        let converged = sim.run_until_converged(Duration::from_secs(60));
        assert!(
            converged.is_some(),
            "seed {seed}: not converged:\n{}\n{}",
            sim.report(),
            sim.explain(3)
        );
        let settled = sim.parent_changes(root, b);
        sim.run_for(Duration::from_secs(30));
        let after = sim.parent_changes(root, b);
        println!(
            "fig2-shortcut seed {seed}: converged {:?}, B's parent changed {settled} times before settling, {} after",
            converged.expect("checked"),
            after - settled
        );
        assert_eq!(
            sim.parent_of(root, b),
            Some(root),
            "seed {seed}: B must hang directly under the root"
        );
        assert_eq!(
            after, settled,
            "seed {seed}: B's parent in the root's tree changed after settling (oscillation)"
        );
        assert!(
            settled <= 3,
            "seed {seed}: B changed parent {settled} times before settling"
        );
        assert_eq!(sim.cycles_seen(), 0);
    }
}

/// One site whose machine room holds three declared clusters 30-60 µs apart, plus two sites
/// 5-8 ms away: no node can tell the three apart, and its trees enter them by whichever
/// edges are shortest. Judged on the groups latency can tell apart (the three are one), the
/// run converges; judged on the declared clusters, as before, it never did.
#[test]
fn split_site_converges_on_the_groups_latency_can_tell_apart() {
    for seed in 1..=3 {
        let sim = converges("split-site", seed, Duration::from_secs(60));
        let lyon: Vec<usize> = ["lyon-a", "lyon-b", "lyon-c"]
            .iter()
            .map(|n| sim.net().cluster_index(n).expect("a cluster of split-site"))
            .collect();
        assert_eq!(sim.net().groups().merged(), vec![lyon]);
    }
}

/// With the topology's bandwidths modelled (das-4's asymmetric 3-28 Mbit/s links, and
/// phoenix-27's 100 Mbit/s links and 1 Gbit/s NICs), the control traffic fits: nothing is
/// dropped, and the trees converge as on a latency-only network.
#[test]
fn with_bandwidth_das_4_and_phoenix_27_converge_without_drops() {
    for name in ["das-4", "phoenix-27"] {
        for seed in 1..=2 {
            let cfg = SimConfig {
                bandwidth: true,
                ..config(seed)
            };
            let sim = converges_with(name, cfg, Duration::from_secs(60));
            assert_eq!(sim.tail_drops(), 0, "{name} seed {seed}");
        }
    }
}

#[test]
fn phoenix_27_converges_to_optimal_trees() {
    for seed in 1..=3 {
        converges("phoenix-27", seed, Duration::from_secs(60));
    }
}

#[test]
fn das_4_converges_to_optimal_trees() {
    for seed in 1..=3 {
        converges("das-4", seed, Duration::from_secs(60));
    }
}

#[test]
fn sites_64_converges_to_site_optimal_trees() {
    for seed in 1..=2 {
        converges("sites-64", seed, Duration::from_secs(90));
    }
}

/// The paper's Fig. 5 setup (168 nodes, clusters of 100, 65 and 3): every tree becomes
/// spanning and wide-area optimal and stays unchanged for the stable period, under the
/// simulator's default CPU cost model.
#[test]
fn phoenix_168_converges_to_optimal_trees() {
    for seed in 1..=3 {
        converges("phoenix-168", seed, Duration::from_secs(60));
    }
}

/// 1000 nodes, 1000 trees; run with
/// `cargo test --release --test sim_topologies -- --ignored --nocapture`.
#[test]
#[ignore = "slow: about 27 simulated seconds, 45 M messages, 4-5 minutes of wall time and 2.4 GB on two cores"]
fn scale_1000_converges() {
    converges("scale-1000", 1, Duration::from_secs(120));
}
