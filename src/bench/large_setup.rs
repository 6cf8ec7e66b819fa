//! What the large-payload benchmarks (`large`, `crossover`) share: the overlay started on a
//! topology with its bandwidths emulated, converged and with the root's bandwidth matrix
//! complete; every node's deliveries in one channel; incompressible payloads.

use crate::api::Node;
use crate::local::LocalOverlay;
use crate::net::emulated::LatencyMap;
use crate::proto::{Config, DeliveryKind, NodeId};
use crate::topology::Topology;
use anyhow::{Context, bail};
use futures::StreamExt;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Runs `fut` to completion on a runtime of its own (two workers, as the machine's cores).
pub fn block_on<T>(fut: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(fut)
}

/// Most nodes per cluster the benchmarks start.
pub const MAX_NODES_PER_CLUSTER: usize = 32;

/// A started, converged overlay and its broadcasting node.
pub struct Testbed {
    /// The topology with every cluster's node count set.
    pub topo: Topology,
    pub overlay: LocalOverlay,
    /// The broadcasting node's index, and its cluster's.
    pub root: usize,
    pub root_cluster: usize,
    /// Every node's id, by index.
    pub ids: Vec<NodeId>,
    /// When every tree was wide-area optimal, after the first node started.
    pub converged: Duration,
    /// When the root held an estimate of every cluster pair, s after that (`None`: not
    /// within a minute).
    pub measured_s: Option<f64>,
}

impl Testbed {
    /// `nodes_per_cluster` nodes in every cluster of `topology`, bandwidths emulated; the
    /// root is the first node of `root_cluster`. `name` prefixes the progress lines.
    pub async fn start(
        topology: &Topology,
        nodes_per_cluster: usize,
        root_cluster: &str,
        name: &str,
        progress: &dyn Fn(&str),
    ) -> anyhow::Result<Testbed> {
        if !(1..=MAX_NODES_PER_CLUSTER).contains(&nodes_per_cluster) {
            bail!("nodes per cluster must be 1..={MAX_NODES_PER_CLUSTER}, got {nodes_per_cluster}");
        }
        let mut topo = topology.clone();
        for c in &mut topo.clusters {
            c.nodes = nodes_per_cluster;
        }
        let Some(root_cluster) = topo.cluster_index(root_cluster) else {
            bail!("{} has no cluster {root_cluster}", topo.name);
        };
        progress(&format!(
            "{name}: starting {} nodes on {} with emulated bandwidth",
            topo.node_count(),
            topo.name
        ));
        let map = LatencyMap::with_bandwidth(topo.clone());
        let overlay = LocalOverlay::start_on(map, Config::wan())
            .await
            .context("starting the overlay")?;
        let (check, converged) = overlay
            .wait_optimal(Duration::from_secs(180), Duration::from_secs(2))
            .await;
        let Some(converged) = converged else {
            overlay.shutdown().await;
            bail!("the trees did not become wide-area optimal: {check:?}");
        };
        progress(&format!(
            "{name}: trees wide-area optimal after {:.1} s",
            converged.as_secs_f64()
        ));
        let root = overlay
            .clusters
            .iter()
            .position(|&c| c == root_cluster)
            .context("the root cluster has no node")?;
        let ids: Vec<NodeId> = overlay.nodes.iter().map(Node::id).collect();
        let measured_s = wait_measured(&overlay.nodes[root], topo.clusters.len()).await;
        progress(&format!(
            "{name}: the root {} every cluster pair's bandwidth{}",
            if measured_s.is_some() {
                "measured"
            } else {
                "did not measure"
            },
            measured_s.map_or(String::new(), |s| format!(" {s:.1} s later")),
        ));
        Ok(Testbed {
            topo,
            overlay,
            root,
            root_cluster,
            ids,
            converged,
            measured_s,
        })
    }
}

/// Waits (up to a minute) until `root` holds an estimate of every directed pair of its
/// `clusters` discovered clusters; how long that took.
async fn wait_measured(root: &Node, clusters: usize) -> Option<f64> {
    let t0 = Instant::now();
    let pairs = clusters * clusters.saturating_sub(1);
    while t0.elapsed() < Duration::from_secs(60) {
        if let Ok(s) = root.status().await
            && s.bandwidth.iter().filter(|b| b.from != b.to).count() >= pairs
        {
            return Some(t0.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// One delivery seen by the benchmark: receiver, root, kind, length, when.
pub type Seen = (usize, NodeId, DeliveryKind, usize, Instant);

/// Every node's deliveries in one channel; payloads are dropped at once, only lengths kept
/// (the data plane has checked each one's SHA-256 before delivering it).
pub fn tap(nodes: &[Node]) -> mpsc::UnboundedReceiver<Seen> {
    let (tx, rx) = mpsc::unbounded_channel();
    for (i, n) in nodes.iter().enumerate() {
        let mut deliveries = Box::pin(n.deliveries());
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(d) = deliveries.next().await {
                let d = d.expect("this reader keeps up: nothing is dropped for it");
                let seen = (i, d.root, d.kind, d.payload.len(), Instant::now());
                if tx.send(seen).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

pub use crate::local::payload;
