//! `collectives-large`: allreduce of f32 vectors, scatter and gather of pieces, from 64 KiB
//! to 64 MiB in all, over real QUIC on a topology with its bandwidths emulated (das-4
//! unless told), every node of the overlay taking part. Contenders side by side, each size
//! in one run:
//! - `default`: what a caller gets with no options (the planner's model and decision
//!   table pick the algorithm; successive calls of a size class may switch);
//! - allreduce: `clustered` (ours forced: reduce-scatter/allgather over the discovered
//!   clusters), `hierarchical` (static MagPIe/HAN style, its clusters from the topology
//!   file), `ring` (Gloo style, all nodes in id order), `tree` (whole vectors up a binary
//!   tree, the result down);
//! - scatter and gather (the root is the first node of the first cluster): `relayed`
//!   (ours forced: chunks direct or through a third cluster), `direct` (flat),
//!   `hierarchical` (through each cluster's first member, the file's clusters), `tree`.
//!
//! Completion is when the last node returned, from when the calls were started. Every
//! node's result is checked exactly.

use super::large::size_label;
use super::large_setup::{Testbed, block_on};
use crate::api::{Algorithm, BulkOptions, Node, ReduceOp, TuneEntry};
use crate::proto::NodeId;
use crate::topology::Topology;
use anyhow::{Context, bail};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
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
    /// `default` or the algorithm's name.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Default => "default",
            Contender::Forced(a) => a.name(),
        }
    }
}

/// The collectives measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Collective {
    Allreduce,
    Scatter,
    Gather,
}

impl Collective {
    /// In run order.
    pub const ALL: [Collective; 3] = [
        Collective::Allreduce,
        Collective::Scatter,
        Collective::Gather,
    ];

    /// `allreduce`, `scatter` or `gather`.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::Scatter => "scatter",
            Collective::Gather => "gather",
        }
    }

    /// The algorithms forced beside the default, ours first.
    pub fn algorithms(self) -> [Algorithm; 4] {
        match self {
            Collective::Allreduce => Algorithm::ALLREDUCE,
            _ => Algorithm::ROUTED,
        }
    }

    /// The contenders in run order.
    pub fn contenders(self) -> Vec<Contender> {
        std::iter::once(Contender::Default)
            .chain(self.algorithms().map(Contender::Forced))
            .collect()
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub topology: Topology,
    pub nodes_per_cluster: usize,
    /// Sizes above this are skipped.
    pub max_bytes: u64,
    /// The collectives to measure.
    pub collectives: Vec<Collective>,
}

/// One contender at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub collective: Collective,
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
    /// The online-tuning run (see [`tuning`]).
    #[serde(default)]
    pub tuning: Vec<TuningCall>,
    pub wall_s: f64,
}

/// Scatter size of the online-tuning run (a size class the table does not use).
pub const TUNING_BYTES: u64 = 2 << 20;
/// What the links between the other clusters slow to, as a share of the file's rate.
pub const TUNING_SLOWED: f64 = 0.05;
/// Default calls before and after the change.
const TUNING_CALLS: (usize, usize) = (2, 5);

/// One default scatter of the online-tuning run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuningCall {
    /// Whether the links had slowed.
    pub after_change: bool,
    pub algorithm: Algorithm,
    pub seconds: f64,
    pub predicted_s: f64,
}

/// Runs the benchmark on a runtime of its own; `progress` gets one line at a time.
pub fn run(opts: &Options, progress: &dyn Fn(&str)) -> anyhow::Result<Outcome> {
    block_on(run_async(opts, progress))
}

async fn run_async(opts: &Options, progress: &dyn Fn(&str)) -> anyhow::Result<Outcome> {
    let wall = Instant::now();
    let first = opts
        .topology
        .clusters
        .first()
        .context("no clusters")?
        .name
        .clone();
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
    for &collective in &opts.collectives {
        for bytes in SIZES.into_iter().filter(|&b| b <= opts.max_bytes) {
            for contender in collective.contenders() {
                let repeat = if bytes < 1 << 20 { REPEAT_SMALL } else { 1 };
                let mut calls = Vec::new();
                for rep in 0..repeat {
                    let c = (collective, contender);
                    let name =
                        format!("{}-{}-{}-{rep}", collective.name(), contender.name(), bytes);
                    let call = match collective {
                        Collective::Allreduce => {
                            all_reduce(nodes, &name, bytes, contender, &file_groups).await?
                        }
                        _ => routed(nodes, c, &name, bytes, &file_groups).await?,
                    };
                    progress(&format!(
                        "collectives-large: {} {} {}: {:.3} s ({})",
                        collective.name(),
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
                    collective,
                    bytes,
                    contender,
                    completion_s: times[times.len() / 2],
                    calls,
                });
            }
        }
    }
    // The allreduce planner (the smallest id) and the scatter/gather root keep the tables.
    let planner = nodes.iter().min_by_key(|n| n.id()).context("no nodes")?;
    let mut table = planner.collective_table();
    if nodes[0].id() != planner.id() {
        table.extend(nodes[0].collective_table());
    }
    let tuning = if opts.collectives.contains(&Collective::Scatter) {
        tuning(&bed, &file_groups, progress).await?
    } else {
        Vec::new()
    };
    let topology = bed.topo.name.clone();
    let count = nodes.len();
    bed.overlay.shutdown().await;
    Ok(Outcome {
        benchmark: "collectives-large".into(),
        topology,
        nodes: count,
        rows,
        table,
        tuning,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

/// The online-tuning run: default scatters of [`TUNING_BYTES`] from the root, then every
/// link between two clusters other than the root's slows to [`TUNING_SLOWED`] of its rate
/// (the links a relayed plan feeds clusters through), told to nobody, and more default
/// scatters follow at once: the first after the change runs the plan made on the old
/// figures; the table's measured time then makes the next call take the runner-up (or
/// the nodes' own new figures re-plan it).
async fn tuning(
    bed: &Testbed,
    file_groups: &[Vec<NodeId>],
    progress: &dyn Fn(&str),
) -> anyhow::Result<Vec<TuningCall>> {
    let nodes = &bed.overlay.nodes;
    let root_cluster = bed.overlay.clusters[0];
    let mut out = Vec::new();
    for i in 0..TUNING_CALLS.0 + TUNING_CALLS.1 {
        let after_change = i >= TUNING_CALLS.0;
        if i == TUNING_CALLS.0 {
            let k = bed.topo.clusters.len();
            for a in (0..k).filter(|a| *a != root_cluster) {
                for b in (0..k).filter(|b| *b != root_cluster && *b != a) {
                    let rate = bed.topo.bandwidth_mbit(a, b).unwrap_or(0.0);
                    bed.overlay.map.set_link_mbit(a, b, rate * TUNING_SLOWED);
                }
            }
            progress("collectives-large: tuning: the links between the other clusters slowed");
        }
        let name = format!("tuning-{i}");
        let c = (Collective::Scatter, Contender::Default);
        let (algorithm, seconds, predicted_s) =
            routed(nodes, c, &name, TUNING_BYTES, file_groups).await?;
        progress(&format!(
            "collectives-large: tuning call {i}: {} {seconds:.3} s (predicted {predicted_s:.3})",
            algorithm.name()
        ));
        out.push(TuningCall {
            after_change,
            algorithm,
            seconds,
            predicted_s,
        });
    }
    Ok(out)
}

/// What a contender's calls ask for: the algorithm forced (none for the default), and for
/// the static hierarchy the topology file's clusters.
fn options_for(contender: Contender, file_groups: &[Vec<NodeId>]) -> BulkOptions {
    BulkOptions {
        algorithm: match contender {
            Contender::Default => None,
            Contender::Forced(a) => Some(a),
        },
        groups: (contender == Contender::Forced(Algorithm::Hierarchical))
            .then(|| file_groups.to_vec()),
        timeout: Duration::from_secs(900),
        ..BulkOptions::default()
    }
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
    let options = options_for(contender, file_groups);
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
    for (i, r) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
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

/// A piece of member `i`: its index repeated.
fn piece(i: usize, len: usize) -> Bytes {
    Bytes::from(vec![i as u8; len])
}

/// One scatter or gather on every node, the first node the root: (what ran, completion s,
/// predicted s). Fails if any node failed or a piece came wrong.
async fn routed(
    nodes: &[Node],
    (collective, contender): (Collective, Contender),
    name: &str,
    bytes: u64,
    file_groups: &[Vec<NodeId>],
) -> anyhow::Result<(Algorithm, f64, f64)> {
    let n = nodes.len();
    let each = (bytes / n as u64) as usize;
    let root = nodes[0].id();
    let options = options_for(contender, file_groups);
    let ids: Vec<NodeId> = nodes.iter().map(Node::id).collect();
    let start = Instant::now();
    let calls = nodes.iter().enumerate().map(|(i, node)| {
        let (node, options, name, ids) =
            (node.clone(), options.clone(), name.to_string(), ids.clone());
        tokio::spawn(async move {
            let out = match (collective, i) {
                (Collective::Scatter, 0) => {
                    let pieces = ids
                        .iter()
                        .enumerate()
                        .map(|(j, id)| (*id, piece(j, each)))
                        .collect();
                    node.scatter_pieces(&name, pieces, options)
                        .await
                        .map(|(p, r)| (vec![(ids[0], p)], r))
                }
                (Collective::Scatter, _) => node
                    .scatter_receive(&name, root, options)
                    .await
                    .map(|(p, r)| (vec![(ids[i], p)], r)),
                _ => {
                    node.gather_pieces(&name, root, piece(i, each), options)
                        .await
                }
            };
            (out, start.elapsed().as_secs_f64())
        })
    });
    let mut last: f64 = 0.0;
    let mut ran = None;
    for (i, r) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let (out, done) = r.context("a call panicked")?;
        let (got, report) = out.with_context(|| format!("node {i}"))?;
        let want: Vec<(NodeId, Bytes)> = match (collective, i) {
            (Collective::Scatter, _) => vec![(ids[i], piece(i, each))],
            (_, 0) => {
                // The root gets the pieces in id order.
                let mut all: Vec<(NodeId, Bytes)> = ids
                    .iter()
                    .enumerate()
                    .map(|(j, id)| (*id, piece(j, each)))
                    .collect();
                all.sort_by_key(|(id, _)| *id);
                all
            }
            _ => Vec::new(),
        };
        if got != want || report.contributors.len() != n {
            bail!("node {i}: a wrong {} ({report:?})", collective.name());
        }
        last = last.max(done);
        ran = Some((report.algorithm, report.predicted.as_secs_f64()));
    }
    let (algorithm, predicted) = ran.context("no nodes")?;
    Ok((algorithm, last, predicted))
}
