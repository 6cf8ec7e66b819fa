//! Many real nodes in one process: every node a full [`Node`] with its own QUIC endpoint on
//! 127.0.0.1, over emulated sockets that delay datagrams by a topology's one-way latency
//! (and, with [`LocalOverlay::start_on`] and [`LatencyMap::with_bandwidth`], limit them to
//! its bandwidths). What the demo, the in-process tests and the benchmarks run on.

use crate::api::{Node, NodeError, NodeStatus, Transport};
use crate::net::emulated::LatencyMap;
use crate::proto::gossip::GossipConfig;
use crate::proto::{Config, NodeId};
use crate::sim::NetModel;
use crate::sim::metrics::{Layout, Scratch, TreeMetrics, tree_metrics};
use crate::topology::Topology;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A running in-process overlay.
pub struct LocalOverlay {
    /// The nodes, numbered cluster by cluster in topology order.
    pub nodes: Vec<Node>,
    /// Cluster index of every node.
    pub clusters: Vec<usize>,
    /// The emulated network.
    pub map: Arc<LatencyMap>,
    net: NetModel,
    /// When the first node started.
    pub started: Instant,
}

/// How the trees look across the whole overlay at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OverlayCheck {
    /// Nodes that answered.
    pub nodes: usize,
    /// Trees (one per node).
    pub trees: usize,
    /// Trees in which every node reaches the root.
    pub spanning: usize,
    /// Trees that span and have exactly one edge entering each non-root cluster.
    pub wide_area_optimal: usize,
    /// Nodes that list every node as an alive member.
    pub full_membership: usize,
    /// The trees that are not wide-area optimal yet, by root, with why.
    pub lagging: Vec<(NodeId, String)>,
}

impl OverlayCheck {
    /// Every tree spans and is wide-area optimal, and everyone knows everyone.
    pub fn all_optimal(&self) -> bool {
        self.trees == self.nodes
            && self.wide_area_optimal == self.trees
            && self.full_membership == self.nodes
    }
}

/// How [`LocalOverlay::start_with`] starts the nodes.
#[derive(Clone, Debug)]
pub struct LocalOptions {
    /// Tree protocol settings of every node.
    pub config: Config,
    /// Membership settings of every node.
    pub gossip: GossipConfig,
    /// Nodes that join at once.
    pub join_batch: usize,
    /// How long each join may take.
    pub join_timeout: Duration,
}

impl LocalOptions {
    /// Defaults around this tree configuration.
    pub fn new(config: Config) -> LocalOptions {
        LocalOptions {
            config,
            gossip: GossipConfig::default(),
            join_batch: 8,
            join_timeout: Duration::from_secs(20),
        }
    }

    /// Both protocols on a clock slowed by `factor` (see [`Config::slowed`]): what lets a
    /// hundred or more real nodes share two cores.
    pub fn slowed(mut self, factor: u32) -> LocalOptions {
        self.config = self.config.slowed(factor);
        self.gossip = self.gossip.slowed(factor);
        self.join_timeout *= factor.max(1);
        self
    }

    /// For a network in time dilated by `factor` (see
    /// [`crate::topology::Topology::dilated`]): the tree protocol as by [`Config::dilated`],
    /// membership slowed by the same factor (its timeouts are latency-bound too).
    pub fn dilated(self, factor: u32) -> LocalOptions {
        let config = self.config.clone().dilated(factor);
        LocalOptions {
            config,
            ..self.slowed(factor)
        }
    }
}

impl LocalOverlay {
    /// Starts one node per topology node: the first creates the overlay, the others join
    /// in small concurrent batches, each through a node already in (spread over them, so
    /// no single node answers every join).
    pub async fn start(topology: Topology, config: Config) -> Result<LocalOverlay, NodeError> {
        LocalOverlay::start_with(LatencyMap::new(topology), LocalOptions::new(config)).await
    }

    /// [`LocalOverlay::start`] on a given emulated network: one node per node of the map's
    /// topology.
    pub async fn start_on(map: Arc<LatencyMap>, config: Config) -> Result<LocalOverlay, NodeError> {
        LocalOverlay::start_with(map, LocalOptions::new(config)).await
    }

    /// [`LocalOverlay::start_on`] with every option.
    pub async fn start_with(
        map: Arc<LatencyMap>,
        options: LocalOptions,
    ) -> Result<LocalOverlay, NodeError> {
        let LocalOptions {
            config,
            gossip,
            join_batch,
            join_timeout,
        } = options;
        let topology = map.topology();
        let clusters = topology.node_clusters();
        let net = NetModel::from_topology(topology);
        let names: Vec<String> = topology.clusters.iter().map(|c| c.name.clone()).collect();
        let started = Instant::now();
        let node_in = |i: usize, count: &mut HashMap<usize, usize>| {
            let c = clusters[i];
            let k = count.entry(c).or_default();
            *k += 1;
            Node::builder()
                .name(format!("{}-{}", names[c], k))
                .config(config.clone())
                .gossip_config(gossip.clone())
                .join_timeout(join_timeout)
                .transport(Transport::Emulated {
                    map: map.clone(),
                    cluster: c,
                })
        };
        let mut count = HashMap::new();
        let first = node_in(0, &mut count).start().await?;
        let mut nodes = vec![first.clone()];
        for batch in (1..clusters.len())
            .collect::<Vec<_>>()
            .chunks(join_batch.max(1))
        {
            let joined = nodes.len();
            let starts: Vec<_> = batch
                .iter()
                .map(|&i| {
                    let via = &nodes[i % joined];
                    node_in(i, &mut count)
                        .join(via.local_addr())
                        .token(first.token())
                        .start()
                })
                .collect();
            for node in futures::future::join_all(starts).await {
                nodes.push(node?);
            }
        }
        Ok(LocalOverlay {
            nodes,
            clusters,
            map,
            net,
            started,
        })
    }

    /// Asks every node for its status.
    pub async fn statuses(&self) -> Vec<NodeStatus> {
        let all = futures::future::join_all(self.nodes.iter().map(|n| n.status())).await;
        all.into_iter().filter_map(Result::ok).collect()
    }

    /// Checks every tree against the topology.
    pub async fn check(&self) -> OverlayCheck {
        let statuses = self.statuses().await;
        let ids: Vec<NodeId> = self.nodes.iter().map(|n| n.id()).collect();
        check_statuses(&statuses, &ids, &self.clusters, &self.net)
    }

    /// Polls [`LocalOverlay::check`] until every tree is wide-area optimal (and stays so
    /// for `stable_for`), or `timeout`. Returns the last check and when it first held.
    pub async fn wait_optimal(
        &self,
        timeout: Duration,
        stable_for: Duration,
    ) -> (OverlayCheck, Option<Duration>) {
        self.wait_optimal_observed(timeout, stable_for, Duration::from_millis(200), |_, _| {})
            .await
    }

    /// [`LocalOverlay::wait_optimal`], polling every `poll`, with every poll's statuses and
    /// check shown to `observe` while it waits (progress reports).
    pub async fn wait_optimal_observed(
        &self,
        timeout: Duration,
        stable_for: Duration,
        poll: Duration,
        mut observe: impl FnMut(&[NodeStatus], &OverlayCheck),
    ) -> (OverlayCheck, Option<Duration>) {
        let deadline = Instant::now() + timeout;
        let ids: Vec<NodeId> = self.nodes.iter().map(|n| n.id()).collect();
        let mut since: Option<Instant> = None;
        loop {
            let statuses = self.statuses().await;
            let check = check_statuses(&statuses, &ids, &self.clusters, &self.net);
            if check.all_optimal() {
                let t = *since.get_or_insert_with(Instant::now);
                if t.elapsed() >= stable_for {
                    return (check, Some(t - self.started));
                }
            } else {
                since = None;
            }
            if Instant::now() >= deadline {
                return (check, None);
            }
            observe(&statuses, &check);
            tokio::time::sleep(poll).await;
        }
    }

    /// Crashes node `i`: its address is cut off the emulated network and its driver stops,
    /// with no goodbye; the others must notice by themselves. It stays in `nodes` (its
    /// status no longer answers, so checks count it as gone).
    pub fn crash(&self, i: usize) {
        if let Some(node) = self.nodes.get(i) {
            self.map.set_cut(node.local_addr(), true);
            node.abort();
        }
    }

    /// Each node's position in `nodes`, by id.
    pub fn index_by_id(&self) -> HashMap<NodeId, usize> {
        (self.nodes.iter().enumerate())
            .map(|(i, n)| (n.id(), i))
            .collect()
    }

    /// Every node leaves.
    pub async fn shutdown(self) {
        futures::future::join_all(self.nodes.iter().map(|n| n.leave())).await;
    }
}

/// Checks the trees that `statuses` report, for the nodes `ids` (node `i` is in cluster
/// `clusters[i]`; a node without a status counts as dead).
pub fn check_statuses(
    statuses: &[NodeStatus],
    ids: &[NodeId],
    clusters: &[usize],
    net: &NetModel,
) -> OverlayCheck {
    let index: HashMap<NodeId, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let n = ids.len();
    let alive: Vec<bool> = (0..n)
        .map(|i| statuses.iter().any(|s| s.id == ids[i]))
        .collect();
    let mut live_per_cluster = vec![0usize; net.clusters()];
    let mut live_per_site = vec![0usize; net.sites()];
    for i in (0..n).filter(|&i| alive[i]) {
        live_per_cluster[clusters[i]] += 1;
        live_per_site[net.site_of(clusters[i])] += 1;
    }
    let lay = Layout {
        alive: &alive,
        cluster_of: clusters,
        net,
        live_per_cluster: &live_per_cluster,
        live_per_site: &live_per_site,
        live: alive.iter().filter(|a| **a).count(),
    };
    let mut check = OverlayCheck {
        nodes: lay.live,
        ..Default::default()
    };
    let mut scratch = Scratch::default();
    for root in (0..n).filter(|&i| alive[i]) {
        let root_id = ids[root];
        let mut row = vec![u32::MAX; n];
        for s in statuses {
            let Some(&i) = index.get(&s.id) else { continue };
            if let Some(t) = s.trees.iter().find(|t| t.root == root_id)
                && t.connected
                && let Some(p) = t.parent.and_then(|p| index.get(&p))
            {
                row[i] = *p as u32;
            }
        }
        let m: TreeMetrics = tree_metrics(root, &row, &lay, &mut scratch);
        check.trees += 1;
        check.spanning += usize::from(m.spanning);
        check.wide_area_optimal += usize::from(m.wide_area_optimal);
        if !m.wide_area_optimal {
            let pathless = (0..n)
                .filter(|&i| alive[i] && i != root && row[i] == u32::MAX)
                .count();
            let why = if !m.spanning && pathless > 0 {
                format!("{pathless} members have no parent in it yet")
            } else if !m.spanning {
                "its parent links do not all lead to the root".to_string()
            } else {
                "it spans, but enters a cluster more than once".to_string()
            };
            check.lagging.push((root_id, why));
        }
    }
    check.full_membership = statuses
        .iter()
        .filter(|s| {
            (0..n).filter(|&i| alive[i]).all(|i| {
                s.members
                    .iter()
                    .any(|m| m.id == ids[i] && m.state == crate::proto::Liveness::Alive)
            })
        })
        .count();
    check
}

/// A test payload of `len` pseudo-random bytes (xorshift), so nothing on the way can compress it.
pub fn payload(len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    out
}
