//! A cluster cut off from every other long enough for the membership protocol to declare
//! each side dead to the other, then healed: the trees dropped on both sides come back
//! without a cycle, span again within seconds and are wide-area optimal soon after, with
//! the default configuration and with the quieting options (`rtt_hold`,
//! `advert_drift_interval`, `probe_backoff`, on by default) turned off.
//!
//! `cargo test --release --test integration sim_heal -- --nocapture` prints the figures.

use overlay::proto::Time;
use overlay::proto::gossip::GossipConfig;
use overlay::sim::{Action, Sim, SimConfig};
use overlay::topology::Topology;
use std::time::Duration;

/// How long the cut lasts: well past the membership protocol's suspicion timeout.
const CUT: Duration = Duration::from_secs(40);

/// How soon after the heal every tree must span every node again.
const SPAN_LIMIT: Duration = Duration::from_secs(15);

/// How soon after the heal every tree must be wide-area optimal (each cluster entered
/// once) and stay so for the simulator's `stable_for`.
const OPTIMAL_LIMIT: Duration = Duration::from_secs(30);

/// One run: converge, cut cluster `seed % clusters` off, heal. Returns the times from the
/// heal until every tree spans, and until the trees are converged (wide-area optimal, no
/// parent moving). Panics on a cycle, on a cut that did not make either side drop the
/// other's trees, or past [`SPAN_LIMIT`] or [`OPTIMAL_LIMIT`].
fn cut_and_heal(name: &str, seed: u64, quiet: bool) -> (Duration, Duration) {
    let topo = Topology::builtin(name).unwrap_or_else(|| panic!("{name} is not shipped"));
    let mut cfg = SimConfig {
        seed,
        ..SimConfig::default()
    };
    if !quiet {
        cfg.core.rtt_hold = false;
        cfg.core.advert_drift_interval = Duration::ZERO;
        cfg.core.probe_backoff = 1;
    }
    let mut sim = Sim::with_membership(&topo, cfg, GossipConfig::default());
    assert!(
        sim.run_until_converged(Duration::from_secs(60)).is_some(),
        "{name} seed {seed}: not converged\n{}",
        sim.explain(3)
    );
    let k = topo.clusters.len();
    let cut = seed as usize % k;
    let others = || (0..k).filter(move |&o| o != cut);
    for o in others() {
        sim.apply(Action::Partition { a: cut, b: o });
    }
    sim.run_for(CUT);
    // The cut must have been a real one: each side dropped the other's trees.
    let inside = sim
        .live_nodes()
        .into_iter()
        .find(|&i| sim.cluster_of(i) == cut);
    let outside = sim
        .live_nodes()
        .into_iter()
        .find(|&i| sim.cluster_of(i) != cut);
    let (inside, outside) = (
        inside.expect("a node inside"),
        outside.expect("one outside"),
    );
    assert!(
        sim.core(inside).tree(sim.id(outside)).is_none()
            && sim.core(outside).tree(sim.id(inside)).is_none(),
        "{name} seed {seed}: the cut did not make the sides drop each other's trees"
    );
    for o in others() {
        sim.apply(Action::Heal { a: cut, b: o });
    }
    let healed = sim.now();
    let spans = sim.run_until_spanning(SPAN_LIMIT);
    assert_eq!(
        sim.cycles_seen(),
        0,
        "{name} seed {seed} quiet {quiet}: cycles after the heal: {:?}",
        sim.cycles()
            .iter()
            .take(5)
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
    );
    let Some(spans) = spans else {
        panic!(
            "{name} seed {seed} quiet {quiet}: trees do not span {SPAN_LIMIT:?} after the heal\n{}",
            sim.explain(5)
        )
    };
    let left = (healed + OPTIMAL_LIMIT).saturating_since(sim.now());
    let Some(optimal) = sim.run_until_converged(left) else {
        panic!(
            "{name} seed {seed} quiet {quiet}: trees not wide-area optimal {OPTIMAL_LIMIT:?} \
             after the heal\n{}",
            sim.explain(5)
        )
    };
    // `run_until_converged` gives the start of the stable period, from time zero.
    let optimal = (Time::ZERO + optimal).saturating_since(healed);
    assert_eq!(sim.cycles_seen(), 0, "{name} seed {seed} quiet {quiet}");
    (spans, optimal)
}

#[test]
fn a_cluster_declared_dead_and_healed_rejoins_every_tree_without_a_cycle() {
    for quiet in [false, true] {
        let runs: Vec<(Duration, Duration)> = (1..=6)
            .map(|seed| cut_and_heal("das-4", seed, quiet))
            .collect();
        let (spans, optimal): (Vec<Duration>, Vec<Duration>) = runs.into_iter().unzip();
        let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
        let worst = |v: &[Duration]| *v.iter().max().expect("runs");
        eprintln!(
            "das-4, a cluster cut off for {CUT:?} and healed, quieting options {}: trees span \
             again {:.2?} after the heal on average ({:.2?} at worst), wide-area optimal after \
             {:.2?} ({:.2?}); {} runs, no cycle",
            if quiet { "on" } else { "off" },
            mean(&spans),
            worst(&spans),
            mean(&optimal),
            worst(&optimal),
            spans.len()
        );
    }
}
