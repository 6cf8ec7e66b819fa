//! `collectives-large`: allreduce of f32 vectors from 64 KiB to 64 MiB over real QUIC on a
//! topology with its bandwidths emulated (das-4 unless told), every node of the overlay
//! taking part. Contenders side by side, each size in one run:
//! - `default`: what a caller gets with no options (the planner's model and decision
//!   table pick the algorithm; successive calls of a size class may switch);
//! - `clustered`: ours forced (reduce-scatter/allgather over the discovered clusters);
//! - `hierarchical`: static MagPIe/HAN style, its clusters from the topology file;
//! - `ring`: Gloo style, all nodes in id order;
//! - `tree`: the naive tree (whole vectors up a binary tree, the result down).
//!
//! Completion is when the last node returned, from when the calls were started. Every
//! node's result is checked exactly.

use super::large::size_label;
use super::large_setup::{Testbed, block_on};
use super::plot::{Series, line_chart};
use crate::api::{Algorithm, BulkOptions, Node, ReduceOp, TuneEntry};
use crate::proto::NodeId;
use crate::topology::Topology;
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Vector sizes, bytes.
pub const SIZES: [u64; 6] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];
/// Calls per contender below a MiB (the median counts; the default's calls also show its
/// tuning).
const REPEAT_SMALL: usize = 3;
/// Nodes per cluster unless told.
pub const DEFAULT_NODES_PER_CLUSTER: usize = 4;
/// File name of the plot.
pub const SVG: &str = "collectives-large.svg";

/// A contender: the default, or an algorithm forced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Contender {
    Default,
    Forced(Algorithm),
}

impl Contender {
    /// In run order.
    pub const ALL: [Contender; 5] = [
        Contender::Default,
        Contender::Forced(Algorithm::Clustered),
        Contender::Forced(Algorithm::Hierarchical),
        Contender::Forced(Algorithm::Ring),
        Contender::Forced(Algorithm::Tree),
    ];

    /// `default` or the algorithm's name.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Default => "default",
            Contender::Forced(a) => a.name(),
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub topology: Topology,
    pub nodes_per_cluster: usize,
    /// Sizes above this are skipped.
    pub max_bytes: u64,
}

/// One contender at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub bytes: u64,
    pub contender: Contender,
    /// Median completion over the calls, s.
    pub completion_s: f64,
    /// Each call: the algorithm it ran, its completion (s), the planner's prediction (s).
    pub calls: Vec<(Algorithm, f64, f64)>,
}

/// The whole run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Always `"collectives-large"`.
    pub benchmark: String,
    pub topology: String,
    pub nodes: usize,
    pub rows: Vec<Row>,
    /// The planner's decision table at the end.
    pub table: Vec<TuneEntry>,
    pub wall_s: f64,
}

/// Runs the benchmark on a runtime of its own; `progress` gets one line at a time.
pub fn run(opts: &Options, progress: &dyn Fn(&str)) -> anyhow::Result<Outcome> {
    block_on(run_async(opts, progress))
}

async fn run_async(opts: &Options, progress: &dyn Fn(&str)) -> anyhow::Result<Outcome> {
    let wall = Instant::now();
    let first = opts.topology.clusters.first().context("no clusters")?.name.clone();
    let bed = Testbed::start(
        &opts.topology,
        opts.nodes_per_cluster,
        &first,
        "collectives-large",
        progress,
    )
    .await?;
    let nodes = &bed.overlay.nodes;
    // The static hierarchy's clusters: the topology file's, as its operator would write.
    let mut file_groups: Vec<Vec<NodeId>> = vec![Vec::new(); bed.topo.clusters.len()];
    for (n, c) in nodes.iter().zip(&bed.overlay.clusters) {
        file_groups[*c].push(n.id());
    }
    let mut rows = Vec::new();
    for bytes in SIZES.into_iter().filter(|&b| b <= opts.max_bytes) {
        for contender in Contender::ALL {
            let repeat = if bytes < 1 << 20 { REPEAT_SMALL } else { 1 };
            let mut calls = Vec::new();
            for rep in 0..repeat {
                let name = format!("{}-{}-{rep}", contender.name(), bytes);
                let call = all_reduce(nodes, &name, bytes, contender, &file_groups).await?;
                progress(&format!(
                    "collectives-large: {} {}: {:.3} s ({})",
                    size_label(bytes),
                    contender.name(),
                    call.1,
                    call.0.name()
                ));
                calls.push(call);
            }
            let mut times: Vec<f64> = calls.iter().map(|c| c.1).collect();
            times.sort_by(f64::total_cmp);
            rows.push(Row {
                bytes,
                contender,
                completion_s: times[times.len() / 2],
                calls,
            });
        }
    }
    let planner = nodes.iter().min_by_key(|n| n.id()).context("no nodes")?;
    let table = planner.collective_table();
    let topology = bed.topo.name.clone();
    let count = nodes.len();
    bed.overlay.shutdown().await;
    Ok(Outcome {
        benchmark: "collectives-large".into(),
        topology,
        nodes: count,
        rows,
        table,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

/// Node `i`'s value at `j`: small integers, so f32 sums are exact in any order.
fn value(i: usize, j: usize) -> f32 {
    ((i + 1) * (j % 5)) as f32
}

/// One allreduce on every node: (what ran, completion s, predicted s). Fails if any node
/// failed or got a wrong result.
async fn all_reduce(
    nodes: &[Node],
    name: &str,
    bytes: u64,
    contender: Contender,
    file_groups: &[Vec<NodeId>],
) -> anyhow::Result<(Algorithm, f64, f64)> {
    let len = (bytes / 4) as usize;
    let n = nodes.len();
    let options = BulkOptions {
        algorithm: match contender {
            Contender::Default => None,
            Contender::Forced(a) => Some(a),
        },
        groups: (contender == Contender::Forced(Algorithm::Hierarchical))
            .then(|| file_groups.to_vec()),
        timeout: Duration::from_secs(900),
        ..BulkOptions::default()
    };
    let start = Instant::now();
    let calls = nodes.iter().enumerate().map(|(i, node)| {
        let (node, options, name) = (node.clone(), options.clone(), name.to_string());
        tokio::spawn(async move {
            let mut data: Vec<f32> = (0..len).map(|j| value(i, j)).collect();
            let report = node
                .allreduce_slice_with(&name, &mut data, ReduceOp::Sum, options)
                .await;
            let done = start.elapsed().as_secs_f64();
            let total = (n * (n + 1) / 2) as f32;
            let exact = data
                .iter()
                .enumerate()
                .all(|(j, v)| *v == total * (j % 5) as f32);
            (report, exact, done)
        })
    });
    let mut last: f64 = 0.0;
    let mut ran = None;
    for (i, r) in futures::future::join_all(calls).await.into_iter().enumerate() {
        let (report, exact, done) = r.context("a call panicked")?;
        let report = report.with_context(|| format!("node {i}"))?;
        if !exact || report.contributors.len() != n {
            bail!("node {i}: a wrong result ({report:?})");
        }
        last = last.max(done);
        ran = Some((report.algorithm, report.predicted.as_secs_f64()));
    }
    let (algorithm, predicted) = ran.context("no nodes")?;
    Ok((algorithm, last, predicted))
}

fn row(o: &Outcome, bytes: u64, c: Contender) -> Option<&Row> {
    o.rows.iter().find(|r| r.bytes == bytes && r.contender == c)
}

/// The table as markdown: completion per contender, what the default ran, the default over
/// the best contender (ring, hierarchical, tree) and over the best candidate (every
/// algorithm it could have picked, forced).
pub fn markdown(o: &Outcome) -> String {
    let mut out = String::from(
        "| size | default s | clustered s | hierarchical s | ring s | tree s | default ran | default / best contender | default / best candidate |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut sizes: Vec<u64> = o.rows.iter().map(|r| r.bytes).collect();
    sizes.dedup();
    for bytes in sizes {
        let secs = |c: Contender| row(o, bytes, c).map(|r| r.completion_s);
        let fmt = |s: Option<f64>| s.map_or_else(|| "-".into(), |s| format!("{s:.3}"));
        let best = |set: &[Algorithm]| {
            set.iter()
                .filter_map(|a| secs(Contender::Forced(*a)).map(|s| (*a, s)))
                .min_by(|x, y| x.1.total_cmp(&y.1))
        };
        let contenders = best(&[Algorithm::Hierarchical, Algorithm::Ring, Algorithm::Tree]);
        let candidates = best(&Algorithm::ALL);
        let ratio = |b: Option<(Algorithm, f64)>| match (secs(Contender::Default), b) {
            (Some(d), Some((a, s))) => format!("{:.2} ({})", d / s, a.name()),
            _ => "-".into(),
        };
        let ran: Vec<&str> = row(o, bytes, Contender::Default)
            .map(|r| r.calls.iter().map(|c| c.0.name()).collect())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            size_label(bytes),
            fmt(secs(Contender::Default)),
            fmt(secs(Contender::Forced(Algorithm::Clustered))),
            fmt(secs(Contender::Forced(Algorithm::Hierarchical))),
            fmt(secs(Contender::Forced(Algorithm::Ring))),
            fmt(secs(Contender::Forced(Algorithm::Tree))),
            ran.join(", "),
            ratio(contenders),
            ratio(candidates),
        );
    }
    out
}

/// The planner's decision table as markdown.
pub fn table_markdown(table: &[TuneEntry]) -> String {
    let mut out = String::from(
        "| collective | size class | chosen | predicted s (clustered / hierarchical / ring / tree) | measured s | calls | switches |\n|---|---|---|---|---|---|---|\n",
    );
    for e in table {
        let predicted: Vec<String> = Algorithm::ALL
            .iter()
            .map(|a| e.predicted_s.get(a).map_or("-".into(), |s| format!("{s:.3}")))
            .collect();
        let measured: Vec<String> = e
            .measured_s
            .iter()
            .map(|(a, s)| format!("{} {s:.3}", a.name()))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            e.collective,
            size_label(1 << e.class),
            e.chosen.map_or("-", Algorithm::name),
            predicted.join(" / "),
            measured.join(", "),
            e.calls,
            e.switches
        );
    }
    out
}

/// The report printed by `bench collectives-large`.
pub fn text(o: &Outcome) -> String {
    format!(
        "collectives-large: allreduce of f32 on {} ({} nodes), {:.0} s wall\n{}\nThe planner's decision table (default calls only):\n{}",
        o.topology,
        o.nodes,
        o.wall_s,
        markdown(o),
        table_markdown(&o.table)
    )
}

/// Completion time against size, one line per contender (log-log by taking logs of y).
pub fn svg(o: &Outcome) -> String {
    let series: Vec<Series> = Contender::ALL
        .iter()
        .map(|c| Series {
            name: c.name().into(),
            points: o
                .rows
                .iter()
                .filter(|r| r.contender == *c)
                .map(|r| (r.bytes as f64 / 1024.0, r.completion_s))
                .collect(),
        })
        .collect();
    line_chart(
        &format!("{}, {} nodes: allreduce completion", o.topology, o.nodes),
        "vector (KiB, log scale)",
        "completion (s)",
        &series,
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_the_best_contender_and_candidate() {
        let r = |bytes, contender, s: f64, a| Row {
            bytes,
            contender,
            completion_s: s,
            calls: vec![(a, s, s)],
        };
        let o = Outcome {
            benchmark: "collectives-large".into(),
            topology: "das-4".into(),
            nodes: 16,
            rows: vec![
                r(16 << 20, Contender::Default, 10.0, Algorithm::Clustered),
                r(16 << 20, Contender::Forced(Algorithm::Clustered), 9.5, Algorithm::Clustered),
                r(16 << 20, Contender::Forced(Algorithm::Hierarchical), 25.0, Algorithm::Hierarchical),
                r(16 << 20, Contender::Forced(Algorithm::Ring), 50.0, Algorithm::Ring),
                r(16 << 20, Contender::Forced(Algorithm::Tree), 80.0, Algorithm::Tree),
            ],
            table: Vec::new(),
            wall_s: 1.0,
        };
        let md = markdown(&o);
        assert!(
            md.contains("| 16 MiB | 10.000 | 9.500 | 25.000 | 50.000 | 80.000 | clustered | 0.40 (hierarchical) | 1.05 (clustered) |"),
            "{md}"
        );
        assert!(svg(&o).contains("<svg"));
    }
}
