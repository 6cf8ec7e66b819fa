//! The large collectives in the simulator with bandwidth (`bench collectives-sim` at a
//! small size): das-4 with four nodes per cluster; the simulated nodes measure the
//! network with their own trains, the planner's code plans every collective on a node's
//! view, and the simulator times each plan's transfers through its pipes. Deterministic
//! (virtual time), so the figures are checked, not just printed:
//! - ours against the best static contender: allreduce and reduce at most 0.6 of its
//!   time, scatter, gather and allgather at most 0.8 (the goals);
//! - the default runs the fastest candidate from 256 KiB up (within 10 %);
//! - the model's prediction of what the default ran is within a factor of two of the
//!   simulated time from 1 MiB up.

use overlay::bench::collectives_large::{Collective, Contender, Outcome};
use overlay::bench::collectives_sim::{Options, run};
use overlay::bulk::Algorithm;
use overlay::topology::Topology;
use std::path::Path;
use std::time::Duration;

fn outcome() -> Outcome {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/das-4.toml");
    let opts = Options {
        topology: Topology::load(&path).expect("das-4 loads"),
        nodes_per_cluster: 4,
        max_bytes: 4 << 20,
        collectives: Collective::ALL.to_vec(),
        seed: 1,
        settle: Duration::from_secs(20),
        root: None,
    };
    run(&opts, &|line| println!("{line}")).expect("the benchmark runs")
}

fn seconds(o: &Outcome, c: Collective, bytes: u64, who: Contender) -> f64 {
    (o.rows.iter())
        .find(|r| r.collective == c && r.bytes == bytes && r.contender == who)
        .map(|r| r.completion_s)
        .unwrap_or_else(|| panic!("no row for {c:?} {bytes} {who:?}"))
}

#[test]
fn planned_collectives_beat_the_static_ones_in_the_simulator() {
    let o = outcome();
    for c in Collective::ALL {
        let goal = match c {
            Collective::Allreduce | Collective::Reduce => 0.6,
            _ => 0.8,
        };
        let ours = c.algorithms()[0];
        for bytes in [1 << 20, 4 << 20] {
            let default = seconds(&o, c, bytes, Contender::Default);
            let forced = |a: Algorithm| seconds(&o, c, bytes, Contender::Forced(a));
            let contenders = c.algorithms().into_iter().filter(|a| *a != ours);
            let best_contender = contenders.map(forced).fold(f64::INFINITY, f64::min);
            let best = c
                .algorithms()
                .into_iter()
                .map(forced)
                .fold(f64::INFINITY, f64::min);
            println!(
                "{} {bytes}: default {default:.3} s, best contender {best_contender:.3}, best {best:.3}",
                c.name()
            );
            assert!(default <= goal * best_contender, "{} {bytes}", c.name());
            assert!(
                default <= 1.1 * best,
                "{} {bytes}: not the fastest",
                c.name()
            );
            let row = (o.rows.iter())
                .find(|r| {
                    r.collective == c && r.bytes == bytes && r.contender == Contender::Default
                })
                .expect("a default row");
            for (algorithm, took, predicted) in &row.calls {
                let ratio = predicted / took;
                assert!(
                    (0.5..=2.0).contains(&ratio),
                    "{} {bytes} {}: predicted {predicted:.3} s, simulated {took:.3}",
                    c.name(),
                    algorithm.name()
                );
            }
        }
        let default = seconds(&o, c, 256 << 10, Contender::Default);
        let best = (c.algorithms().into_iter())
            .map(|a| seconds(&o, c, 256 << 10, Contender::Forced(a)))
            .fold(f64::INFINITY, f64::min);
        assert!(
            default <= 1.1 * best,
            "{} 256 KiB: not the fastest",
            c.name()
        );
    }
}
