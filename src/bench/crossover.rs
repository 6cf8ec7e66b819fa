//! The crossover table: broadcasts from 1 KiB to 64 MiB over real QUIC on a topology with
//! its bandwidths emulated (das-4 from VU unless told), the default against the latency
//! tree (`single-tree`) and the packed trees whatever the model predicts (`multi-tree`),
//! side by side: where the default switches from one tree to stripes, and whether it is
//! the faster on each side.
//!
//! Below 256 KiB a payload is never cut (it would be one part on one tree), so every
//! contender sends it inline along the latency tree; from there to 960 KiB the default
//! streams and stripes it if its model says so, and `multi-tree` always does.

use super::bandwidth;
use super::large::{Broadcast, Contender, SETTLE, size_label};
use super::large_setup::{Testbed, block_on, payload, tap};
use crate::proto::collective::MAX_INLINE_PAYLOAD;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Payload sizes, bytes.
pub const SIZES: [u64; 8] = [
    1 << 10,
    64 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];
/// The contenders, in run order.
pub const CONTENDERS: [Contender; 3] = [
    Contender::Default,
    Contender::SingleTree,
    Contender::MultiTree,
];
/// Broadcasts per contender for payloads below a MiB (the median counts): short
/// broadcasts are noisy on a shared machine.
const REPEAT_SMALL: usize = 5;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub topology: Topology,
    pub nodes_per_cluster: usize,
    pub root_cluster: String,
    /// Sizes above this are skipped.
    pub max_bytes: u64,
}

/// One contender at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub bytes: u64,
    pub mode: Contender,
    /// The median completion over the repetitions, s (`None`: one did not reach everyone).
    pub completion_s: Option<f64>,
    pub repetitions: usize,
    /// How the broadcast went: the latency tree inline, the widest tree, or `N trees`.
    pub took: String,
}

/// The whole table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Always `"crossover"`.
    pub benchmark: String,
    pub topology: String,
    pub root: String,
    pub nodes: usize,
    /// From which size the root's model predicted stripes faster, when the table started.
    pub model_crossover_bytes: Option<u64>,
    pub rows: Vec<Row>,
    pub wall_s: f64,
}

/// Runs the table on a runtime of its own; `progress` gets one line at a time.
pub fn run(opts: &Options, progress: &dyn Fn(&str)) -> anyhow::Result<Outcome> {
    block_on(run_async(opts, progress))
}

async fn run_async(opts: &Options, progress: &dyn Fn(&str)) -> anyhow::Result<Outcome> {
    let wall = Instant::now();
    let Testbed {
        topo,
        overlay,
        root,
        root_cluster,
        ..
    } = Testbed::start(
        &opts.topology,
        opts.nodes_per_cluster,
        &opts.root_cluster,
        "crossover",
        progress,
    )
    .await?;
    let tree = bandwidth::best_tree(&topo, root_cluster);
    let model_crossover_bytes = overlay.nodes[root]
        .broadcast_plan(64 << 20)
        .await
        .ok()
        .flatten()
        .and_then(|p| p.crossover_bytes);
    let mut rx = tap(&overlay.nodes);
    let mut rows = Vec::new();
    for bytes in SIZES.into_iter().filter(|&b| b <= opts.max_bytes) {
        let payload = payload(bytes as usize);
        for mode in CONTENDERS {
            for n in &overlay.nodes {
                let _ = n.set_spread(mode.spread()).await;
            }
            let took = took(&overlay.nodes[root], bytes).await;
            let repetitions = if bytes < 1 << 20 { REPEAT_SMALL } else { 1 };
            let mut times = Vec::new();
            for _ in 0..repetitions {
                overlay.wait_optimal(Duration::from_secs(60), SETTLE).await;
                let b = Broadcast {
                    nodes: &overlay.nodes,
                    root,
                    payload: &payload,
                    mode,
                    tree: tree.clone(),
                };
                times.push(b.run(&mut rx, tree.mbit, progress).await.completion_s);
            }
            rows.push(Row {
                bytes,
                mode,
                completion_s: median(&times),
                repetitions,
                took,
            });
        }
    }
    overlay.shutdown().await;
    Ok(Outcome {
        benchmark: "crossover".into(),
        topology: topo.name.clone(),
        root: format!("{}-1", topo.clusters[root_cluster].name),
        nodes: topo.node_count(),
        model_crossover_bytes,
        rows,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

/// How a broadcast of `bytes` from `root` goes with the spread it has now.
async fn took(root: &crate::api::Node, bytes: u64) -> String {
    let plan = root.broadcast_plan(bytes).await.ok().flatten();
    let inline = bytes as usize <= MAX_INLINE_PAYLOAD;
    match plan {
        Some(p) if p.striped && bytes >= crate::net::stripes::MIN_CUT => {
            format!("{} trees", p.trees.len())
        }
        Some(_) if !inline => "widest tree".into(),
        None if !inline => "latency tree".into(),
        _ => "latency tree, inline".into(),
    }
}

/// The median, or `None` if any is `None` (a repetition that missed someone).
fn median(times: &[Option<f64>]) -> Option<f64> {
    let mut v: Vec<f64> = times.iter().copied().collect::<Option<_>>()?;
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The table as markdown: completion per contender, what the default took, the fastest
/// and the default's time over the fastest's.
pub fn markdown(o: &Outcome) -> String {
    let mut out = String::from(
        "| size | default s | single-tree s | multi-tree s | default took | fastest | default / fastest |\n|---|---|---|---|---|---|---|\n",
    );
    let mut sizes: Vec<u64> = o.rows.iter().map(|r| r.bytes).collect();
    sizes.dedup();
    for bytes in sizes {
        let at = |m: Contender| o.rows.iter().find(|r| r.bytes == bytes && r.mode == m);
        let secs = |m: Contender| at(m).and_then(|r| r.completion_s);
        let fmt = |s: Option<f64>| s.map_or_else(|| "-".into(), |s| format!("{s:.3}"));
        let fastest = CONTENDERS
            .into_iter()
            .filter_map(|m| Some((m, secs(m)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let ratio = match (secs(Contender::Default), fastest) {
            (Some(d), Some((_, f))) => format!("{:.3}", d / f),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {ratio} |",
            size_label(bytes),
            fmt(secs(Contender::Default)),
            fmt(secs(Contender::SingleTree)),
            fmt(secs(Contender::MultiTree)),
            at(Contender::Default).map_or("-", |r| r.took.as_str()),
            fastest.map_or("-", |(m, _)| m.name()),
        );
    }
    out
}

/// The report printed by `bench crossover`.
pub fn text(o: &Outcome) -> String {
    format!(
        "crossover: {} from {}, {} nodes, {:.0} s wall; the root's model predicted stripes \
         faster from {}\n{}",
        o.topology,
        o.root,
        o.nodes,
        o.wall_s,
        o.model_crossover_bytes
            .map_or_else(|| "no size".into(), |b| format!("{} KiB", b >> 10)),
        markdown(o)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_the_fastest_and_what_the_default_took() {
        let row = |bytes, mode, s: Option<f64>, took: &str| Row {
            bytes,
            mode,
            completion_s: s,
            repetitions: 1,
            took: took.into(),
        };
        let o = Outcome {
            benchmark: "crossover".into(),
            topology: "das-4".into(),
            root: "VU-1".into(),
            nodes: 8,
            model_crossover_bytes: Some(300 << 10),
            rows: vec![
                row(
                    1024,
                    Contender::Default,
                    Some(0.004),
                    "latency tree, inline",
                ),
                row(
                    1024,
                    Contender::SingleTree,
                    Some(0.005),
                    "latency tree, inline",
                ),
                row(
                    1024,
                    Contender::MultiTree,
                    Some(0.004),
                    "latency tree, inline",
                ),
                row(16 << 20, Contender::Default, Some(9.0), "5 trees"),
                row(16 << 20, Contender::SingleTree, Some(30.0), "latency tree"),
                row(16 << 20, Contender::MultiTree, None, "5 trees"),
            ],
            wall_s: 1.0,
        };
        let md = markdown(&o);
        assert!(
            md.contains(
                "| 1 KiB | 0.004 | 0.005 | 0.004 | latency tree, inline | default | 1.000 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 16 MiB | 9.000 | 30.000 | - | 5 trees | default | 1.000 |"),
            "{md}"
        );
        assert!(text(&o).contains("from 300 KiB"));
        assert_eq!(median(&[Some(3.0), Some(1.0), Some(2.0)]), Some(2.0));
        assert_eq!(median(&[Some(3.0), None]), None);
    }
}
