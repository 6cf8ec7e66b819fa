//! docs/BENCHMARKS.md: the report written by `all` from every benchmark's JSON results.

use crate::sim_jobs::OVERHEAD_WINDOW;
use crate::{num, secs, send_order_row};

/// docs/BENCHMARKS.md from the results of `all`.
pub(crate) fn markdown(results: &[serde_json::Value], seed: u64) -> String {
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
                    let [a, b, c, d, m, x] = send_order_row(&r["send_order"][k]);
                    let _ = writeln!(
                        md,
                        "| {name} | {a:.2} / {b:.2} | {c:.2} / {d:.2} | {m:.3} | {x:.3} |"
                    );
                }
                md.push('\n');
            }
            Some("collectives") => {
                let _ = writeln!(
                    md,
                    "## Collectives: gather, reduce and scatter against broadcast; planned against along the trees (phoenix-168)\n\nTime from start to the root's report (every member answered), mean over 6 roots; the second of two operations per root (the first teaches each cluster's entry who is below). \"tree\": the same with planning off (`cluster_rtt` zero), on a simulator of its own with the same seed.\n\n| | broadcast ms | scatter ms | gather ms | reduce ms |\n|---|---|---|---|---|\n| planned (default) | {:.1} | {:.1} | {:.1} | {:.1} |\n| along the trees | {:.1} | {:.1} | {:.1} | {:.1} |\n| planned / tree | {:.3} | {:.3} | {:.3} | {:.3} |\n\nGather / broadcast {:.2}, reduce / broadcast {:.2}.\n",
                    num(&r["broadcast_ms"]),
                    num(&r["scatter_ms"]),
                    num(&r["gather_ms"]),
                    num(&r["reduce_ms"]),
                    num(&r["tree_ms"]["broadcast"]),
                    num(&r["tree_ms"]["scatter"]),
                    num(&r["tree_ms"]["gather"]),
                    num(&r["tree_ms"]["reduce"]),
                    num(&r["planned_vs_tree"]["broadcast"]),
                    num(&r["planned_vs_tree"]["scatter"]),
                    num(&r["planned_vs_tree"]["gather"]),
                    num(&r["planned_vs_tree"]["reduce"]),
                    num(&r["gather_vs_broadcast"]),
                    num(&r["reduce_vs_broadcast"]),
                );
            }
            Some("convergence") => {
                let _ = writeln!(
                    md,
                    "## Convergence and repair (simulator)\n\nCold start until every tree is wide-area optimal and no parent has moved for 5 s (first optimal: the first check at which every tree was wide-area optimal; optimal from: since when every tree has been wide-area optimal without a break, parents inside clusters still moving or not; breaks: checks in between that found a tree not optimal); then {} s of steady traffic (the overhead window), then 10% of the nodes crash at once; repaired = every tree spans the survivors again.\n\n| topology | nodes | every tree wide-area optimal first (s) | optimal from (s) | breaks | stable (s) | crashed (10%) | repaired (ms) | wall to converge (s) |\n|---|---|---|---|---|---|---|---|---|",
                    OVERHEAD_WINDOW.as_secs()
                );
                for x in r["runs"].as_array().into_iter().flatten() {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {:.2} | {:.2} | {} | {:.1} | {} | {:.0} | {:.0} |",
                        x["topology"].as_str().unwrap_or(""),
                        x["nodes"],
                        x["first_optimal_s"].as_f64().unwrap_or(f64::NAN),
                        x["optimal_s"].as_f64().unwrap_or(f64::NAN),
                        x["optimal_breaks"],
                        x["converged_s"].as_f64().unwrap_or(f64::NAN),
                        x["crashed"],
                        x["repair_ms"].as_f64().unwrap_or(f64::NAN),
                        x["converged_wall_s"].as_f64().unwrap_or(f64::NAN)
                    );
                }
                md.push('\n');
            }
            Some("quic") => {
                let dilation = r["dilation"].as_u64().unwrap_or(1);
                let command = match r["separate_run"].as_str() {
                    Some(c) => format!("`{c}` (a separate run: not part of `all`)"),
                    None => {
                        format!("`cargo run --release --example bench -- quic --dilate {dilation}`")
                    }
                };
                let _ = writeln!(
                    md,
                    "## Over real QUIC: Fig. 5, convergence, repair ({})\n\n{} nodes, each a full node with its own QUIC endpoint, in one process over the emulated-latency socket; protocol clocks slowed x{}; time dilated x{dilation}. The static trees run over the same QUIC stack and socket (a protocol-less forwarder per node, connections opened by a first broadcast). Every contender's time at a node is taken where its connection read the message. CDF: `{}`. Command: {command}.\n",
                    r["topology"].as_str().unwrap_or(""),
                    r["nodes"],
                    r["slowdown"],
                    r["cdf"].as_str().unwrap_or("fig5-quic.svg"),
                );
                if dilation > 1 {
                    let _ = writeln!(
                        md,
                        "Time dilation x{dilation}: every latency of the emulated network and every clock and latency threshold of the protocol are {dilation} times as long, and every delivery time below is the measured one divided by {dilation}, so it reads in the topology's own time. The {} nodes share two cores; dilated, each gets {dilation} times more CPU against the network, as nodes on machines of their own would (without it, every hop waits in a run queue shared by all the nodes, and the run measures that). Convergence and repair are given both in the topology's time and as measured (wall).\n",
                        r["nodes"]
                    );
                }
                md.push_str("| contender | median ms | max ms | missed |\n|---|---|---|---|\n");
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
                        "| {k} | {:.4} | {:.4} |",
                        r[k]["median"].as_f64().unwrap_or(f64::NAN),
                        r[k]["max"].as_f64().unwrap_or(f64::NAN)
                    );
                }
                for k in ["ratio_vs_static", "ratio_vs_bound"] {
                    let pp = &r["per_pair_median"][k];
                    let _ = writeln!(
                        md,
                        "| {k}, each (root, node) pair's median over the rounds first | {:.4} | {:.4} |",
                        pp["median"].as_f64().unwrap_or(f64::NAN),
                        pp["max"].as_f64().unwrap_or(f64::NAN)
                    );
                }
                let nf = &r["noise_floor"];
                let _ = writeln!(
                    md,
                    "| noise floor: MagPIe run again / MagPIe | {:.4} | {:.4} |\n| noise floor, each pair's median over the rounds first | {:.4} | {:.4} |",
                    num(&nf["ratio_again_vs_static"]["median"]),
                    num(&nf["ratio_again_vs_static"]["max"]),
                    num(&nf["per_pair_median"]["median"]),
                    num(&nf["per_pair_median"]["max"]),
                );
                let _ = writeln!(
                    md,
                    "\nPaired: of the (root, node) pairs, ours is faster than MagPIe (each pair's median over the rounds) on {:.0}%; MagPIe's second run is faster than its first on {:.0}% (the same tree: what a tie looks like).",
                    num(&r["pairs_faster"]["ours_vs_static"]) * 100.0,
                    num(&r["pairs_faster"]["again_vs_static"]) * 100.0,
                );
                let wl = &r["wire_lateness"];
                let _ = writeln!(
                    md,
                    "\nEmulation error: {}.",
                    overlay::bench::quic_run::lateness_summary(wl)
                );
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
                    num(&r["app_lag_us"]["median"]),
                    r["app_lag_us"]["p90"].as_f64().unwrap_or(f64::NAN)
                );
                let _ = writeln!(
                    md,
                    "Every contender is timed from its root's start: ours from when the root's driver took the broadcast, {:.0} us (median; 90%: {:.0} us) after the application's call.",
                    num(&r["api_lag_us"]["median"]),
                    r["api_lag_us"]["p90"].as_f64().unwrap_or(f64::NAN)
                );
                if !r["send_cost_us"].is_null() {
                    let nodes = r["nodes"].as_u64().unwrap_or(0) as usize;
                    let line = crate::quic::send_cost_line(&r["send_cost_us"], nodes);
                    let _ = writeln!(md, "{}{}.", line[..1].to_uppercase(), &line[1..]);
                }
                let _ = writeln!(
                    md,
                    "\nTrees wide-area optimal when the broadcasts began: {} of {}.",
                    r["optimal_trees"], r["trees"]
                );
                let tt = &r["topology_time"];
                let _ = writeln!(
                    md,
                    "\nIn the topology's time: joined in {} s; every tree wide-area optimal {} s after the first start; {} nodes crashed (10%), every survivor's tree optimal again {} s later. Measured (wall, x{dilation}): {} s, {} s, {} s.\n",
                    secs(&tt["joined_s"]),
                    secs(&tt["converged_s"]),
                    r["crashed"],
                    secs(&tt["repair_s"]),
                    secs(&r["joined_s"]),
                    secs(&r["converged_s"]),
                    secs(&r["repair_s"]),
                );
                let steady = &r["steady_control"];
                if let Some(b) = steady["bytes_per_node_per_s"].as_f64() {
                    let kinds: Vec<String> = (steady["by_kind_bytes"].as_object().into_iter())
                        .flatten()
                        .map(|(k, v)| format!("{k} {:.0}", v.as_f64().unwrap_or(0.0)))
                        .collect();
                    let _ = writeln!(
                        md,
                        "Steady control traffic right after convergence, per node per second of the topology's time over {} s: {b:.0} bytes of frames, the simulator's measure (bandwidth probes left out; by kind: {}); on the wire {:.0} bytes in {:.1} datagrams (QUIC headers and acknowledgements and bandwidth probes included, IP and UDP headers not).\n",
                        steady["window_s"],
                        kinds.join(", "),
                        steady["wire_bytes_per_node_per_s"]
                            .as_f64()
                            .unwrap_or(f64::NAN),
                        steady["wire_datagrams_per_node_per_s"]
                            .as_f64()
                            .unwrap_or(f64::NAN),
                    );
                }
            }
            Some("overhead") => {
                let _ = writeln!(
                    md,
                    "## Control overhead (simulator, {} s right after convergence)\n\nPlot: `overhead.svg`. The 500- and 2000-node points are scale-1000 with every cluster's node count halved or doubled (same latency matrix; there are no such topology files). Membership `oracle`: the simulator tells every node of joins, leaves and crashes (the tree protocol's traffic alone); `gossip`: every node runs the membership protocol, and its messages are counted (what a node really sends).\n\n| topology | nodes | membership | bytes/node/s | of which membership |\n|---|---|---|---|---|",
                    OVERHEAD_WINDOW.as_secs()
                );
                for x in r["runs"].as_array().into_iter().flatten() {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {:.0}{} | {:.0} |",
                        x["topology"].as_str().unwrap_or(""),
                        x["nodes"],
                        x["membership"].as_str().unwrap_or("oracle"),
                        x["bytes_per_node_per_s"].as_f64().unwrap_or(f64::NAN),
                        super::sim_jobs::caveats(x),
                        x["gossip_bytes_per_node_per_s"].as_f64().unwrap_or(0.0),
                    );
                }
                if let Some(n) = r["note"].as_str() {
                    let _ = writeln!(md, "\n{n}.");
                }
                // What the largest run with the membership protocol spends its bytes on.
                let largest = (r["runs"].as_array().into_iter().flatten())
                    .filter(|x| x["by_kind"].is_object() && x["membership"] == "gossip")
                    .max_by_key(|x| x["nodes"].as_u64().unwrap_or(0));
                if let Some(x) = largest {
                    let mut kinds: Vec<(String, f64)> = (x["by_kind"].as_object().into_iter())
                        .flatten()
                        .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or(0.0)))
                        .filter(|(k, v)| *v >= 0.5 && k != "train")
                        .collect();
                    kinds.sort_by(|a, b| b.1.total_cmp(&a.1));
                    let list: Vec<String> =
                        kinds.iter().map(|(k, v)| format!("{k} {v:.0}")).collect();
                    let _ = writeln!(
                        md,
                        "\nBy message kind, {} nodes with membership (bytes/node/s): {}.",
                        x["nodes"],
                        list.join(", ")
                    );
                }
                md.push('\n');
            }
            Some("large") => {
                if let Ok(o) = serde_json::from_value(r.clone()) {
                    md.push_str(&overlay::bench::large_report::markdown(&o));
                }
            }
            Some("crossover") => {
                if let Ok(o) = serde_json::from_value(r.clone()) {
                    md.push_str("## Crossover: one tree or stripes, 1 KiB to 64 MiB\n\n");
                    md.push_str(&overlay::bench::crossover::text(&o));
                    md.push('\n');
                }
            }
            Some("collectives-large") => {
                if let Ok(o) = serde_json::from_value(r.clone()) {
                    md.push_str(&collectives_large_section(&o));
                }
            }
            Some("collectives-sim") => {
                if let Ok(o) = serde_json::from_value(r.clone()) {
                    md.push_str(&collectives_sim_section(&o));
                }
            }
            _ => {}
        }
    }
    md
}

/// The large-collectives section: how to run it, the tables, the decision tables, the
/// online-tuning run, the plot.
pub(crate) fn collectives_large_section(o: &overlay::bench::collectives_large::Outcome) -> String {
    use overlay::bench::collectives_large_report as report;
    let tuning = if o.tuning.is_empty() {
        String::new()
    } else {
        format!(
            "Online tuning: default scatters of 2 MiB from the root; after the second, every \
             link between two clusters other than the root's slows to 5% of its rate, told to \
             nobody, and the next calls follow at once:\n\n{}\n",
            report::tuning_markdown(o)
        )
    };
    format!(
        "## Large collectives: the algorithm chosen on the measured network\n\n\
         `cargo run --release --example bench -- collectives-large` (das-4, {} nodes, every \
         one taking part; allreduce of f32 sums; scatter and gather of equal pieces, the \
         root VU's first node, sizes in all; emulated bandwidth over real QUIC; each size \
         in one run). `default` is what a caller gets with no options; the others are \
         forced. Best contender: the fastest of the forced algorithms other than ours \
         (clustered, relayed); best candidate: the fastest of every algorithm the default \
         could pick.\n\n{}\n\
         The planners' decision tables after the run (default calls only):\n\n{}\n{}\
         ![large collectives completion]({})\n\n",
        o.nodes,
        report::tables(o),
        report::table_markdown(&o.table),
        tuning,
        overlay::bench::collectives_large::SVG
    )
}

/// The simulator's large-collectives section: how to run it, the tables, the plot.
pub(crate) fn collectives_sim_section(o: &overlay::bench::collectives_large::Outcome) -> String {
    use overlay::bench::collectives_large_report as report;
    format!(
        "## Large collectives in the simulator\n\n\
         `cargo run --release --example bench -- collectives-sim` (das-4, {} nodes; {:.1} s \
         wall): the simulated nodes measure the network with their own packet trains, the \
         planner's code plans every call on a node's measured view (the default through a \
         decision table of its own, nine calls per size), and the simulator times each \
         plan's transfers through its NIC and link pipes. Same contenders and columns as \
         over real QUIC; no per-transfer CPU or window ramp, so small sizes come out faster \
         than over QUIC.\n\n{}\n![large collectives in the simulator]({})\n\n",
        o.nodes,
        o.wall_s,
        report::tables(o),
        super::large::SIM_SVG
    )
}

/// Opens a block of docs/BENCHMARKS.md that `all` carries over as it is: figures from runs
/// `all` does not make (the netns testbed, integration tests that print figures, other
/// roots or topologies). Closed by [`KEPT_END`].
pub(crate) const KEPT_START: &str = "<!-- kept -->";
/// Closes a kept block.
pub(crate) const KEPT_END: &str = "<!-- /kept -->";

/// Every kept block of `old` (the report being replaced), markers included, in order; an
/// unclosed block runs to the end of the file.
pub(crate) fn kept_sections(old: &str) -> String {
    let mut out = String::new();
    let mut rest = old;
    while let Some(start) = rest.find(KEPT_START) {
        let block = &rest[start..];
        let end = block
            .find(KEPT_END)
            .map_or(block.len(), |e| e + KEPT_END.len());
        out.push_str(&block[..end]);
        out.push_str("\n\n");
        rest = &block[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_blocks_are_carried_over_and_the_rest_is_not() {
        let old = "# Benchmarks\nold table\n<!-- kept -->\n### netns\nfigures\n<!-- /kept -->\nstale\n<!-- kept -->\n### replan\n";
        let kept = kept_sections(old);
        assert!(kept.contains("### netns\nfigures\n<!-- /kept -->"));
        assert!(kept.contains("### replan"));
        assert!(!kept.contains("stale") && !kept.contains("old table"));
        assert_eq!(kept_sections("nothing kept"), "");
    }
}
