//! convergence and overhead: the shared simulator runs (cold start until every tree is
//! wide-area optimal, a window of steady control traffic, then for convergence a 10% crash
//! and the repair), run side by side, and the two reports made from them.

use super::{Cli, progress, topology};
use anyhow::bail;
use overlay::bench::plot::{Series, line_chart};
use overlay::proto::gossip::GossipConfig;
use overlay::sim::{Sim, SimConfig, SimNode};
use serde_json::json;
use std::time::{Duration, Instant};

/// One simulator run of the convergence and overhead benchmarks: a topology (a shipped one,
/// or scale-1000 with every cluster's node count scaled), converged from a cold start, then
/// [`OVERHEAD_WINDOW`] of steady traffic measured, then (for the convergence benchmark) 10%
/// of the nodes crashed and the repair timed. One run serves both benchmarks in `all`.
#[derive(Clone, Debug)]
pub(crate) struct SimJob {
    /// Shipped topology the run starts from.
    base: &'static str,
    /// Every cluster's node count multiplied by this (1.0: the file as it is).
    scale: f64,
    /// Whether the convergence benchmark wants this run (crash 10% after the window).
    repair: bool,
    /// Whether the overhead benchmark wants this run.
    overhead: bool,
    /// Whether the nodes run the membership protocol (`Sim::with_membership`) instead of
    /// being told of members by the simulator: the overhead benchmark's second contender.
    membership: bool,
}

/// Steady control traffic is measured over this much simulated time after convergence.
pub(crate) const OVERHEAD_WINDOW: Duration = Duration::from_secs(10);

/// Why the 2000-node point is opt-in (printed with the overhead results when it is left out).
const BIG_NOTE: &str = "2000 nodes (scale-1000 x2) is not run here: in the simulator it takes about \
25 min of one core to reach 35 s simulated (the work grows with nodes x trees), which does not fit \
the 15 minutes of `all` on 2 cores; `bench overhead --with-2000` runs it (on the code of \
2026-11-26 it stayed at 1978 of 2000 trees wide-area optimal from 35 to 50 s simulated, below the \
99% at which a window is measured as it is, so there is no 2000-node figure for that code)";

/// Where `bench overhead --with-2000` keeps its 2000-node result (in the output directory),
/// so that the reports of later runs without it still show that point, marked as such.
const BIG_SAVED: &str = "overhead-2000.json";

/// An overhead-only run that is not converged after this much simulated time, but has at
/// least [`NEARLY`] of its trees wide-area optimal, is measured as it is (and marked so):
/// at 2000 nodes a few trees keep changing long after the rest settled.
const NEARLY_AFTER: Duration = Duration::from_secs(35);

/// See [`NEARLY_AFTER`].
const NEARLY: f64 = 0.99;

/// Simulated time a run may take to converge.
const CONVERGE_MAX: Duration = Duration::from_secs(120);

/// The runs of the convergence and overhead benchmarks. Overhead at 500 and 2000 nodes
/// uses scale-1000 with every cluster's node count halved or doubled (there are no such
/// topology files; the latency matrix is scale-1000's).
pub(crate) fn sim_jobs(conv: bool, over: bool, big: bool) -> Vec<SimJob> {
    let job = |base, scale, repair: bool, overhead: bool| SimJob {
        base,
        scale,
        repair: repair && conv,
        overhead: overhead && over,
        membership: false,
    };
    // The same runs with the membership protocol in every node: what a node really sends.
    let gossip = |base, scale| SimJob {
        base,
        scale,
        repair: false,
        overhead: over,
        membership: true,
    };
    let all = [
        job("scale-1000", 2.0, false, true),
        job("scale-1000", 1.0, true, true),
        gossip("scale-1000", 1.0),
        job("scale-1000", 0.5, false, true),
        gossip("scale-1000", 0.5),
        job("phoenix-168", 1.0, true, true),
        gossip("phoenix-168", 1.0),
        job("sites-64", 1.0, false, true),
        gossip("sites-64", 1.0),
        job("das-4", 1.0, false, true),
        gossip("das-4", 1.0),
        job("phoenix-27", 1.0, false, true),
        gossip("phoenix-27", 1.0),
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
    let config = SimConfig {
        seed,
        ..SimConfig::default()
    };
    if j.membership {
        let sim = Sim::with_membership(&topo, config, GossipConfig::default());
        return measure(sim, j, format!("{label} +membership"), label, derived);
    }
    measure(Sim::new(&topo, config), j, label.clone(), label, derived)
}

/// Converges `sim`, measures its steady traffic, and (for a repair job) crashes 10%.
fn measure<N: SimNode>(
    mut sim: Sim<N>,
    j: &SimJob,
    label: String,
    topology: String,
    derived: Option<String>,
) -> anyhow::Result<serde_json::Value> {
    let wall = Instant::now();
    progress(&format!(
        "sim {label}: {} nodes, converging (cold start)",
        sim.live_count()
    ));
    // In steps of 5 simulated seconds (a multiple of the check interval, so the run is the
    // one a single call would make), with a progress line after each.
    let step = Duration::from_secs(5);
    let mut converged = true;
    let conv = loop {
        if let Some(t) = sim.run_until_converged(step) {
            break t;
        }
        let s = sim.snapshot();
        let simulated = Duration::from_micros(sim.now().as_micros());
        if !j.repair
            && simulated >= NEARLY_AFTER
            && s.wide_area_optimal as f64 >= NEARLY * s.trees as f64
        {
            converged = false;
            progress(&format!(
                "sim {label}: not converged after {:.0} s simulated but {}/{} trees wide-area optimal: measuring as it is",
                simulated.as_secs_f64(),
                s.wide_area_optimal,
                s.trees
            ));
            break simulated;
        }
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
        "sim {label}: {} at {:.1} s simulated ({conv_wall:.0} s wall); {} s of steady traffic",
        if converged {
            "converged"
        } else {
            "window begins"
        },
        conv.as_secs_f64(),
        OVERHEAD_WINDOW.as_secs()
    ));
    let optimal = (sim.snapshot().wide_area_optimal, sim.snapshot().trees);
    // Every tree optimal from then on, parents inside clusters still moving or not.
    let optimal_from = (sim.first_optimal_at()).map(|t| t.as_micros() as f64 / 1e6);
    // When every tree was first optimal, and how often a check found one not optimal
    // after that (a cluster's entry handed over, a tree that flaps).
    let first_optimal = (sim.first_all_optimal_at()).map(|t| t.as_micros() as f64 / 1e6);
    let breaks = sim.optimal_breaks().1;
    let n = sim.live_count();
    let before = sim.control_bytes();
    let gossip_bytes = |sim: &Sim<N>| sim.membership_bytes();
    let gossip_before = gossip_bytes(&sim);
    let kinds_before = sim.traffic().clone();
    sim.run_for(OVERHEAD_WINDOW);
    let per_node_s = n as f64 * OVERHEAD_WINDOW.as_secs_f64();
    // Bytes per node per second of every kind that sent anything in the window (packet
    // trains included, under `train`, outside the total).
    let by_kind: serde_json::Map<String, serde_json::Value> =
        overlay::sim::traffic::since(sim.traffic(), &kinds_before)
            .into_iter()
            .filter(|(_, t)| t.bytes > 0)
            .map(|(k, t)| (k.to_string(), json!(t.bytes as f64 / per_node_s)))
            .collect();
    let per = (sim.control_bytes() - before) as f64 / per_node_s;
    let gossip_per = (gossip_bytes(&sim) - gossip_before) as f64 / per_node_s;
    progress(&format!(
        "sim {label}: {per:.0} bytes/node/s over the window, {:.0} s wall",
        wall.elapsed().as_secs_f64()
    ));
    let mut out = json!({
        "topology": topology, "base": j.base, "scale": j.scale, "derived": derived,
        "membership": if j.membership { "gossip" } else { "oracle" },
        "gossip_bytes_per_node_per_s": gossip_per,
        "nodes": n, "converged": converged, "optimal_trees": optimal.0, "trees": optimal.1,
        "converged_s": conv.as_secs_f64(), "optimal_s": optimal_from,
        "first_optimal_s": first_optimal, "optimal_breaks": breaks,
        "converged_wall_s": conv_wall,
        "window_s": OVERHEAD_WINDOW.as_secs_f64(), "bytes_per_node_per_s": per,
        "by_kind": by_kind,
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
pub(crate) fn run_sim_jobs(
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

pub(crate) fn convergence_report(cli: &Cli, runs: &[serde_json::Value]) -> serde_json::Value {
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
                "  {:<12} {:>4} nodes: every tree wide-area optimal first at {:.2} s, without a break from {:.2} s (breaks seen: {}), stable (no parent move for 5 s) at {:.1} s ({:.0} s wall); {} crashed (10%) -> repaired in {:.0} ms ({:.1} s wall in all)",
                r["topology"].as_str().unwrap_or(""),
                r["nodes"],
                r["first_optimal_s"].as_f64().unwrap_or(f64::NAN),
                r["optimal_s"].as_f64().unwrap_or(f64::NAN),
                r["optimal_breaks"],
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

pub(crate) fn overhead_report(
    cli: &Cli,
    runs: &[serde_json::Value],
) -> anyhow::Result<serde_json::Value> {
    let mut rows: Vec<serde_json::Value> = runs
        .iter()
        .filter(|r| r["overhead"].as_bool() == Some(true))
        .cloned()
        .collect();
    let big = rows
        .iter()
        .find(|r| r["nodes"].as_u64() >= Some(2000))
        .cloned();
    let saved = cli.out.join(BIG_SAVED);
    let mut note = None;
    match big {
        // Kept for the reports of runs without it.
        Some(mut b) => {
            b["separate_run"] = json!(format!(
                "cargo run --release --example bench -- overhead --with-2000 (seed {})",
                cli.seed
            ));
            std::fs::create_dir_all(&cli.out)?;
            std::fs::write(&saved, serde_json::to_string_pretty(&b)?)?;
        }
        None => match std::fs::read_to_string(&saved) {
            Ok(text) => match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(b) => rows.push(b),
                Err(e) => bail!("{} is not a saved overhead result: {e}", saved.display()),
            },
            Err(_) => note = Some(BIG_NOTE),
        },
    }
    rows.sort_by_key(|r| {
        let gossip = r["membership"].as_str() == Some("gossip");
        (r["nodes"].as_u64().unwrap_or(0), gossip)
    });
    let series = |membership: &str| -> Vec<(f64, f64)> {
        rows.iter()
            // Runs saved before the membership contender existed were oracle runs.
            .filter(|r| r["membership"].as_str().unwrap_or("oracle") == membership)
            .map(|r| {
                (
                    r["nodes"].as_f64().unwrap_or(f64::NAN),
                    r["bytes_per_node_per_s"].as_f64().unwrap_or(f64::NAN),
                )
            })
            .collect()
    };
    let svg = line_chart(
        "steady control traffic against overlay size (simulator)",
        "nodes",
        "bytes per node per second",
        &[
            Series {
                name: "trees only (members told by the simulator)".into(),
                points: series("oracle"),
            },
            Series {
                name: "whole node (membership protocol included)".into(),
                points: series("gossip"),
            },
        ],
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
                "  {:<16} {:>4} nodes, membership {:<6}: {:>8.0} bytes/node/s ({:.0} of it membership){derived}{}",
                r["topology"].as_str().unwrap_or(""),
                r["nodes"],
                r["membership"].as_str().unwrap_or("oracle"),
                r["bytes_per_node_per_s"].as_f64().unwrap_or(f64::NAN),
                r["gossip_bytes_per_node_per_s"].as_f64().unwrap_or(0.0),
                caveats(r)
            );
        }
    }
    if let Some(n) = note
        && !cli.json
    {
        println!("  ({n})");
    }
    Ok(json!({"benchmark": "overhead", "runs": rows, "note": note}))
}

/// What a row of the overhead table must say besides its figure: measured before every
/// tree had converged, or taken from a separate run.
pub(crate) fn caveats(r: &serde_json::Value) -> String {
    let mut out = String::new();
    if r["converged"].as_bool() == Some(false) {
        out += &format!(
            " (not converged: window began at {:.0} s simulated with {}/{} trees wide-area optimal)",
            r["converged_s"].as_f64().unwrap_or(f64::NAN),
            r["optimal_trees"],
            r["trees"]
        );
    }
    if let Some(cmd) = r["separate_run"].as_str() {
        out += &format!(" (from a separate run: {cmd})");
    }
    out
}

pub(crate) fn convergence(cli: &Cli) -> anyhow::Result<serde_json::Value> {
    let runs = run_sim_jobs(&sim_jobs(true, false, cli.with_2000), cli.seed, cli.threads)?;
    Ok(convergence_report(cli, &runs))
}

pub(crate) fn overhead(cli: &Cli) -> anyhow::Result<serde_json::Value> {
    let runs = run_sim_jobs(&sim_jobs(false, true, cli.with_2000), cli.seed, cli.threads)?;
    overhead_report(cli, &runs)
}
