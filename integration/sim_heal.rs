//! A cluster cut off from every other long enough for the membership protocol to declare
//! each side dead to the other, then healed: the trees dropped on both sides come back
//! without a cycle and span again within seconds, with the default configuration and
//! with the quieting options (`rtt_hold`, `advert_drift_interval`, `probe_backoff`).
//!
//! `cargo test --release --test integration sim_heal -- --nocapture` prints the figures.

use overlay::proto::gossip::GossipConfig;
use overlay::sim::{Action, Sim, SimConfig};
use overlay::topology::Topology;
use std::time::Duration;

/// How long the cut lasts: well past the membership protocol's suspicion timeout.
const CUT: Duration = Duration::from_secs(40);

/// How soon after the heal every tree must span every node again.
const SPAN_LIMIT: Duration = Duration::from_secs(15);

/// One run: converge, cut cluster `seed % clusters` off, heal. Returns the time from the
/// heal until every tree spans. Panics on a cycle, on a cut that did not make either side
/// drop the other's trees, or on trees that do not span within [`SPAN_LIMIT`].
fn cut_and_heal(name: &str, seed: u64, quiet: bool) -> Duration {
    let topo = Topology::builtin(name).unwrap_or_else(|| panic!("{name} is not shipped"));
    let mut cfg = SimConfig {
        seed,
        ..SimConfig::default()
    };
    if quiet {
        cfg.core.rtt_hold = true;
        cfg.core.advert_drift_interval = Duration::from_secs(2);
        cfg.core.probe_backoff = 3;
        cfg.core.inbound_expiry *= 2;
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
    spans.unwrap_or_else(|| {
        panic!(
            "{name} seed {seed} quiet {quiet}: trees do not span {SPAN_LIMIT:?} after the heal\n{}",
            sim.explain(5)
        )
    })
}

#[test]
fn a_cluster_declared_dead_and_healed_rejoins_every_tree_without_a_cycle() {
    for quiet in [false, true] {
        let times: Vec<Duration> = (1..=6)
            .map(|seed| cut_and_heal("das-4", seed, quiet))
            .collect();
        let worst = times.iter().max().expect("runs");
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        eprintln!(
            "das-4, a cluster cut off for {CUT:?} and healed, quieting options {}: \
             trees span again {mean:.2?} after the heal on average, {worst:.2?} at worst \
             ({} runs, no cycle)",
            if quiet { "on" } else { "off" },
            times.len()
        );
    }
}
