//! collectives: gather and reduce (and scatter) latency against broadcast latency on the
//! same trees of a converged phoenix-168 simulation.

use super::{Cli, progress, roots, run_op, topology};
use anyhow::bail;
use overlay::proto::{Command, NumKind, Reducer, StartKind};
use overlay::sim::{Sim, SimConfig};
use serde_json::json;
use std::time::Duration;

pub(crate) fn collectives(cli: &Cli) -> anyhow::Result<serde_json::Value> {
    let topo = topology("phoenix-168")?;
    let ops = ["broadcast", "scatter", "gather", "reduce"];
    // The same operations with the in-cluster plan (the default) and with planning off
    // (everything along the trees), each on a simulator of its own with the same seed.
    let mut means: Vec<[f64; 4]> = Vec::new();
    let mut rows = Vec::new();
    for (mode, cluster_rtt) in [("planned", None), ("tree", Some(Duration::ZERO))] {
        progress(&format!(
            "collectives: building phoenix-168 trees in the simulator ({mode})"
        ));
        let mut sim = Sim::new(
            &topo,
            SimConfig {
                seed: cli.seed,
                core: overlay::proto::Config {
                    cluster_rtt: cluster_rtt.unwrap_or(overlay::proto::Config::wan().cluster_rtt),
                    ..overlay::proto::Config::wan()
                },
                ..SimConfig::default()
            },
        );
        if sim.run_until_converged(Duration::from_secs(120)).is_none() {
            bail!("phoenix-168 did not converge in 120 simulated s");
        }
        let n = sim.total_nodes();
        for i in 0..n {
            let value = postcard::to_allocvec(&vec![1u64]).expect("encodes");
            sim.command(
                i,
                Command::Publish {
                    key: "one".into(),
                    value,
                },
            );
        }
        let ids = sim.ids().to_vec();
        let mut sums = [0.0; 4];
        let mut nonce = 5000;
        let roots_ = roots(&sim);
        for &root in &roots_ {
            let mut row = json!({"root": root, "mode": mode});
            for (k, name) in ops.iter().enumerate() {
                let what = || match *name {
                    "broadcast" => StartKind::Broadcast {
                        payload: vec![0; 1024],
                    },
                    "scatter" => StartKind::Scatter {
                        items: ids.iter().map(|id| (*id, vec![1; 64])).collect(),
                    },
                    "gather" => StartKind::Gather {
                        key: "one".into(),
                        request: vec![],
                    },
                    _ => StartKind::Reduce {
                        key: "one".into(),
                        request: vec![],
                        reducer: Reducer::Sum(NumKind::U64),
                    },
                };
                // The first teaches the cluster entries who is below; the second is timed.
                nonce += 2;
                run_op(&mut sim, root, nonce - 1, what(), |_| false);
                let (_, report_us) = run_op(&mut sim, root, nonce, what(), |_| false);
                row[*name] = json!(report_us / 1e3);
                sums[k] += report_us / 1e3;
            }
            rows.push(row);
        }
        means.push(sums.map(|s| s / roots_.len() as f64));
    }
    let [p, t] = [means[0], means[1]];
    let out = json!({
        "benchmark": "collectives",
        "topology": "phoenix-168",
        "note": "time from start to the root's report (every member answered), mean over roots; planned = in-cluster plan (default), tree = planning off",
        "broadcast_ms": p[0], "scatter_ms": p[1], "gather_ms": p[2], "reduce_ms": p[3],
        "gather_vs_broadcast": p[2] / p[0], "reduce_vs_broadcast": p[3] / p[0],
        "tree_ms": {"broadcast": t[0], "scatter": t[1], "gather": t[2], "reduce": t[3]},
        "planned_vs_tree": {"broadcast": p[0] / t[0], "scatter": p[1] / t[1], "gather": p[2] / t[2], "reduce": p[3] / t[3]},
        "per_root": rows,
    });
    if !cli.json {
        println!(
            "collectives (simulator, phoenix-168, report after every member answered, mean of 6 roots)"
        );
        println!(
            "  broadcast {:.1} ms   scatter {:.1} ms   gather {:.1} ms ({:.2}x broadcast)   reduce {:.1} ms ({:.2}x)",
            p[0],
            p[1],
            p[2],
            p[2] / p[0],
            p[3],
            p[3] / p[0]
        );
        println!(
            "  planning off (along the trees): broadcast {:.1}   scatter {:.1}   gather {:.1}   reduce {:.1} ms",
            t[0], t[1], t[2], t[3]
        );
        println!(
            "  planned / tree: broadcast {:.3}   scatter {:.3}   gather {:.3}   reduce {:.3}",
            p[0] / t[0],
            p[1] / t[1],
            p[2] / t[2],
            p[3] / t[3]
        );
    }
    Ok(out)
}
