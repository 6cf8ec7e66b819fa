//! quic: Fig. 5, convergence and repair over real QUIC, every node in this process over the
//! emulated-latency socket, with the static trees run over the same QUIC stack.

use super::{Cli, num, progress, secs, topology};
use overlay::bench::plot::completion_cdf;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// The topology of `all`'s real-QUIC run (the CLI's default).
pub(crate) const ALL_TOPOLOGY: &str = "phoenix-27";

/// A run on another topology keeps its result in the output directory under this prefix
/// (`quic-<topology>.json`), so that the reports of later `all` runs show it, marked as a
/// separate run with its command (phoenix-168 takes too long for `all`).
const SAVED_PREFIX: &str = "quic-";

/// The saved results of real-QUIC runs on other topologies than `all`'s, by file name.
pub(crate) fn saved_runs(out: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut names: Vec<String> = match std::fs::read_dir(out) {
        Ok(dir) => dir
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(SAVED_PREFIX) && n.ends_with(".json"))
            .collect(),
        Err(_) => return Ok(Vec::new()),
    };
    names.sort();
    names
        .iter()
        .map(|n| {
            let path = out.join(n);
            let text = std::fs::read_to_string(&path)?;
            serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!("{} is not a saved real-QUIC result: {e}", path.display())
            })
        })
        .collect()
}

pub(crate) fn quic(cli: &Cli) -> anyhow::Result<serde_json::Value> {
    use overlay::bench::quic_run::{QuicRunOptions, run};
    let opts = QuicRunOptions {
        topology: topology(&cli.quic_topology)?,
        slowdown: cli.slowdown,
        dilation: cli.dilate,
        roots_per_cluster: 2,
        crash_fraction: 0.1,
        timeout: Duration::from_secs(600),
        overhead_window: Duration::from_secs(5),
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
    let title = format!(
        "{} over real QUIC, 1 KB broadcast from {} roots: per-node completion",
        cli.quic_topology,
        r.roots.len()
    );
    let contenders = r.contenders();
    let svg = completion_cdf(
        &title,
        contenders.iter().map(|(n, t)| (*n, t.ms.as_slice())),
    );
    let separate = cli.quic_topology != ALL_TOPOLOGY;
    let cdf = if separate {
        format!("fig5-quic-{}.svg", cli.quic_topology)
    } else {
        "fig5-quic.svg".to_string()
    };
    std::fs::write(cli.out.join(&cdf), svg)?;
    out["cdf"] = json!(cdf);
    if separate {
        out["separate_run"] = json!(format!(
            "cargo run --release --example bench -- quic --quic-topology {} --dilate {}{}",
            cli.quic_topology,
            r.dilation,
            if cli.slowdown > 1 {
                format!(" --slowdown {}", cli.slowdown)
            } else {
                String::new()
            }
        ));
        let saved = cli
            .out
            .join(format!("{SAVED_PREFIX}{}.json", cli.quic_topology));
        std::fs::write(&saved, serde_json::to_string_pretty(&out)?)?;
        progress(&format!(
            "quic: result kept in {} for the reports of later `all` runs",
            saved.display()
        ));
    }
    if !cli.json {
        println!(
            "quic ({}, {} nodes in one process, real QUIC over the emulated socket, clocks x{}, time dilated x{}; CDF in {}/{cdf})",
            cli.quic_topology,
            r.nodes,
            cli.slowdown,
            r.dilation,
            cli.out.display()
        );
        if r.dilation > 1 {
            println!(
                "  every delivery time below is the measured one divided by {} (the topology's own time)",
                r.dilation
            );
        }
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
                "  {key:<26} median {:.4}  max {:.4}",
                out[key]["median"].as_f64().unwrap_or(f64::NAN),
                out[key]["max"].as_f64().unwrap_or(f64::NAN)
            );
        }
        let nf = &out["noise_floor"];
        println!(
            "  noise floor: MagPIe run again / MagPIe  median {:.4}  max {:.4}; per (root, node) median {:.4}  max {:.4}",
            num(&nf["ratio_again_vs_static"]["median"]),
            num(&nf["ratio_again_vs_static"]["max"]),
            num(&nf["per_pair_median"]["median"]),
            num(&nf["per_pair_median"]["max"]),
        );
        println!(
            "  pairs faster (each (root, node) pair's median over the rounds): ours than MagPIe {:.0}%; MagPIe's second run than its first {:.0}%",
            num(&out["pairs_faster"]["ours_vs_static"]) * 100.0,
            num(&out["pairs_faster"]["again_vs_static"]) * 100.0,
        );
        let pp = &out["per_pair_median"];
        println!(
            "  per (root, node) median over the rounds first: ratio_vs_static median {:.4}  max {:.4}; ratio_vs_bound median {:.4}  max {:.4}",
            pp["ratio_vs_static"]["median"].as_f64().unwrap_or(f64::NAN),
            pp["ratio_vs_static"]["max"].as_f64().unwrap_or(f64::NAN),
            pp["ratio_vs_bound"]["median"].as_f64().unwrap_or(f64::NAN),
            pp["ratio_vs_bound"]["max"].as_f64().unwrap_or(f64::NAN),
        );
        println!("  per (root's cluster -> node's cluster), median ms: MagPIe / ours / bound");
        let mut line = String::from(" ");
        for (i, ((a, b), m)) in r.per_cluster().iter().enumerate() {
            line += &format!("  {a}->{b} {:.2}/{:.2}/{:.2}", m[1], m[2], m[3]);
            if i % 3 == 2 {
                println!("{line}");
                line = String::from(" ");
            }
        }
        if !line.trim().is_empty() {
            println!("{line}");
        }
        println!(
            "  times are taken when each node's connection read the message, for every contender; \
             ours then reaches the application's delivery stream {:.0} us later (median; 90%: {:.0} us)",
            num(&out["app_lag_us"]["median"]),
            out["app_lag_us"]["p90"].as_f64().unwrap_or(f64::NAN),
        );
        println!(
            "  every contender is timed from its root's start: ours from when the root's driver took the broadcast, \
             {:.0} us (median; 90%: {:.0} us) after the application's call",
            num(&out["api_lag_us"]["median"]),
            out["api_lag_us"]["p90"].as_f64().unwrap_or(f64::NAN),
        );
        println!("  {}", send_cost_line(&out["send_cost_us"], r.nodes));
        let slow: Vec<String> = (r.contenders().iter().take(3))
            .map(|(name, t)| {
                let list: Vec<String> = overlay::bench::quic_run::slowest(t, 3)
                    .iter()
                    .map(|(m, root, v, cr, cv)| format!("{m:.1} ({root}->{v}, {cr}->{cv})"))
                    .collect();
                format!("{name}: {}", list.join(", "))
            })
            .collect();
        println!(
            "  slowest deliveries, ms (root->node, clusters): {}",
            slow.join("; ")
        );
        println!(
            "  emulation error: {}",
            overlay::bench::quic_run::lateness_summary(&out["wire_lateness"])
        );
        println!(
            "  trees wide-area optimal when the broadcasts began: {} of {}",
            out["optimal_trees"], out["trees"]
        );
        println!(
            "  joined {:.1} s, wide-area optimal {} s, {} crashed, repaired {} s",
            r.started.as_secs_f64(),
            secs(&out["converged_s"]),
            r.crashed,
            secs(&out["repair_s"]),
        );
        if let Some(t) = &r.steady {
            println!("  {}", t.line().trim_start_matches("quic: "));
        }
        if r.dilation > 1 {
            let tt = &out["topology_time"];
            println!(
                "  in the topology's time (divided by the dilation {}): joined {} s, wide-area optimal {} s, repaired {} s",
                r.dilation,
                secs(&tt["joined_s"]),
                secs(&tt["converged_s"]),
                secs(&tt["repair_s"]),
            );
        }
    }
    Ok(out)
}

/// The send cost ours' plans went by, in words.
pub fn send_cost_line(c: &serde_json::Value, nodes: usize) -> String {
    match c["measured_on"].as_u64() {
        Some(n) if n > 0 => format!(
            "ours' in-cluster plans went by a send cost measured on {n} of {nodes} nodes: median {:.0} us, max {:.0} us (configured {:.0} us, the others' and the simulator's)",
            c["median"].as_f64().unwrap_or(f64::NAN),
            c["max"].as_f64().unwrap_or(f64::NAN),
            c["configured"].as_f64().unwrap_or(f64::NAN),
        ),
        _ => {
            "ours' in-cluster plans went by the configured send cost (no node measured one)".into()
        }
    }
}
