//! How `bench large` shows its [`Outcome`]: a text table, a BENCHMARKS.md section and an
//! SVG plot of the share of the bottleneck bandwidth against the payload size.

use super::large::{Contender, Outcome, Run};
use super::plot::{Series, line_chart};
use std::fmt::Write as _;

/// The command that reproduces the benchmark's defaults.
pub const COMMAND: &str = "cargo run --release --example bench -- large";

/// File name of the plot, in the output directory.
pub const SVG: &str = "large-share.svg";

fn name(o: &Outcome, cluster: usize) -> &str {
    o.clusters.get(cluster).map_or("?", String::as_str)
}

fn num(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// The run of `size` in `mode`, if there was one.
fn find(o: &Outcome, size: usize, mode: Contender) -> Option<&Run> {
    o.runs.iter().find(|r| r.size_mib == size && r.mode == mode)
}

/// Payload sizes in run order, each once.
fn sizes(o: &Outcome) -> Vec<usize> {
    let mut s: Vec<usize> = Vec::new();
    for r in &o.runs {
        if !s.contains(&r.size_mib) {
            s.push(r.size_mib);
        }
    }
    s
}

/// `mode`'s completion time over `than`'s, for `size` (below 1: `mode` is faster).
pub fn ratio(o: &Outcome, size: usize, mode: Contender, than: Contender) -> Option<f64> {
    let a = find(o, size, mode)?.completion_s?;
    let b = find(o, size, than)?.completion_s?;
    Some(a / b)
}

/// Whether the latency-tree runs of `size` started on the same tree (like for like); true
/// when one of them was not run (there is nothing to compare).
fn same_tree(o: &Outcome, size: usize) -> bool {
    let hops = |m| find(o, size, m).map(|r| &r.tree_hops);
    match (
        hops(Contender::SingleTree),
        hops(Contender::StoreAndForward),
    ) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// The setup, in one line.
fn setup(o: &Outcome) -> String {
    format!(
        "{} with its bandwidths emulated (sender NIC, then the shared directed link, then \
         the latency; tail drop); {} nodes ({} per cluster), real QUIC in one process; \
         root {}",
        o.topology, o.nodes, o.nodes_per_cluster, o.root,
    )
}

/// The bounds, in one line.
fn bottleneck(o: &Outcome) -> String {
    format!(
        "bounds: the max flow from the root's cluster is {:.1} Mbit/s (trees packed and \
         striped can reach it); the best single tree reaches {:.1} Mbit/s (widest path to \
         {}); the root had measured every cluster pair {}",
        o.max_flow_mbit,
        o.bound.mbit,
        name(o, o.bound.cluster),
        o.measured_s
            .map_or("only after a minute or never".to_string(), |s| format!(
                "{s:.1} s after the trees converged"
            )),
    )
}

/// A run's tree between clusters, e.g. `VU->Leiden VU->UvA`: whether payloads cross one
/// wide-area hop or several in a row decides what store-and-forward costs.
fn hops(o: &Outcome, r: &Run) -> String {
    let names: Vec<String> = r
        .tree_hops
        .iter()
        .map(|&(a, b)| format!("{}->{}", name(o, a), name(o, b)))
        .collect();
    let mut s = names.join(" ");
    if !r.optimal {
        s.push_str(" (not wide-area optimal)");
    }
    s
}

/// Store-and-forward over single-tree for `size`, marked when the two runs' trees differ.
fn ratio_text(o: &Outcome, size: usize) -> String {
    let mut s = num(
        ratio(o, size, Contender::StoreAndForward, Contender::SingleTree),
        3,
    );
    if !same_tree(o, size) {
        s.push_str(" (on different trees: not like for like)");
    }
    s
}

/// The text table `bench large` prints.
pub fn text(o: &Outcome, out_dir: &str) -> String {
    let mut s = format!(
        "large ({})\n  {}\n  plot: {out_dir}/{SVG}\n",
        setup(o),
        bottleneck(o)
    );
    let _ = writeln!(
        s,
        "  {:>8} {:<18} {:>12} {:>8} {:>11} {:>11}  the latency tree's hops between clusters",
        "size", "mode", "completion s", "Mbit/s", "of max flow", "of 1 tree"
    );
    for r in &o.runs {
        let _ = writeln!(
            s,
            "  {:>4} MiB {:<18} {:>12} {:>8} {:>11} {:>11}  {}",
            r.size_mib,
            r.mode.name(),
            num(r.completion_s, 2),
            num(r.throughput_mbit, 2),
            num(r.share_of_max_flow, 3),
            num(r.share_of_bound, 3),
            hops(o, r)
        );
    }
    for size in sizes(o) {
        let _ = writeln!(
            s,
            "  {size:>4} MiB: completion time default / single-tree {}, default / magpie {}, store-and-forward / single-tree {}",
            num(ratio(o, size, Contender::Default, Contender::SingleTree), 3),
            num(ratio(o, size, Contender::Default, Contender::Magpie), 3),
            ratio_text(o, size)
        );
    }
    let _ = write!(
        s,
        "  converged after {:.1} s; whole benchmark {:.0} s wall",
        o.converged_s, o.wall_s
    );
    s
}

/// The BENCHMARKS.md section.
pub fn markdown(o: &Outcome) -> String {
    let mut md = String::from(
        "## Large broadcasts: striped over measured trees, one latency tree, MagPIe, store-and-forward\n\n",
    );
    let _ = writeln!(
        md,
        "Made by `{COMMAND}` (also part of `all`): {}. The {}. A hop from cluster A to \
         cluster B carries at most the smaller of A's per-node bandwidth and the link A -> B; \
         a single tree is as fast as its narrowest hop, and the best single tree reaches every \
         cluster along its widest path (maximin). Not counted: a relay sharing its NIC among \
         several children (das-4's NICs, 400 Mbit/s, are far from binding). Completion: from \
         the broadcast call (the root hashes the payload first) to the last node's delivery, \
         every node having checked the SHA-256. Throughput: payload bits over that time. \
         Contenders: `default` is `Node::broadcast` with no option (planned from the \
         bandwidths the nodes measured: striped over several packed trees when predicted \
         faster); `single-tree` the overlay's latency tree, pipelined; `magpie` the static \
         MagPIe scheme configured from the file (a coordinator per cluster, the root sending \
         to every coordinator, binomial inside clusters, 32 KiB segments) run by \
         protocol-less QUIC forwarders on the same emulated network; `store-and-forward` \
         the latency tree with whole payloads per hop. Share: throughput over the max-flow \
         bound (\"of max flow\", from the file, for reporting only) and over the best single \
         tree's rate (\"of 1 tree\"). Ratios: completion time over single-tree's (below 1: \
         faster). \
         Absolute times depend on the machine (QUIC on 2 shared cores). Plot: `{SVG}`.\n",
        setup(o),
        bottleneck(o),
    );
    md.push_str(
        "| size | mode | completion s | throughput Mbit/s | share of max flow | share of best single tree | latency tree between clusters |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for r in &o.runs {
        let _ = writeln!(
            md,
            "| {} MiB | {} | {} | {} | {} | {} | {} |",
            r.size_mib,
            r.mode.name(),
            num(r.completion_s, 2),
            num(r.throughput_mbit, 2),
            num(r.share_of_max_flow, 3),
            num(r.share_of_bound, 3),
            hops(o, r)
        );
    }
    md.push_str(
        "\n| size | default / single-tree | default / magpie | store-and-forward / single-tree |\n|---|---|---|---|\n",
    );
    for size in sizes(o) {
        let _ = writeln!(
            md,
            "| {size} MiB | {} | {} | {} |",
            num(ratio(o, size, Contender::Default, Contender::SingleTree), 3),
            num(ratio(o, size, Contender::Default, Contender::Magpie), 3),
            ratio_text(o, size)
        );
    }
    md.push('\n');
    if sizes(o).iter().any(|&size| !same_tree(o, size)) {
        md.push_str(
            "Where a ratio says \"on different trees\", the root's tree changed between the two \
             runs of that size, so the ratio mixes the forwarding mode with the tree. A long \
             transfer keeps a link's queue full (up to 50 ms of it, at least 64 KiB), the RTTs \
             the nodes measure across that link grow, and once the minimum over the RTT window \
             has grown, a cluster's entry can move to another link.\n\n",
        );
    }
    md
}

/// The plot: share of the best tree's rate against payload size, one line per mode, and
/// the bound itself at 1 for reference.
pub fn svg(o: &Outcome) -> String {
    let mut series: Vec<Series> = Contender::ALL
        .into_iter()
        .map(|mode| Series {
            name: mode.name().to_string(),
            points: o
                .runs
                .iter()
                .filter(|r| r.mode == mode)
                .filter_map(|r| Some((r.size_mib as f64, r.share_of_max_flow?)))
                .collect(),
        })
        .collect();
    let sizes = sizes(o);
    if let (Some(lo), Some(hi)) = (sizes.iter().min(), sizes.iter().max()) {
        let single = o.bound.mbit / o.max_flow_mbit.max(1e-9);
        series.push(Series {
            name: "best single tree".into(),
            points: vec![(*lo as f64, single), (*hi as f64, single)],
        });
    }
    line_chart(
        &format!(
            "{}, {} nodes: broadcast throughput / max flow ({:.1} Mbit/s)",
            o.topology, o.nodes, o.max_flow_mbit
        ),
        "payload (MiB, log scale)",
        "share of the max-flow bound",
        &series,
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::bandwidth::Bound;

    fn outcome() -> Outcome {
        let run = |size_mib, mode, s: Option<f64>, hops: Vec<(usize, usize)>| Run {
            size_mib,
            mode,
            completion_s: s,
            delivered: if s.is_some() { 8 } else { 5 },
            // Powers of two, so the numbers survive a trip through JSON exactly.
            throughput_mbit: s.map(|s| 8.0 / s),
            share_of_bound: s.map(|s| 1.0 / s),
            share_of_tree: s.map(|s| 2.0 / s),
            max_flow_mbit: 16.0,
            share_of_max_flow: s.map(|s| 0.5 / s),
            tree: Bound {
                mbit: 4.0,
                cluster: 1,
            },
            tree_hops: hops,
            optimal: true,
        };
        let direct = vec![(0, 1), (0, 2)];
        let chain = vec![(0, 2), (2, 1)];
        Outcome {
            benchmark: "large".into(),
            topology: "das-4".into(),
            nodes_per_cluster: 2,
            nodes: 8,
            clusters: vec!["VU".into(), "Leiden".into(), "UvA".into()],
            root: "VU-1".into(),
            bound: Bound {
                mbit: 6.0,
                cluster: 1,
            },
            max_flow_mbit: 16.0,
            measured_s: Some(1.0),
            converged_s: 12.0,
            runs: vec![
                run(1, Contender::Default, Some(1.0), direct.clone()),
                run(1, Contender::SingleTree, Some(2.0), direct.clone()),
                run(1, Contender::Magpie, Some(4.0), direct.clone()),
                run(1, Contender::StoreAndForward, Some(4.0), direct.clone()),
                run(16, Contender::SingleTree, Some(32.0), direct),
                run(16, Contender::StoreAndForward, None, chain),
            ],
            wall_s: 100.0,
        }
    }

    #[test]
    fn tables_show_ratios_and_missing_runs_without_panicking() {
        let o = outcome();
        let (d, st, sf) = (
            Contender::Default,
            Contender::SingleTree,
            Contender::StoreAndForward,
        );
        assert_eq!(ratio(&o, 1, sf, st), Some(2.0));
        assert_eq!(ratio(&o, 1, d, st), Some(0.5));
        assert_eq!(
            ratio(&o, 16, sf, st),
            None,
            "an incomplete run has no ratio"
        );
        let t = text(&o, "docs");
        assert!(
            t.contains("default / single-tree 0.500, default / magpie 0.250, store-and-forward / single-tree 2.000\n"),
            "{t}"
        );
        assert!(t.contains("widest path to Leiden"), "{t}");
        assert!(t.contains("VU->UvA UvA->Leiden"), "{t}");
        assert!(
            t.contains("- (on different trees: not like for like)"),
            "{t}"
        );
        let md = markdown(&o);
        assert!(
            md.contains(COMMAND) && md.contains("| 16 MiB | - | - | - (on different"),
            "{md}"
        );
        let svg = svg(&o);
        assert!(svg.starts_with("<svg") && svg.contains("store-and-forward"));
        // Survives JSON, as `bench all` stores it.
        let back: Outcome = serde_json::from_value(serde_json::to_value(&o).unwrap()).unwrap();
        assert_eq!(back, o);
    }
}
