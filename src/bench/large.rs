//! `bench large`: large broadcasts over the emulated wide area with its bandwidths,
//! pipelined against store-and-forward (the program is `examples/bench/`; the tables and
//! the plot are in [`super::large_report`]).
//!
//! The overlay runs once, in process: a few real nodes per cluster of a topology (das-4 by
//! default), each with its own QUIC endpoint on an emulated socket that enforces the file's
//! latencies and bandwidths
//! ([`LatencyMap::with_bandwidth`](crate::net::emulated::LatencyMap::with_bandwidth)).
//! Once every tree is wide-area optimal, one node broadcasts each payload size twice, once with every node forwarding
//! pipelined and once store-and-forward, and the run is timed from the call to the last
//! node's delivery. Throughput is payload bits over that time; its share is measured against
//! the best single tree's rate and against the rate of the tree the overlay had when the
//! run started ([`super::bandwidth`]).
//!
//! The root's tree is read again before every run because it can change between runs: a
//! saturated link queues, the RTTs the nodes measure across it grow, and a long transfer
//! can move a cluster's entry to another link. Two runs of one size are like for like only
//! when their trees are the same; the tables say when they are not.

use super::bandwidth::{self, Bound};
use super::large_magpie::Magpie;
use super::large_setup::{Seen, Testbed, block_on, payload, tap};
use crate::api::{Forwarding, Node, Spread};
use crate::local::LocalOverlay;
use crate::proto::{DeliveryKind, NodeId};
use crate::topology::Topology;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Payload sizes measured, MiB.
pub const SIZES_MIB: [usize; 3] = [1, 16, 64];
/// Nodes started per cluster unless asked otherwise: enough for a hop inside every cluster,
/// few enough that 2 cores keep up with the QUIC traffic.
pub const DEFAULT_NODES_PER_CLUSTER: usize = 2;
pub use super::large_setup::MAX_NODES_PER_CLUSTER;
/// Before each broadcast the trees must have been wide-area optimal this long (queues from
/// the run before have drained by then).
pub(super) const SETTLE: Duration = Duration::from_secs(2);
/// How often a running broadcast reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// The ways a large broadcast is run, side by side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Contender {
    /// What `Node::broadcast` does with no option: planned from the measured bandwidths
    /// (striped over several trees when predicted faster), pipelined.
    Default,
    /// The overlay's latency tree, pipelined (every broadcast before bandwidth was
    /// measured).
    SingleTree,
    /// The static MagPIe scheme configured from the file: a coordinator per cluster, the
    /// root sending to every coordinator, segmented ([`super::large_magpie`]).
    Magpie,
    /// The latency tree, each relay passing the payload on only once it has all of it.
    StoreAndForward,
    /// Striped over the packed trees whatever the model predicts ([`Spread::Striped`];
    /// the crossover table's third contender).
    MultiTree,
}

impl Contender {
    /// Every contender, in run order.
    pub const ALL: [Contender; 4] = [
        Contender::Default,
        Contender::SingleTree,
        Contender::Magpie,
        Contender::StoreAndForward,
    ];

    /// The contender named `name` (as in [`Contender::name`]).
    pub fn from_name(name: &str) -> Option<Contender> {
        (Contender::ALL.into_iter())
            .chain([Contender::MultiTree])
            .find(|c| c.name() == name)
    }

    /// The name in tables and in `--json` (`mode`).
    pub fn name(self) -> &'static str {
        match self {
            Contender::Default => "default",
            Contender::SingleTree => "single-tree",
            Contender::Magpie => "magpie",
            Contender::StoreAndForward => "store-and-forward",
            Contender::MultiTree => "multi-tree",
        }
    }

    fn forwarding(self) -> Forwarding {
        match self {
            Contender::StoreAndForward => Forwarding::StoreAndForward,
            _ => Forwarding::Pipelined,
        }
    }

    pub(super) fn spread(self) -> Spread {
        match self {
            Contender::Default => Spread::Auto,
            Contender::MultiTree => Spread::Striped,
            _ => Spread::LatencyTree,
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The topology (its bandwidths are emulated; its node counts are replaced).
    pub topology: Topology,
    /// Nodes started in every cluster.
    pub nodes_per_cluster: usize,
    /// The cluster whose first node broadcasts.
    pub root_cluster: String,
    /// Payload sizes, MiB.
    pub sizes_mib: Vec<usize>,
    /// The contenders run for every size, in this order (all of them: [`Contender::ALL`]).
    pub contenders: Vec<Contender>,
}

/// One broadcast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Payload size, MiB.
    pub size_mib: usize,
    /// How it was spread and forwarded.
    pub mode: Contender,
    /// From the call to the last node's delivery, s (`None`: not every node delivered).
    pub completion_s: Option<f64>,
    /// Nodes that delivered it (the root included).
    pub delivered: usize,
    /// Payload bits over the completion time, Mbit/s.
    pub throughput_mbit: Option<f64>,
    /// Throughput over the best single tree's rate.
    pub share_of_bound: Option<f64>,
    /// The max-flow bound from the root's cluster (computed from the file, for reporting
    /// only; the nodes measure), Mbit/s, and the throughput's share of it.
    pub max_flow_mbit: f64,
    pub share_of_max_flow: Option<f64>,
    /// Throughput over the rate of the root's tree as it was when the run started.
    pub share_of_tree: Option<f64>,
    /// That tree's rate and where it binds.
    pub tree: Bound,
    /// That tree's hops between clusters (parent's cluster, child's cluster), each once.
    pub tree_hops: Vec<(usize, usize)>,
    /// Whether every tree was wide-area optimal when the run started.
    pub optimal: bool,
}

/// The whole benchmark's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Always `"large"`.
    pub benchmark: String,
    /// Topology name.
    pub topology: String,
    /// Nodes per cluster.
    pub nodes_per_cluster: usize,
    /// Nodes in all.
    pub nodes: usize,
    /// Cluster names, by index.
    pub clusters: Vec<String>,
    /// The broadcasting node's name.
    pub root: String,
    /// The best single tree's rate from the root.
    pub bound: Bound,
    /// The max-flow bound from the root's cluster, Mbit/s (from the file).
    #[serde(default)]
    pub max_flow_mbit: f64,
    /// When the root held a bandwidth estimate for every cluster pair, s after the trees
    /// were optimal (`None`: not within a minute; `default` then ran on the latency tree).
    #[serde(default)]
    pub measured_s: Option<f64>,
    /// When every tree was wide-area optimal, s after the first node started.
    pub converged_s: f64,
    /// Every broadcast, by size, pipelined first.
    pub runs: Vec<Run>,
    /// Wall time of the whole benchmark, s.
    pub wall_s: f64,
}

/// Runs the benchmark on a runtime of its own; `progress` gets one line at a time.
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
        ids,
        converged,
        measured_s,
    } = Testbed::start(
        &opts.topology,
        opts.nodes_per_cluster,
        &opts.root_cluster,
        "large",
        progress,
    )
    .await?;
    let bound = bandwidth::best_tree(&topo, root_cluster);
    let max_flow_mbit = crate::sim::max_flow_mbit(&topo, root_cluster);
    let mut rx = tap(&overlay.nodes);
    let mut magpie = match opts.contenders.contains(&Contender::Magpie) {
        true => Some(Magpie::start(&overlay, &topo, root).context("starting the MagPIe nodes")?),
        false => None,
    };
    let mut runs = Vec::new();
    for &mib in &opts.sizes_mib {
        let payload = payload(mib << 20);
        for &mode in &opts.contenders {
            let (check, _) = overlay.wait_optimal(Duration::from_secs(60), SETTLE).await;
            let hops = tree_hops(&overlay, ids[root]).await;
            let broadcast = Broadcast {
                nodes: &overlay.nodes,
                root,
                payload: &payload,
                mode,
                tree: bandwidth::tree_rate(&topo, root_cluster, &hops),
            };
            let mut r = match (&mut magpie, mode) {
                (Some(m), Contender::Magpie) => {
                    // The flat wide-area tree: the root's cluster to every other.
                    let flat: Vec<(usize, usize)> = (0..topo.clusters.len())
                        .filter(|&c| c != root_cluster)
                        .map(|c| (root_cluster, c))
                        .collect();
                    let tree = bandwidth::tree_rate(&topo, root_cluster, &flat);
                    let mut r = m.run(&payload, tree, bound.mbit, progress).await;
                    r.tree_hops = flat;
                    r
                }
                _ => broadcast.run(&mut rx, bound.mbit, progress).await,
            };
            r.max_flow_mbit = max_flow_mbit;
            r.share_of_max_flow = r.throughput_mbit.map(|t| t / max_flow_mbit);
            if r.tree_hops.is_empty() {
                r.tree_hops = hops;
            }
            r.optimal = check.all_optimal();
            runs.push(r);
        }
    }
    if let Some(m) = &magpie {
        m.close();
    }
    overlay.shutdown().await;
    Ok(Outcome {
        benchmark: "large".into(),
        topology: topo.name.clone(),
        nodes_per_cluster: opts.nodes_per_cluster,
        nodes: ids.len(),
        clusters: topo.clusters.iter().map(|c| c.name.clone()).collect(),
        root: format!("{}-1", topo.clusters[root_cluster].name),
        bound,
        max_flow_mbit,
        measured_s,
        converged_s: converged.as_secs_f64(),
        runs,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

/// The hops of `root`'s tree between clusters, each once, as every node reports its
/// parent. Hops inside a cluster are left out: the payload spreads there by a planned
/// schedule, not along the tree.
async fn tree_hops(overlay: &LocalOverlay, root: NodeId) -> Vec<(usize, usize)> {
    let index = overlay.index_by_id();
    let mut edges = Vec::new();
    for s in overlay.statuses().await {
        let Some(&child) = index.get(&s.id) else {
            continue;
        };
        let parent = s
            .trees
            .iter()
            .find(|t| t.root == root)
            .and_then(|t| t.parent)
            .and_then(|p| index.get(&p));
        if let Some(&parent) = parent {
            let hop = (overlay.clusters[parent], overlay.clusters[child]);
            if hop.0 != hop.1 {
                edges.push(hop);
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    edges
}

/// One timed broadcast.
pub(super) struct Broadcast<'a> {
    pub nodes: &'a [Node],
    pub root: usize,
    pub payload: &'a [u8],
    pub mode: Contender,
    /// The tree's rate: the share of it is reported, and it sets the deadline.
    pub tree: Bound,
}

impl Broadcast<'_> {
    /// Sets every node's forwarding, broadcasts and waits for every delivery (or a deadline
    /// of three times the tree's ideal time plus a minute).
    pub(super) async fn run(
        &self,
        rx: &mut mpsc::UnboundedReceiver<Seen>,
        bound_mbit: f64,
        progress: &dyn Fn(&str),
    ) -> Run {
        let (len, n) = (self.payload.len(), self.nodes.len());
        let mib = len >> 20;
        let label = format!("{} {}", size_label(len as u64), self.mode.name());
        for node in self.nodes {
            // A node that stopped shows up as a missing delivery below.
            let _ = node.set_forwarding(self.mode.forwarding()).await;
            let _ = node.set_spread(self.mode.spread()).await;
        }
        while rx.try_recv().is_ok() {}
        let ideal = len as f64 * 8.0 / (self.tree.mbit * 1e6);
        let limit = Duration::try_from_secs_f64(ideal * 3.0 + 60.0).unwrap_or(Duration::MAX);
        progress(&format!(
            "large: {label}: broadcasting to {n} nodes (the tree's rate alone takes {ideal:.1} s)"
        ));
        let root_id = self.nodes[self.root].id();
        // The root must not give up and retry directly while a slow transfer progresses.
        let root = self.nodes[self.root]
            .clone()
            .with_op_timeout(limit + Duration::from_secs(30));
        let payload = self.payload.to_vec();
        let t0 = Instant::now();
        let report = tokio::spawn(async move { root.broadcast(payload).await });
        let mut got: HashSet<usize> = HashSet::new();
        let mut last = t0;
        let mut next_progress = t0 + PROGRESS_EVERY;
        while got.len() < n && t0.elapsed() < limit {
            let wait = next_progress.min(t0 + limit);
            match tokio::time::timeout_at(wait.into(), rx.recv()).await {
                Ok(Some((i, from, DeliveryKind::Broadcast, l, at)))
                    if from == root_id && l == len && got.insert(i) =>
                {
                    last = last.max(at);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {
                    progress(&format!(
                        "large: {label}: {}/{n} delivered after {:.0} s",
                        got.len(),
                        t0.elapsed().as_secs_f64()
                    ));
                    next_progress += PROGRESS_EVERY;
                }
            }
        }
        let completion = (got.len() == n).then(|| (last - t0).as_secs_f64());
        match tokio::time::timeout(Duration::from_secs(60), report).await {
            Ok(Ok(Ok(r))) if !r.missing.is_empty() => {
                tracing::warn!(
                    missing = r.missing.len(),
                    "broadcast report names missing nodes"
                )
            }
            Ok(Ok(Ok(_))) => {}
            other => tracing::warn!(?other, "no broadcast report"),
        }
        let throughput = completion.map(|s| len as f64 * 8.0 / s / 1e6);
        let run = Run {
            size_mib: mib,
            mode: self.mode,
            completion_s: completion,
            delivered: got.len(),
            throughput_mbit: throughput,
            share_of_bound: throughput.map(|t| t / bound_mbit),
            max_flow_mbit: 0.0,
            share_of_max_flow: None,
            share_of_tree: throughput.map(|t| t / self.tree.mbit),
            tree: self.tree.clone(),
            tree_hops: Vec::new(),
            optimal: false,
        };
        progress(&format!(
            "large: {label}: {}",
            match (completion, throughput) {
                (Some(s), Some(t)) => format!("all {n} delivered in {s:.2} s ({t:.2} Mbit/s)"),
                _ => format!("only {}/{n} delivered", got.len()),
            }
        ));
        run
    }
}

/// A payload size for progress lines and tables: KiB below a MiB, else MiB.
pub fn size_label(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}
