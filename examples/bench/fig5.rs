//! fig5 (the paper's Fig. 5): per-node completion times of 1 KB broadcasts from six roots
//! on phoenix-168, for the topology-unaware binomial tree, the static MagPIe tree, our live
//! trees (timed with the shared cost model and by real broadcasts in the simulator) and the
//! lower bound; also writes the CDF plot.

use super::{
    Cli, Contender, converged_sim, progress, roots, run_op, send_order_row, summary, topology,
};
use anyhow::{Context, bail};
use overlay::bench::plot::completion_cdf;
use overlay::bench::trees::{self, CostModel, Tree};
use overlay::proto::{DeliveryKind, Event, StartKind};
use overlay::sim::{Sim, SimConfig};
use overlay::topology::Topology;
use serde_json::json;
use std::time::{Duration, Instant};

/// Per-node completion times (ms) of ours in the simulator, with `core` as every node's
/// configuration: the second of two 1 KB broadcasts from each root (the first teaches the
/// relays their subtrees).
fn simulated_broadcasts(
    topo: &Topology,
    seed: u64,
    core: overlay::proto::Config,
    payload: &[u8],
) -> anyhow::Result<Vec<f64>> {
    let mut sim = Sim::new(
        topo,
        SimConfig {
            seed,
            core,
            ..SimConfig::default()
        },
    );
    if sim.run_until_converged(Duration::from_secs(120)).is_none() {
        bail!("{} did not converge in 120 simulated s", topo.name);
    }
    let mut times = Vec::new();
    let mut nonce = 1000;
    for root in roots(&sim) {
        for timed in [false, true] {
            nonce += 1;
            let broadcast = StartKind::Broadcast {
                payload: payload.to_vec(),
            };
            let pick =
                |e: &Event| matches!(e, Event::Delivered(d) if d.kind == DeliveryKind::Broadcast);
            let (got, _) = run_op(&mut sim, root, nonce, broadcast, pick);
            if timed {
                times
                    .extend((got.iter().filter(|(v, _, _)| *v != root)).map(|(_, us, _)| us / 1e3));
            }
        }
    }
    Ok(times)
}

pub(crate) fn fig5(cli: &Cli) -> anyhow::Result<serde_json::Value> {
    let topo = topology("phoenix-168")?;
    progress("fig5: building phoenix-168 trees in the simulator");
    let wall = Instant::now();
    let (mut sim, conv) = converged_sim(&topo, cli.seed)?;
    progress(&format!(
        "fig5: converged at {:.1} s simulated",
        conv.as_secs_f64()
    ));
    let cfg = SimConfig::default();
    let model = CostModel {
        cpu_send: cfg.cpu_send,
        cpu_recv: cfg.cpu_recv,
        bytes: 1024,
    };
    let n = sim.total_nodes();
    let ids = sim.ids().to_vec();
    let mut contenders: Vec<Contender> = [
        "unaware binomial",
        "static MagPIe",
        "ours (model)",
        "ours (simulated)",
        "lower bound",
    ]
    .into_iter()
    .map(|name| Contender {
        name,
        times_ms: Vec::new(),
    })
    .collect();
    let payload = vec![0x5au8; 1024];
    let mut nonce = 1000;
    for root in roots(&sim) {
        // A first broadcast teaches every relay its children's subtree sizes (send order).
        nonce += 1;
        run_op(
            &mut sim,
            root,
            nonce,
            StartKind::Broadcast {
                payload: payload.clone(),
            },
            |_| false,
        );
        nonce += 1;
        let (got, _) = run_op(
            &mut sim,
            root,
            nonce,
            StartKind::Broadcast {
                payload: payload.clone(),
            },
            |e| matches!(e, Event::Delivered(d) if d.kind == DeliveryKind::Broadcast),
        );
        if got.len() != n {
            bail!(
                "root {root}: the simulated broadcast reached {} of {n}",
                got.len()
            );
        }
        // The dissemination our protocol performed (first sender of each node, in the order
        // each sender served them), timed with the same model as the static trees.
        let mut first_from = vec![None; n];
        let mut received = vec![0.0; n];
        for (v, us, from) in &got {
            first_from[*v] = sim.index_of(*from);
            received[*v] = *us;
        }
        let trees_: [Tree; 3] = [
            trees::binomial_unaware(root, &ids),
            trees::magpie(root, &ids, &topo),
            trees::from_receipts(root, &first_from, &received, &topo),
        ];
        for (i, t) in trees_.iter().enumerate() {
            let times = trees::completion_times(t, &topo, model);
            for (v, x) in times.iter().enumerate() {
                let x = x.with_context(|| format!("{} misses node {v}", contenders[i].name))?;
                if v != root {
                    contenders[i].times_ms.push(x / 1e3);
                }
            }
        }
        for (v, us, _) in got {
            if v != root {
                contenders[3].times_ms.push(us / 1e3);
            }
        }
        for (v, x) in trees::lower_bound(root, &topo).into_iter().enumerate() {
            if v != root {
                contenders[4].times_ms.push(x / 1e3);
            }
        }
    }
    // Send order, measured: the same protocol serving children in id order instead of the
    // most descendants first, with the in-cluster plan and with planning off (the trees
    // alone), each on a simulator of its own with the same seed.
    progress("fig5: send order (children in id order; and both orders with planning off)");
    let variant = |descendants_first: bool, plan: bool| -> anyhow::Result<(f64, f64)> {
        let mut core = overlay::proto::Config::wan();
        core.descendants_first = descendants_first;
        if !plan {
            core.cluster_rtt = Duration::ZERO;
        }
        let times = simulated_broadcasts(&topo, cli.seed, core, &payload)?;
        Ok(summary(&Contender {
            name: "",
            times_ms: times,
        }))
    };
    let order = [
        summary(&contenders[3]),
        variant(false, true)?,
        variant(true, false)?,
        variant(false, false)?,
    ];
    let s: Vec<(f64, f64)> = contenders.iter().map(summary).collect();
    let ratio = |ours: usize, other: usize| json!({"median": s[ours].0 / s[other].0, "max": s[ours].1 / s[other].1});
    let out = json!({
        "benchmark": "fig5",
        "send_order": {
            "note": "ours (simulated): children with the most descendants first against the same protocol serving children in id order; with the in-cluster plan (default) and with planning off",
            "planned": {"descendants_first_ms": [order[0].0, order[0].1], "id_order_ms": [order[1].0, order[1].1],
                "ratio": {"median": order[0].0 / order[1].0, "max": order[0].1 / order[1].1}},
            "trees_alone": {"descendants_first_ms": [order[2].0, order[2].1], "id_order_ms": [order[3].0, order[3].1],
                "ratio": {"median": order[2].0 / order[3].0, "max": order[2].1 / order[3].1}},
        },
        "topology": "phoenix-168",
        "roots": roots(&sim).len(),
        "model": {"cpu_send_us": 20, "cpu_recv_us": 20, "bytes": 1024},
        "contenders": contenders.iter().zip(&s).map(|(c, (med, max))| json!({"name": c.name, "median_ms": med, "max_ms": max})).collect::<Vec<_>>(),
        "ratio_vs_static": ratio(2, 1),
        "ratio_vs_unaware": ratio(2, 0),
        "ratio_vs_bound": ratio(2, 4),
        "simulated_ratio_vs_static": ratio(3, 1),
        "simulated_ratio_vs_bound": ratio(3, 4),
        "converged_s": conv.as_secs_f64(),
        "wall_s": wall.elapsed().as_secs_f64(),
    });
    std::fs::create_dir_all(&cli.out)?;
    let svg = completion_cdf(
        "phoenix-168, 1 KB broadcast from 6 roots: per-node completion",
        contenders.iter().map(|c| (c.name, c.times_ms.as_slice())),
    );
    std::fs::write(cli.out.join("fig5-sim.svg"), svg)?;
    if !cli.json {
        println!(
            "fig5 (simulator, phoenix-168, 1 KB, {} roots; CDF in {}/fig5-sim.svg)",
            roots(&sim).len(),
            cli.out.display()
        );
        println!("  {:<20} {:>10} {:>10}", "contender", "median ms", "max ms");
        for (c, (med, max)) in contenders.iter().zip(&s) {
            println!("  {:<20} {:>10.2} {:>10.2}", c.name, med, max);
        }
        for key in [
            "ratio_vs_static",
            "ratio_vs_unaware",
            "ratio_vs_bound",
            "simulated_ratio_vs_static",
        ] {
            println!(
                "  {key:<26} median {:.3}  max {:.3}",
                out[key]["median"].as_f64().unwrap_or(f64::NAN),
                out[key]["max"].as_f64().unwrap_or(f64::NAN)
            );
        }
        for (name, k) in [("with the plan", "planned"), ("trees alone", "trees_alone")] {
            let [a, b, c, d, m, x] = send_order_row(&out["send_order"][k]);
            println!(
                "  send order, {name}: most descendants first {a:.2} / {b:.2} ms, id order {c:.2} / {d:.2} ms; ratio median {m:.3}  max {x:.3}"
            );
        }
    }
    Ok(out)
}
