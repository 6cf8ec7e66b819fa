//! `collectives-large`: allreduce and reduce of f32 vectors, scatter, gather and allgather
//! of pieces, from 64 KiB to 64 MiB in all, over real QUIC on a topology with its
//! bandwidths emulated (das-4 unless told), every node of the overlay taking part.
//! Contenders side by side, each size in one run:
//! - `default`: what a caller gets with no options (the planner's model and decision
//!   table pick the algorithm; successive calls of a size class may switch);
//! - allreduce: `clustered` (ours forced: reduce-scatter/allgather over the discovered
//!   clusters), `hierarchical` (static MagPIe/HAN style, its clusters from the topology
//!   file), `ring` (Gloo style, all nodes in id order), `tree` (whole vectors up a binary
//!   tree, the result down);
//! - reduce (to the first node of the first cluster): the allreduce's algorithms, each
//!   stopped where the result reaches the root;
//! - scatter and gather (the root is the first node of the first cluster): `relayed`
//!   (ours forced: chunks direct or through a third cluster), `direct` (flat),
//!   `hierarchical` (through each cluster's first member, the file's clusters), `tree`;
//! - allgather: `relayed` (ours forced: each chunk into every other cluster once, over the
//!   link that finishes it soonest), `direct` (flat), `hierarchical` (through the
//!   clusters' first members, the file's clusters), `ring` (Gloo, pipelined), `tree`.
//!
//! Completion is when the last node returned, from when the calls were started. Every
//! node's result is checked exactly.

mod calls;

use self::calls::{allgather, reduce, routed};
use super::large::size_label;
use super::large_setup::{Testbed, block_on};
use crate::api::{Algorithm, Node, TuneEntry};
use crate::proto::NodeId;
use crate::topology::Topology;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Vector sizes, bytes.
pub const SIZES: [u64; 6] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];
/// Calls per contender, interleaved round by round (the median counts; the default's calls
/// also show its tuning): below a MiB, where one call of the same algorithm varies by a
/// quarter (0.105-0.132 s for clustered reduce at 64 KiB) and the default spends up to four
/// calls trying algorithms, so its settled median still has ten or more; then to 4 MiB;
/// one call from 16 MiB up.
const REPEATS: (usize, usize) = (15, 3);
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
    Reduce,
    Scatter,
    Gather,
    Allgather,
}

impl Collective {
    /// In run order.
    pub const ALL: [Collective; 5] = [
        Collective::Allreduce,
        Collective::Reduce,
        Collective::Scatter,
        Collective::Gather,
        Collective::Allgather,
    ];

    /// `allreduce`, `reduce`, `scatter`, `gather` or `allgather`.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::Reduce => "reduce",
            Collective::Scatter => "scatter",
            Collective::Gather => "gather",
            Collective::Allgather => "allgather",
        }
    }

    /// The algorithms forced beside the default, ours first.
    pub fn algorithms(self) -> Vec<Algorithm> {
        match self {
            Collective::Allreduce | Collective::Reduce => Algorithm::ALLREDUCE.to_vec(),
            Collective::Scatter | Collective::Gather => Algorithm::ROUTED.to_vec(),
            Collective::Allgather => Algorithm::ALLGATHER.to_vec(),
        }
    }

    /// The contenders in run order.
    pub fn contenders(self) -> Vec<Contender> {
        std::iter::once(Contender::Default)
            .chain(self.algorithms().into_iter().map(Contender::Forced))
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
    /// Sizes below this are skipped.
    pub min_bytes: u64,
    /// The collectives to measure.
    pub collectives: Vec<Collective>,
    /// The contenders to run, by name (`default`, an algorithm's); all if empty.
    pub contenders: Vec<String>,
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
    let chosen =
        |c: &Contender| opts.contenders.is_empty() || opts.contenders.iter().any(|n| n == c.name());
    // One call of every contender first, not measured: the connections and their
    // congestion windows are then open for every measured row alike (the first contender
    // at the first size paid for them alone), and the size class is one no row uses.
    for &collective in &opts.collectives {
        for contender in collective.contenders().into_iter().filter(chosen) {
            let name = format!("warm-up-{}-{}", collective.name(), contender.name());
            call(
                nodes,
                (collective, contender),
                &name,
                WARM_UP_BYTES,
                &file_groups,
            )
            .await?;
        }
    }
    progress("collectives-large: every contender warmed up");
    let mut rows = Vec::new();
    for &collective in &opts.collectives {
        let sizes = SIZES
            .into_iter()
            .filter(|&b| b <= opts.max_bytes && b >= opts.min_bytes);
        for bytes in sizes {
            let contenders: Vec<Contender> =
                collective.contenders().into_iter().filter(chosen).collect();
            let repeat = match bytes {
                b if b < 1 << 20 => REPEATS.0,
                b if b <= 4 << 20 => REPEATS.1,
                _ => 1,
            };
            let mut calls = vec![Vec::new(); contenders.len()];
            // Round by round, every contender once a round, in an order shuffled each
            // round, after a pause: a slow spell of the shared machine falls on all of
            // them alike, and so does following a contender that loaded other links (a
            // call right after the slow tree took up to a fifth longer).
            for rep in 0..repeat {
                for i in round_order(contenders.len(), bytes ^ rep as u64) {
                    let contender = contenders[i];
                    tokio::time::sleep(PAUSE).await;
                    let c = (collective, contender);
                    let name =
                        format!("{}-{}-{}-{rep}", collective.name(), contender.name(), bytes);
                    let call = call(nodes, c, &name, bytes, &file_groups).await?;
                    progress(&format!(
                        "collectives-large: {} {} {}: {:.3} s ({})",
                        collective.name(),
                        size_label(bytes),
                        contender.name(),
                        call.1,
                        call.0.name()
                    ));
                    calls[i].push(call);
                }
            }
            for (contender, calls) in contenders.into_iter().zip(calls) {
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
    // The allreduce and allgather planner (the smallest id) and the root of the others
    // keep the tables.
    let planner = nodes.iter().min_by_key(|n| n.id()).context("no nodes")?;
    let mut table = planner.collective_table();
    if nodes[0].id() != planner.id() {
        table.extend(nodes[0].collective_table());
    }
    let tuning = if opts.collectives.contains(&Collective::Scatter)
        && (opts.min_bytes..=opts.max_bytes).contains(&TUNING_BYTES)
        && opts.contenders.is_empty()
    {
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

/// The pause before each measured call, for what the last one left behind to end.
const PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// `0..n` shuffled (Fisher-Yates over the project's generator seeded with `seed`): the
/// same every run.
fn round_order(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = crate::proto::rng::SplitMix64::new(seed);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order
}

/// The warm-up calls' size: below every row's, a size class of its own.
const WARM_UP_BYTES: u64 = 16 << 10;

/// One call of `c` on every node: the algorithm it ran, its seconds, the prediction.
async fn call(
    nodes: &[Node],
    c: (Collective, Contender),
    name: &str,
    bytes: u64,
    file_groups: &[Vec<NodeId>],
) -> anyhow::Result<(Algorithm, f64, f64)> {
    match c.0 {
        Collective::Allreduce | Collective::Reduce => {
            reduce(nodes, c, name, bytes, file_groups).await
        }
        Collective::Allgather => allgather(nodes, name, bytes, c.1, file_groups).await,
        _ => routed(nodes, c, name, bytes, file_groups).await,
    }
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

#[cfg(test)]
mod tests {
    use super::round_order;

    #[test]
    fn every_round_runs_every_contender_once_and_the_orders_differ() {
        let orders: Vec<Vec<usize>> = (0..5).map(|r| round_order(6, (64 << 10) ^ r)).collect();
        for o in &orders {
            let mut sorted = o.clone();
            sorted.sort();
            assert_eq!(sorted, (0..6).collect::<Vec<_>>());
        }
        // Who runs right before contender 0 changes from round to round.
        let before_first = |o: &Vec<usize>| {
            o.iter()
                .position(|&i| i == 0)
                .map(|p| o.get(p.wrapping_sub(1)).copied())
        };
        let distinct: std::collections::BTreeSet<_> = orders.iter().map(before_first).collect();
        assert!(distinct.len() >= 3, "{orders:?}");
    }
}
