//! Benchmarks, contenders side by side in one run (DESIGN §8). Ratios are printed; absolute
//! times are shown but never asserted.
//!
//! ```text
//! cargo run --release --example bench -- fig5 [--json] [--seed N] [--out docs]
//! cargo run --release --example bench -- collectives [--json]
//! cargo run --release --example bench -- convergence [--json] [--threads N]
//! cargo run --release --example bench -- overhead [--json] [--threads N] [--with-2000]
//! cargo run --release --example bench -- quic [--quic-topology T] [--slowdown K]
//! cargo run --release --example bench -- large [--json] [--nodes-per-cluster N] [--max-mib M]
//! cargo run --release --example bench -- all          # all of the above, writes docs/
//! ```
//!
//! convergence and overhead share their simulator runs (in `all`, each topology converges
//! once): cold start until every tree is wide-area optimal and stable, then 10 s of steady
//! traffic (the overhead figure), then (convergence: phoenix-168 and scale-1000) 10% of the
//! nodes crash and the repair is timed. Overhead also runs at 500 nodes and, with
//! `--with-2000`, at 2000 nodes: scale-1000 with every cluster's node count halved or
//! doubled (`Topology::scaled`, same latency matrix). The runs go side by side on
//! `--threads` threads (default 2); each is single-threaded and deterministic.
//!
//! fig5 (the paper's Fig. 5): phoenix-168, 1 KB broadcasts from six roots (two per
//! cluster). Contenders: a topology-unaware binomial tree over node ids (MPICH), the static
//! MagPIe tree (a coordinator per cluster fed by a flat tree, binomial inside clusters),
//! our live trees, and the lower bound (shortest one-way latency path). All four are timed
//! with one cost model (20 µs CPU per message sent and received, the link latency, 1 KB
//! serialized at the link's bandwidth); "ours" uses the trees the protocol built in the
//! simulator, and is also measured by running real broadcasts in the simulator.

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use overlay::bench::plot::{Series, cdf, line_chart};
use overlay::bench::quantile;
use overlay::bench::trees::{self, CostModel, Tree};
use overlay::proto::{Command, DeliveryKind, Event, NumKind, Reducer, Start, StartKind};
use overlay::sim::{Sim, SimConfig};
use overlay::topology::Topology;
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Benchmarks: contenders side by side, ratios printed")]
struct Cli {
    #[command(subcommand)]
    what: What,
    /// Print one JSON object per benchmark instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Simulator seed.
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// Where plots and BENCHMARKS.md go (`all` and `fig5`).
    #[arg(long, global = true, default_value = "docs")]
    out: PathBuf,
    /// The topology of the real-QUIC run (`quic`). phoenix-168 over real QUIC needs
    /// more than this machine's two cores (see docs/BENCHMARKS.md); phoenix-27 fits.
    #[arg(long, global = true, default_value = "phoenix-27")]
    quic_topology: String,
    /// The real-QUIC run's protocol clocks are slowed by this factor, so that every node
    /// of the topology fits on this machine's cores (`quic`).
    #[arg(long, global = true, default_value_t = 1)]
    slowdown: u32,
    /// Simulator runs of `convergence` and `overhead` (and `all`) executed side by side
    /// (each run is single-threaded and deterministic, so this changes only wall time).
    #[arg(long, global = true, default_value_t = 2)]
    threads: usize,
    /// Also measure overhead at 2000 nodes (scale-1000 with every cluster doubled). Not in
    /// `all` by default: converging 2000 nodes in the simulator takes far longer than the
    /// 15 minutes `all` is meant to take on a 2-core machine.
    #[arg(long, global = true)]
    with_2000: bool,
}

#[derive(Subcommand, Debug, Clone, Copy)]
enum What {
    /// Per-node completion times of 1 KB broadcasts on phoenix-168 (the paper's Fig. 5).
    Fig5,
    /// Gather and reduce latency against broadcast latency on the same trees.
    Collectives,
    /// Time until every tree is wide-area optimal, and repair after 10% crash.
    Convergence,
    /// Control bytes per node per second against the number of nodes.
    Overhead,
    /// Fig. 5, convergence and repair over real QUIC: every node in this process over the
    /// emulated-latency socket; the static trees run over the same QUIC stack.
    Quic,
    /// 1, 16 and 64 MiB broadcasts on das-4 with emulated bandwidth over real QUIC,
    /// pipelined against store-and-forward (see overlay::bench::large).
    Large {
        /// Nodes started in every das-4 cluster.
        #[arg(long, default_value_t = overlay::bench::large::DEFAULT_NODES_PER_CLUSTER)]
        nodes_per_cluster: usize,
        /// Skip payloads larger than this many MiB (for a quick look).
        #[arg(long, default_value_t = usize::MAX)]
        max_mib: usize,
    },
    /// Everything above; writes docs/BENCHMARKS.md and the plots.
    All,
}

fn topology(name: &str) -> anyhow::Result<Topology> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("topologies")
        .join(format!("{name}.toml"));
    Topology::load(&path).with_context(|| format!("loading {}", path.display()))
}

fn progress(msg: &str) {
    eprintln!("[bench] {msg}");
}

/// A converged phoenix-168 simulation.
fn converged_sim(topo: &Topology, seed: u64) -> anyhow::Result<(Sim, Duration)> {
    let mut sim = Sim::new(
        topo,
        SimConfig {
            seed,
            ..SimConfig::default()
        },
    );
    let Some(t) = sim.run_until_converged(Duration::from_secs(120)) else {
        bail!("{} did not converge in 120 simulated s", topo.name);
    };
    Ok((sim, t))
}

/// The roots: the first two nodes of every cluster.
fn roots(sim: &Sim) -> Vec<usize> {
    let mut r = Vec::new();
    let mut seen: HashMap<usize, usize> = HashMap::new();
    for i in 0..sim.total_nodes() {
        let c = sim.cluster_of(i);
        let n = seen.entry(c).or_default();
        if *n < 2 {
            r.push(i);
            *n += 1;
        }
    }
    r
}

/// Starts `what` at `root`, runs 3 s, returns (node, µs after the start, sender) of the
/// deliveries `pick` selects, and the report's elapsed µs.
fn run_op(
    sim: &mut Sim,
    root: usize,
    nonce: u64,
    what: StartKind,
    pick: impl Fn(&Event) -> bool,
) -> (Vec<(usize, f64, overlay::proto::NodeId)>, f64) {
    sim.record_events(true);
    let t0 = sim.now();
    sim.command(
        root,
        Command::Start(Start {
            nonce,
            timeout: Duration::from_secs(5),
            what,
        }),
    );
    sim.run_for(Duration::from_secs(3));
    let mut got = Vec::new();
    let mut report = f64::NAN;
    for (t, node, ev) in sim.take_events() {
        let us = t.saturating_since(t0).as_secs_f64() * 1e6;
        if let Event::Report(r) = &ev
            && r.op.is_some_and(|o| o.nonce == nonce)
        {
            report = r.elapsed.as_secs_f64() * 1e6;
        }
        if pick(&ev)
            && let Event::Delivered(d) = &ev
        {
            got.push((node, us, d.from));
        }
    }
    sim.record_events(false);
    (got, report)
}

struct Contender {
    name: &'static str,
    times_ms: Vec<f64>,
}

fn summary(c: &Contender) -> (f64, f64) {
    let mut v = c.times_ms.clone();
    v.sort_by(f64::total_cmp);
    (quantile(&v, 0.5), *v.last().unwrap_or(&f64::NAN))
}

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

fn fig5(cli: &Cli) -> anyhow::Result<serde_json::Value> {
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
    let series: Vec<Series> = contenders
        .iter()
        .map(|c| Series {
            name: c.name.to_string(),
            points: cdf(&c.times_ms),
        })
        .collect();
    let svg = line_chart(
        "phoenix-168, 1 KB broadcast from 6 roots: per-node completion",
        "completion time (ms)",
        "fraction of nodes",
        &series,
        false,
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
            let o = &out["send_order"][k];
            let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
            println!(
                "  send order, {name}: most descendants first {:.2} / {:.2} ms, id order {:.2} / {:.2} ms; ratio median {:.3}  max {:.3}",
                f(&o["descendants_first_ms"][0]),
                f(&o["descendants_first_ms"][1]),
                f(&o["id_order_ms"][0]),
                f(&o["id_order_ms"][1]),
                f(&o["ratio"]["median"]),
                f(&o["ratio"]["max"])
            );
        }
    }
    Ok(out)
}

fn collectives(cli: &Cli) -> anyhow::Result<serde_json::Value> {
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

/// One simulator run of the convergence and overhead benchmarks: a topology (a shipped one,
/// or scale-1000 with every cluster's node count scaled), converged from a cold start, then
/// [`OVERHEAD_WINDOW`] of steady traffic measured, then (for the convergence benchmark) 10%
/// of the nodes crashed and the repair timed. One run serves both benchmarks in `all`.
#[derive(Clone, Debug)]
struct SimJob {
    /// Shipped topology the run starts from.
    base: &'static str,
    /// Every cluster's node count multiplied by this (1.0: the file as it is).
    scale: f64,
    /// Whether the convergence benchmark wants this run (crash 10% after the window).
    repair: bool,
    /// Whether the overhead benchmark wants this run.
    overhead: bool,
}

/// Steady control traffic is measured over this much simulated time after convergence.
const OVERHEAD_WINDOW: Duration = Duration::from_secs(10);

/// Why the 2000-node point is opt-in (printed with the overhead results when it is left out).
const BIG_NOTE: &str = "2000 nodes (scale-1000 x2) left out: in the simulator its first 6 simulated \
seconds alone took more than 4x the CPU time of 1000 nodes' (the work grows with nodes x trees), so \
converging it does not fit the 15 minutes of `all` on 2 cores; add --with-2000 to include it";

/// Simulated time a run may take to converge.
const CONVERGE_MAX: Duration = Duration::from_secs(120);

/// The runs of the convergence and overhead benchmarks. Overhead at 500 and 2000 nodes
/// uses scale-1000 with every cluster's node count halved or doubled (there are no such
/// topology files; the latency matrix is scale-1000's).
fn sim_jobs(conv: bool, over: bool, big: bool) -> Vec<SimJob> {
    let job = |base, scale, repair: bool, overhead: bool| SimJob {
        base,
        scale,
        repair: repair && conv,
        overhead: overhead && over,
    };
    let all = [
        job("scale-1000", 2.0, false, true),
        job("scale-1000", 1.0, true, true),
        job("scale-1000", 0.5, false, true),
        job("phoenix-168", 1.0, true, true),
        job("sites-64", 1.0, false, true),
        job("das-4", 1.0, false, true),
        job("phoenix-27", 1.0, false, true),
    ];
    all.into_iter()
        .filter(|j| big || j.scale <= 1.0)
        .filter(|j| j.repair || j.overhead)
        .collect()
}

/// What one [`SimJob`] measured (JSON, one object per run).
fn run_sim_job(j: &SimJob, seed: u64) -> anyhow::Result<serde_json::Value> {
    let base = topology(j.base)?;
    let topo = if j.scale == 1.0 {
        base
    } else {
        base.scaled(j.scale)
    };
    let label = topo.name.clone();
    let derived = (j.scale != 1.0).then(|| {
        format!(
            "{} with every cluster's node count x{} (same latency matrix)",
            j.base, j.scale
        )
    });
    let wall = Instant::now();
    progress(&format!(
        "sim {label}: {} nodes, converging (cold start)",
        topo.node_count()
    ));
    let mut sim = Sim::new(
        &topo,
        SimConfig {
            seed,
            ..SimConfig::default()
        },
    );
    // In steps of 5 simulated seconds (a multiple of the check interval, so the run is the
    // one a single call would make), with a progress line after each.
    let step = Duration::from_secs(5);
    let conv = loop {
        if let Some(t) = sim.run_until_converged(step) {
            break t;
        }
        let s = sim.snapshot();
        if sim.now().as_micros() >= CONVERGE_MAX.as_micros() as u64 {
            bail!(
                "{label} did not converge in {} simulated s",
                CONVERGE_MAX.as_secs()
            );
        }
        progress(&format!(
            "sim {label}: {:.0} s simulated, {}/{} trees wide-area optimal, {:.0} s wall",
            sim.now().as_micros() as f64 / 1e6,
            s.wide_area_optimal,
            s.trees,
            wall.elapsed().as_secs_f64()
        ));
    };
    let conv_wall = wall.elapsed().as_secs_f64();
    progress(&format!(
        "sim {label}: converged at {:.1} s simulated ({conv_wall:.0} s wall); {} s of steady traffic",
        conv.as_secs_f64(),
        OVERHEAD_WINDOW.as_secs()
    ));
    let n = sim.live_count();
    let before = sim.control_bytes();
    sim.run_for(OVERHEAD_WINDOW);
    let per = (sim.control_bytes() - before) as f64 / n as f64 / OVERHEAD_WINDOW.as_secs_f64();
    progress(&format!(
        "sim {label}: {per:.0} bytes/node/s over the window, {:.0} s wall",
        wall.elapsed().as_secs_f64()
    ));
    let mut out = json!({
        "topology": label, "base": j.base, "scale": j.scale, "derived": derived,
        "nodes": n, "converged_s": conv.as_secs_f64(), "converged_wall_s": conv_wall,
        "window_s": OVERHEAD_WINDOW.as_secs_f64(), "bytes_per_node_per_s": per,
        "repair": j.repair, "overhead": j.overhead,
    });
    if j.repair {
        let live = sim.live_nodes();
        let crash: Vec<usize> = live.iter().copied().step_by(10).skip(1).collect();
        progress(&format!(
            "sim {label}: crashing {} nodes (10%)",
            crash.len()
        ));
        for &c in &crash {
            sim.apply(overlay::sim::Action::Crash { node: c });
        }
        let repair = sim.run_until_spanning(Duration::from_secs(60));
        progress(&format!(
            "sim {label}: repaired in {} ms simulated, {:.0} s wall",
            repair.map_or("-".into(), |d| format!("{:.0}", d.as_secs_f64() * 1e3)),
            wall.elapsed().as_secs_f64()
        ));
        out["crashed"] = json!(crash.len());
        out["repair_ms"] = json!(repair.map(|d| d.as_secs_f64() * 1e3));
    }
    out["wall_s"] = json!(wall.elapsed().as_secs_f64());
    progress(&format!(
        "sim {label}: done, {:.0} s wall",
        wall.elapsed().as_secs_f64()
    ));
    Ok(out)
}

/// Runs `jobs` on `threads` threads (each run is single-threaded and deterministic; the
/// largest go first). Results in the order of `jobs`.
fn run_sim_jobs(
    jobs: &[SimJob],
    seed: u64,
    threads: usize,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<anyhow::Result<serde_json::Value>>>> =
        jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(j) = jobs.get(i) else { break };
                    let r = run_sim_job(j, seed);
                    *results[i].lock().expect("no panics while held") = Some(r);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .expect("no panics while held")
                .expect("every job ran")
        })
        .collect()
}

fn convergence_report(cli: &Cli, runs: &[serde_json::Value]) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = runs
        .iter()
        .filter(|r| r["repair"].as_bool() == Some(true))
        .cloned()
        .collect();
    if !cli.json {
        println!(
            "convergence (simulator, cold start; 10% crashed after {} s of steady traffic; repair = every tree spans the survivors again)",
            OVERHEAD_WINDOW.as_secs()
        );
        for r in &rows {
            println!(
                "  {:<12} {:>4} nodes: wide-area optimal and stable at {:.1} s ({:.0} s wall); {} crashed (10%) -> repaired in {:.0} ms ({:.1} s wall in all)",
                r["topology"].as_str().unwrap_or(""),
                r["nodes"],
                r["converged_s"].as_f64().unwrap_or(f64::NAN),
                r["converged_wall_s"].as_f64().unwrap_or(f64::NAN),
                r["crashed"],
                r["repair_ms"].as_f64().unwrap_or(f64::NAN),
                r["wall_s"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    json!({"benchmark": "convergence", "runs": rows})
}

fn overhead_report(cli: &Cli, runs: &[serde_json::Value]) -> anyhow::Result<serde_json::Value> {
    let mut rows: Vec<serde_json::Value> = runs
        .iter()
        .filter(|r| r["overhead"].as_bool() == Some(true))
        .cloned()
        .collect();
    rows.sort_by_key(|r| r["nodes"].as_u64().unwrap_or(0));
    let series: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| {
            (
                r["nodes"].as_f64().unwrap_or(f64::NAN),
                r["bytes_per_node_per_s"].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect();
    let svg = line_chart(
        "steady control traffic against overlay size (simulator)",
        "nodes",
        "bytes per node per second",
        &[Series {
            name: "ours".into(),
            points: series,
        }],
        false,
    );
    std::fs::create_dir_all(&cli.out)?;
    std::fs::write(cli.out.join("overhead.svg"), svg)?;
    if !cli.json {
        println!(
            "overhead (simulator, {} s right after convergence; plot in {}/overhead.svg)",
            OVERHEAD_WINDOW.as_secs(),
            cli.out.display()
        );
        for r in &rows {
            let derived = r["derived"]
                .as_str()
                .map_or(String::new(), |d| format!("  [{d}]"));
            println!(
                "  {:<16} {:>4} nodes: {:>8.0} bytes/node/s{derived}",
                r["topology"].as_str().unwrap_or(""),
                r["nodes"],
                r["bytes_per_node_per_s"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    let note = (!runs.iter().any(|r| r["nodes"].as_u64() >= Some(2000))).then_some(BIG_NOTE);
    if let Some(n) = note
        && !cli.json
    {
        println!("  ({n})");
    }
    Ok(json!({"benchmark": "overhead", "runs": rows, "note": note}))
}

fn convergence(cli: &Cli) -> anyhow::Result<serde_json::Value> {
    let runs = run_sim_jobs(&sim_jobs(true, false, cli.with_2000), cli.seed, cli.threads)?;
    Ok(convergence_report(cli, &runs))
}

fn overhead(cli: &Cli) -> anyhow::Result<serde_json::Value> {
    let runs = run_sim_jobs(&sim_jobs(false, true, cli.with_2000), cli.seed, cli.threads)?;
    overhead_report(cli, &runs)
}

fn large(cli: &Cli, nodes_per_cluster: usize, max_mib: usize) -> anyhow::Result<serde_json::Value> {
    use overlay::bench::{large, large_report};
    let opts = large::Options {
        topology: topology("das-4")?,
        nodes_per_cluster,
        root_cluster: "VU".into(),
        sizes_mib: large::SIZES_MIB
            .into_iter()
            .filter(|&m| m <= max_mib)
            .collect(),
    };
    let outcome = large::run(&opts, &progress)?;
    std::fs::create_dir_all(&cli.out)?;
    std::fs::write(cli.out.join(large_report::SVG), large_report::svg(&outcome))?;
    if !cli.json {
        println!(
            "{}",
            large_report::text(&outcome, &cli.out.display().to_string())
        );
    }
    Ok(serde_json::to_value(&outcome)?)
}

/// docs/BENCHMARKS.md from the results of `all`.
fn markdown(results: &[serde_json::Value], seed: u64) -> String {
    use std::fmt::Write as _;
    let mut md = String::from("# Benchmarks\n\n");
    let _ = writeln!(
        md,
        "Made by `cargo run --release --example bench -- all --seed {seed}` (simulator; \
         contenders side by side in one run; absolute times depend on the machine, ratios \
         are the result).\n"
    );
    for r in results {
        match r["benchmark"].as_str() {
            Some("fig5") => {
                md.push_str("## Fig. 5: 1 KB broadcast on phoenix-168\n\n");
                md.push_str("Per-node completion time over 6 roots (two per cluster). All contenders timed \
                    with one model: 20 us CPU per message sent and received, link latency, 1 KB serialized \
                    at the link's bandwidth. \"ours (model)\" is the dissemination our protocol actually \
                    performed in the simulator (first sender of each node, in send order) timed with that \
                    model; \"ours (simulated)\" is the simulator's own timing (no bandwidth term). \
                    CDF: `fig5-sim.svg`.\n\n| contender | median ms | max ms |\n|---|---|---|\n");
                for c in r["contenders"].as_array().into_iter().flatten() {
                    let _ = writeln!(
                        md,
                        "| {} | {:.2} | {:.2} |",
                        c["name"].as_str().unwrap_or(""),
                        c["median_ms"].as_f64().unwrap_or(f64::NAN),
                        c["max_ms"].as_f64().unwrap_or(f64::NAN)
                    );
                }
                md.push_str("\n| ratio (ours / theirs) | median | max |\n|---|---|---|\n");
                for k in [
                    "ratio_vs_static",
                    "ratio_vs_unaware",
                    "ratio_vs_bound",
                    "simulated_ratio_vs_static",
                    "simulated_ratio_vs_bound",
                ] {
                    let _ = writeln!(
                        md,
                        "| {k} | {:.3} | {:.3} |",
                        r[k]["median"].as_f64().unwrap_or(f64::NAN),
                        r[k]["max"].as_f64().unwrap_or(f64::NAN)
                    );
                }
                md.push_str("\nSend order (ours, simulated; the same protocol with children served in id order instead of the most descendants first, on simulators of their own with the same seed):\n\n| | most descendants first, median / max ms | id order, median / max ms | ratio median | ratio max |\n|---|---|---|---|---|\n");
                for (name, k) in [
                    ("with the in-cluster plan", "planned"),
                    ("trees alone (planning off)", "trees_alone"),
                ] {
                    let o = &r["send_order"][k];
                    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
                    let _ = writeln!(
                        md,
                        "| {name} | {:.2} / {:.2} | {:.2} / {:.2} | {:.3} | {:.3} |",
                        f(&o["descendants_first_ms"][0]),
                        f(&o["descendants_first_ms"][1]),
                        f(&o["id_order_ms"][0]),
                        f(&o["id_order_ms"][1]),
                        f(&o["ratio"]["median"]),
                        f(&o["ratio"]["max"])
                    );
                }
                md.push('\n');
            }
            Some("collectives") => {
                let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
                let _ = writeln!(
                    md,
                    "## Collectives: gather, reduce and scatter against broadcast; planned against along the trees (phoenix-168)\n\nTime from start to the root's report (every member answered), mean over 6 roots; the second of two operations per root (the first teaches each cluster's entry who is below). \"tree\": the same with planning off (`cluster_rtt` zero), on a simulator of its own with the same seed.\n\n| | broadcast ms | scatter ms | gather ms | reduce ms |\n|---|---|---|---|---|\n| planned (default) | {:.1} | {:.1} | {:.1} | {:.1} |\n| along the trees | {:.1} | {:.1} | {:.1} | {:.1} |\n| planned / tree | {:.3} | {:.3} | {:.3} | {:.3} |\n\nGather / broadcast {:.2}, reduce / broadcast {:.2}.\n",
                    f(&r["broadcast_ms"]),
                    f(&r["scatter_ms"]),
                    f(&r["gather_ms"]),
                    f(&r["reduce_ms"]),
                    f(&r["tree_ms"]["broadcast"]),
                    f(&r["tree_ms"]["scatter"]),
                    f(&r["tree_ms"]["gather"]),
                    f(&r["tree_ms"]["reduce"]),
                    f(&r["planned_vs_tree"]["broadcast"]),
                    f(&r["planned_vs_tree"]["scatter"]),
                    f(&r["planned_vs_tree"]["gather"]),
                    f(&r["planned_vs_tree"]["reduce"]),
                    f(&r["gather_vs_broadcast"]),
                    f(&r["reduce_vs_broadcast"]),
                );
            }
            Some("convergence") => {
                let _ = writeln!(
                    md,
                    "## Convergence and repair (simulator)\n\nCold start until every tree is wide-area optimal and stays so for 5 s; then {} s of steady traffic (the overhead window), then 10% of the nodes crash at once; repaired = every tree spans the survivors again.\n\n| topology | nodes | wide-area optimal and stable (s) | crashed (10%) | repaired (ms) | wall to converge (s) |\n|---|---|---|---|---|---|",
                    OVERHEAD_WINDOW.as_secs()
                );
                for x in r["runs"].as_array().into_iter().flatten() {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {:.1} | {} | {:.0} | {:.0} |",
                        x["topology"].as_str().unwrap_or(""),
                        x["nodes"],
                        x["converged_s"].as_f64().unwrap_or(f64::NAN),
                        x["crashed"],
                        x["repair_ms"].as_f64().unwrap_or(f64::NAN),
                        x["converged_wall_s"].as_f64().unwrap_or(f64::NAN)
                    );
                }
                md.push('\n');
            }
            Some("quic") => {
                let _ = writeln!(
                    md,
                    "## Over real QUIC: Fig. 5, convergence, repair ({})\n\n{} nodes, each a full node with its own QUIC endpoint, in one process over the emulated-latency socket; protocol clocks slowed x{} so they fit on the machine. The static trees run over the same QUIC stack and socket (a protocol-less forwarder per node, connections opened by a first broadcast). Every contender's time at a node is taken where its connection read the message. CDF: `fig5-quic.svg`. Command: `cargo run --release --example bench -- quic`.\n\n| contender | median ms | max ms | missed |\n|---|---|---|---|",
                    r["topology"].as_str().unwrap_or(""),
                    r["nodes"],
                    r["slowdown"]
                );
                for c in r["contenders"].as_array().into_iter().flatten() {
                    let _ = writeln!(
                        md,
                        "| {} | {:.2} | {:.2} | {} |",
                        c["name"].as_str().unwrap_or(""),
                        c["median_ms"].as_f64().unwrap_or(f64::NAN),
                        c["max_ms"].as_f64().unwrap_or(f64::NAN),
                        c["missed"]
                    );
                }
                md.push_str("\n| ratio (ours / theirs) | median | max |\n|---|---|---|\n");
                for k in ["ratio_vs_static", "ratio_vs_unaware", "ratio_vs_bound"] {
                    let _ = writeln!(
                        md,
                        "| {k} | {:.3} | {:.3} |",
                        r[k]["median"].as_f64().unwrap_or(f64::NAN),
                        r[k]["max"].as_f64().unwrap_or(f64::NAN)
                    );
                }
                md.push_str("\nMedian ms per (root's cluster, node's cluster):\n\n| clusters | MagPIe | ours | bound |\n|---|---|---|---|\n");
                for p in r["per_cluster_median_ms"].as_array().into_iter().flatten() {
                    let _ = writeln!(
                        md,
                        "| {} -> {} | {:.2} | {:.2} | {:.2} |",
                        p["root_cluster"],
                        p["node_cluster"],
                        p["magpie"].as_f64().unwrap_or(f64::NAN),
                        p["ours"].as_f64().unwrap_or(f64::NAN),
                        p["bound"].as_f64().unwrap_or(f64::NAN)
                    );
                }
                let _ = writeln!(
                    md,
                    "\nOurs reaches the application's delivery stream {:.0} us (median; 90%: {:.0} us) after its connection read the message.",
                    r["app_lag_us"]["median"].as_f64().unwrap_or(f64::NAN),
                    r["app_lag_us"]["p90"].as_f64().unwrap_or(f64::NAN)
                );
                let _ = writeln!(
                    md,
                    "\nTrees wide-area optimal when the broadcasts began: {} of {}.",
                    r["optimal_trees"], r["trees"]
                );
                let _ = writeln!(
                    md,
                    "\nJoined in {:.1} s; every tree wide-area optimal {} s after the first start; {} nodes crashed (10%), every survivor's tree optimal again {} s later.\n",
                    r["joined_s"].as_f64().unwrap_or(f64::NAN),
                    r["converged_s"]
                        .as_f64()
                        .map_or("-".into(), |x| format!("{x:.1}")),
                    r["crashed"],
                    r["repair_s"]
                        .as_f64()
                        .map_or("-".into(), |x| format!("{x:.1}"))
                );
            }
            Some("overhead") => {
                let _ = writeln!(
                    md,
                    "## Control overhead (simulator, {} s right after convergence)\n\nPlot: `overhead.svg`. The 500- and 2000-node points are scale-1000 with every cluster's node count halved or doubled (same latency matrix; there are no such topology files).\n\n| topology | nodes | bytes/node/s |\n|---|---|---|",
                    OVERHEAD_WINDOW.as_secs()
                );
                for x in r["runs"].as_array().into_iter().flatten() {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {:.0} |",
                        x["topology"].as_str().unwrap_or(""),
                        x["nodes"],
                        x["bytes_per_node_per_s"].as_f64().unwrap_or(f64::NAN)
                    );
                }
                if let Some(n) = r["note"].as_str() {
                    let _ = writeln!(md, "\n{n}.");
                }
                md.push('\n');
            }
            Some("large") => {
                if let Ok(o) = serde_json::from_value(r.clone()) {
                    md.push_str(&overlay::bench::large_report::markdown(&o));
                }
            }
            _ => {}
        }
    }
    md
}

fn quic(cli: &Cli) -> anyhow::Result<serde_json::Value> {
    use overlay::bench::quic_run::{QuicRunOptions, run};
    let opts = QuicRunOptions {
        topology: topology(&cli.quic_topology)?,
        slowdown: cli.slowdown,
        roots_per_cluster: 2,
        crash_fraction: 0.1,
        timeout: Duration::from_secs(600),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let wall = Instant::now();
    let r = rt.block_on(run(opts, progress))?;
    let mut out = r.to_json(&cli.quic_topology, cli.slowdown);
    out["wall_s"] = json!(wall.elapsed().as_secs_f64());
    std::fs::create_dir_all(&cli.out)?;
    let series: Vec<Series> = r
        .contenders()
        .iter()
        .map(|(name, t)| Series {
            name: name.to_string(),
            points: cdf(&t.ms),
        })
        .collect();
    let title = format!(
        "{} over real QUIC, 1 KB broadcast from {} roots: per-node completion",
        cli.quic_topology,
        r.roots.len()
    );
    let svg = line_chart(
        &title,
        "completion time (ms)",
        "fraction of nodes",
        &series,
        false,
    );
    std::fs::write(cli.out.join("fig5-quic.svg"), svg)?;
    if !cli.json {
        println!(
            "quic ({}, {} nodes in one process, real QUIC over the emulated socket, clocks x{}; CDF in {}/fig5-quic.svg)",
            cli.quic_topology,
            r.nodes,
            cli.slowdown,
            cli.out.display()
        );
        println!(
            "  {:<20} {:>10} {:>10} {:>7}",
            "contender", "median ms", "max ms", "missed"
        );
        for c in out["contenders"].as_array().into_iter().flatten() {
            println!(
                "  {:<20} {:>10.2} {:>10.2} {:>7}",
                c["name"].as_str().unwrap_or(""),
                c["median_ms"].as_f64().unwrap_or(f64::NAN),
                c["max_ms"].as_f64().unwrap_or(f64::NAN),
                c["missed"]
            );
        }
        for key in ["ratio_vs_static", "ratio_vs_unaware", "ratio_vs_bound"] {
            println!(
                "  {key:<26} median {:.3}  max {:.3}",
                out[key]["median"].as_f64().unwrap_or(f64::NAN),
                out[key]["max"].as_f64().unwrap_or(f64::NAN)
            );
        }
        println!("  per (root's cluster -> node's cluster), median ms: MagPIe / ours / bound");
        let mut line = String::from(" ");
        for (i, ((a, b), m)) in r.per_cluster().iter().enumerate() {
            line += &format!("  {a}->{b} {:.2}/{:.2}/{:.2}", m[1], m[2], m[3]);
            if i % 3 == 2 {
                println!("{line}");
                line = String::from(" ");
            }
        }
        if line.trim().len() > 0 {
            println!("{line}");
        }
        println!(
            "  times are taken when each node's connection read the message, for every contender; \
             ours then reaches the application's delivery stream {:.0} us later (median; 90%: {:.0} us)",
            out["app_lag_us"]["median"].as_f64().unwrap_or(f64::NAN),
            out["app_lag_us"]["p90"].as_f64().unwrap_or(f64::NAN),
        );
        println!(
            "  trees wide-area optimal when the broadcasts began: {} of {}",
            out["optimal_trees"], out["trees"]
        );
        println!(
            "  joined {:.1} s, wide-area optimal {} s, {} crashed, repaired {} s",
            r.started.as_secs_f64(),
            out["converged_s"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.1}")),
            r.crashed,
            out["repair_s"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.1}")),
        );
    }
    Ok(out)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let wall = Instant::now();
    let results = match cli.what {
        What::Fig5 => vec![fig5(&cli)?],
        What::Collectives => vec![collectives(&cli)?],
        What::Convergence => vec![convergence(&cli)?],
        What::Overhead => vec![overhead(&cli)?],
        What::Quic => vec![quic(&cli)?],
        What::Large {
            nodes_per_cluster,
            max_mib,
        } => vec![large(&cli, nodes_per_cluster, max_mib)?],
        What::All => {
            // One set of simulator runs serves convergence and overhead (scale-1000 and
            // phoenix-168 are converged once; their overhead window comes before the
            // crash). They start at once, beside fig5 and collectives: all of these are
            // deterministic simulations (the machine's load changes only their wall time),
            // and the scale-1000 run alone outlasts the rest, leaving a core free.
            let (first, runs) = std::thread::scope(|s| {
                let sims = s.spawn(|| {
                    run_sim_jobs(&sim_jobs(true, true, cli.with_2000), cli.seed, cli.threads)
                });
                let first = fig5(&cli).and_then(|f| Ok(vec![f, collectives(&cli)?]));
                (first, sims.join().expect("simulator runs do not panic"))
            });
            let (mut all, runs) = (first?, runs?);
            all.push(convergence_report(&cli, &runs));
            all.push(overhead_report(&cli, &runs)?);
            all.push(quic(&cli)?);
            all.push(large(
                &cli,
                overlay::bench::large::DEFAULT_NODES_PER_CLUSTER,
                usize::MAX,
            )?);
            all
        }
    };
    if cli.json {
        for r in &results {
            println!("{r}");
        }
    }
    if let What::All = cli.what {
        std::fs::write(
            cli.out.join("bench-results.json"),
            serde_json::to_string_pretty(&results)?,
        )?;
        std::fs::write(cli.out.join("BENCHMARKS.md"), markdown(&results, cli.seed))?;
        progress(&format!(
            "all done in {:.0} s; results in {}/bench-results.json",
            wall.elapsed().as_secs_f64(),
            cli.out.display()
        ));
    }
    Ok(())
}
