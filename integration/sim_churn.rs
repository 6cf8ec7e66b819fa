//! The simulator under churn: loop freedom over many seeds (joins, leaves, crashes and a
//! partition that heals), and repair time after single crashes.
//!
//! Run with `cargo test --release --test sim_churn -- --nocapture` to see the figures.

use overlay::net::guard::MAX_UNSOLICITED_BYTES;
use overlay::proto::Time;
use overlay::proto::rng::SplitMix64;
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

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// One churn run: 2 s of tree building, then joins, leaves and crashes of 20% of the nodes
/// over 4 s with a partition between two clusters from 1 s to 3 s into the churn. Asserts
/// no cycle after every half second, and that once everything is over every tree spans
/// every live node again. Returns the time from the last action to the first all-spanning
/// snapshot.
/// Time until the trees span again after the churn, and the most bytes nobody asked for
/// that one node got from one peer.
fn churn_run(topo: &Topology, seed: u64) -> (Duration, u64) {
    let name = &topo.name;
    let mut sim = Sim::new(
        topo,
        SimConfig {
            seed,
            ..SimConfig::default()
        },
    );
    let mut rng = SplitMix64::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xC0FFEE);
    sim.run_until(Time::ZERO + secs(2.0));
    sim.set_check_interval(Duration::from_millis(20));
    let start = sim.now();
    let plan = sim.schedule_churn(20.0, start..start + secs(4.0), &mut rng);
    let k = topo.clusters.len() as u64;
    let a = rng.below(k) as usize;
    let b = ((a as u64 + 1 + rng.below(k - 1)) % k) as usize;
    sim.schedule(start + secs(1.0), Action::Partition { a, b });
    sim.schedule(start + secs(3.0), Action::Heal { a, b });
    let end = start + secs(4.0);
    while sim.now() < end {
        sim.run_for(Duration::from_millis(500));
        assert_eq!(
            sim.cycles_seen(),
            0,
            "{name} seed {seed}: cycle by {:?} (plan {plan:?}, partition {a}-{b}):\n{}",
            sim.now(),
            sim.explain(0)
        );
    }
    let spans = sim.run_until_spanning(secs(20.0));
    assert_eq!(
        sim.cycles_seen(),
        0,
        "{name} seed {seed}:\n{}",
        sim.explain(0)
    );
    let Some(d) = spans else {
        panic!(
            "{name} seed {seed}: trees do not span all live nodes 20 s after the churn (plan {plan:?}, \
             partition {a}-{b}):\n{}\n{}",
            sim.report(),
            sim.explain(5)
        );
    };
    // Joins, crashes and a partition make some messages nobody asked for (a newcomer heard
    // of late, a dead member's last ones), never enough for a real node to cut anyone off.
    let most = sim.unsolicited_most();
    assert!(
        most < MAX_UNSOLICITED_BYTES / 8,
        "{name} seed {seed}: {most} bytes nobody asked for from one peer"
    );
    (d, most)
}

fn loop_freedom(name: &str, seeds: u64) {
    let topo = topology(name);
    let mut worst = Duration::ZERO;
    let mut total = Duration::ZERO;
    let mut unsolicited = 0;
    for seed in 1..=seeds {
        let (d, most) = churn_run(&topo, seed);
        worst = worst.max(d);
        total += d;
        unsolicited = unsolicited.max(most);
    }
    println!(
        "{name}: {seeds} churn runs without a cycle; all trees spanning again {:.0} ms after the churn on \
         average, {:.0} ms at worst; at most {unsolicited} bytes nobody asked for from one peer",
        total.as_secs_f64() * 1e3 / seeds as f64,
        worst.as_secs_f64() * 1e3
    );
}

#[test]
fn no_loops_under_churn_and_partition_on_phoenix_27() {
    loop_freedom("phoenix-27", 50);
}

#[test]
fn no_loops_under_churn_and_partition_on_das_4() {
    loop_freedom("das-4", 50);
}

/// Converges, then crashes `victims` nodes (drawn over all clusters), one at a time, and
/// measures how long until every live root's tree spans every live node again; asserts it
/// is within two serial periods. The crashed node's own tree disappears with it; every
/// other tree is measured.
fn repair(name: &str, seed: u64, victims: usize) {
    let topo = topology(name);
    let cfg = SimConfig {
        seed,
        ..SimConfig::default()
    };
    let bound = cfg.core.serial_period * 2;
    let mut sim = Sim::new(&topo, cfg);
    let converged = sim.run_until_converged(secs(60.0)).is_some();
    if !converged {
        println!(
            "{name} seed {seed}: NOT converged after 60 s; measuring repair from spanning trees"
        );
        assert!(
            sim.run_until_spanning(secs(30.0)).is_some(),
            "{name}: trees never span:\n{}",
            sim.explain(5)
        );
    }
    sim.set_check_interval(Duration::from_millis(10));
    let mut rng = SplitMix64::new(seed ^ 0x5EED);
    let mut times = Vec::new();
    for _ in 0..victims {
        let live = sim.live_nodes();
        let v = live[rng.below(live.len() as u64) as usize];
        let cluster = topo.clusters[sim.cluster_of(v)].name.clone();
        let d = sim.measure_repair(v, secs(10.0));
        let Some(d) = d else {
            panic!(
                "{name} seed {seed}: after crashing node {v} ({}, cluster {cluster}) the trees did not span again \
                 within 10 s:\n{}",
                sim.id(v),
                sim.explain(5)
            );
        };
        println!(
            "{name} seed {seed}: crash of node {v} (cluster {cluster}) repaired in {:.0} ms",
            d.as_secs_f64() * 1e3
        );
        assert!(
            d <= bound,
            "{name} seed {seed}: repair after crashing node {v} (cluster {cluster}) took {d:?}, more than {bound:?}"
        );
        times.push(d);
        assert_eq!(sim.cycles_seen(), 0, "{}", sim.explain(0));
        // Let the trees settle before the next crash.
        if sim.run_until_converged(secs(20.0)).is_none() {
            sim.run_for(secs(2.0));
        }
    }
    let max = times.iter().max().copied().unwrap_or_default();
    let mean = times.iter().sum::<Duration>() / times.len().max(1) as u32;
    println!(
        "{name} seed {seed}: {} crashes, repair mean {:.0} ms, max {:.0} ms (bound {:.0} ms, failure detection {:.0} ms)",
        times.len(),
        mean.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        bound.as_secs_f64() * 1e3,
        sim.config().failure_detection.as_secs_f64() * 1e3
    );
}

#[test]
fn repair_after_crashes_on_phoenix_27() {
    repair("phoenix-27", 1, 8);
}

#[test]
fn repair_after_crashes_on_das_4() {
    repair("das-4", 1, 8);
}
