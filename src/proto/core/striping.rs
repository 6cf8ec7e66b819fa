//! Planning a large broadcast from this node: one tree or stripes over several, as the
//! measured model says ([`crate::proto::stripe`] does the packing and the predictions;
//! this file feeds it what the node measured).
//!
//! Owns no fields: the plan is computed when asked, from the bandwidth view of the moment,
//! so a link that changed is planned around at the next broadcast.

use super::Core;
use crate::proto::id::NodeId;
use crate::proto::stripe::{self, Arborescence, ClusterGraph};

/// Most trees one broadcast is striped over.
pub const MAX_TREES: usize = 8;
/// The segment of the pipeline in the model: relays pass bytes on as they arrive, so a
/// hop adds about the time of a small chunk, not of a part (with 256 KiB the model put a
/// striped 1 MiB broadcast at 1.3 s and one tree at 1.4 s; measured 0.64 s striped, model
/// 0.69 s with 32 KiB; at 16 MiB 9.2 s predicted, 9.2-9.5 s measured).
pub const SEGMENT: u64 = 32 * 1024;
/// Fixed cost per message in the model: a control message and a stream opened per tree.
const OVERHEAD_S: f64 = 0.002;

/// What the node decided for one broadcast size, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct StripePlan {
    /// One route per tree, (sender, receiver) edges from this node over every member the
    /// view holds; a single route when one tree is predicted faster.
    pub routes: Vec<Vec<(NodeId, NodeId)>>,
    /// Each route's share of the payload (its rate in the packing), bits per second.
    pub rates_bps: Vec<f64>,
    /// The cluster trees behind the routes (parent cluster of each cluster).
    pub trees: Vec<Arborescence>,
    /// The name (smallest member) of each cluster the trees' indices refer to.
    pub clusters: Vec<NodeId>,
    /// Predicted completion with the stripes and with the widest single tree, seconds.
    pub striped_s: f64,
    pub single_s: f64,
    /// From which size striping is predicted faster (None: never, up to 1 GiB).
    pub crossover_bytes: Option<u64>,
    /// The max-flow bound from this node's cluster as measured, bits per second.
    pub bound_bps: f64,
    /// The fanout inside each cluster (1: a chain), as the model chose it.
    pub fanouts: Vec<usize>,
    /// Per route, the round trip a part spends on top of its bytes, seconds: down the
    /// tree's depth and its report back up (twice the depth latency in the model).
    pub delays_s: Vec<f64>,
}

impl StripePlan {
    /// Whether the plan stripes (more than one tree).
    pub fn striped(&self) -> bool {
        self.routes.len() > 1
    }
}

impl Core {
    /// The plan for a broadcast of `len` bytes from this node, if the measured model is
    /// complete enough to plan with (every discovered cluster pair has an estimate): the
    /// stripes when they are predicted faster than the widest single tree, else that tree.
    pub fn stripe_plan(&self, len: u64) -> Option<StripePlan> {
        self.plan_broadcast(len, false)
    }

    /// [`Core::stripe_plan`] striped over every packed tree whatever the model predicts
    /// (for comparison).
    pub fn stripe_plan_forced(&self, len: u64) -> Option<StripePlan> {
        self.plan_broadcast(len, true)
    }

    fn plan_broadcast(&self, len: u64, force: bool) -> Option<StripePlan> {
        let view = self.bandwidth_view();
        if view.clusters.len() < 2 || !view.complete() {
            return None;
        }
        let members = &self.members;
        let clusters: Vec<Vec<NodeId>> = view
            .clusters
            .iter()
            .map(|c| {
                c.iter()
                    .copied()
                    .filter(|n| *n == self.id || members.is_alive(n))
                    .collect()
            })
            .collect();
        let rc = view.cluster_of(&self.id)?;
        let graph = ClusterGraph {
            cap_bps: view.capacities(),
            latency_us: view.latency_us.clone(),
        };
        let trees = stripe::pack(&graph, rc, MAX_TREES);
        let widest = stripe::widest_tree(&graph, rc)?;
        if trees.is_empty() {
            return None;
        }
        let mut trees = trees;
        trees.sort_by(|a, b| b.rate_bps.total_cmp(&a.rate_bps));
        // One tree: the best for the size among the shallowest and the widest and those
        // between (`single_trees`).
        let mut singles = stripe::single_trees(&graph, rc);
        if singles.is_empty() {
            singles.push(widest);
        }
        let best_single = |m: u64| {
            (singles.iter())
                .map(|t| (t, stripe::predict_tree_s(&graph, t, m, SEGMENT, OVERHEAD_S)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(t, s)| (t.clone(), s))
        };
        let single = |m: u64| best_single(m).map_or(f64::INFINITY, |(_, s)| s);
        // The fastest trees only, as many as pay for themselves: every extra tree costs its
        // own control message and streams, and a slow deep one carries little of a
        // payload that the others finish soon (see `predict_striped_s`).
        let with = |k: usize, m: u64| {
            stripe::predict_striped_s(&graph, &trees[..k], m, SEGMENT, OVERHEAD_S)
                + OVERHEAD_S * (k - 1) as f64
        };
        // Two trees at least: one is the widest single tree's business (a packing's first
        // tree alone differs from it only by the model's rounding, which once made
        // "striping" look faster at 1 KiB).
        let best = |m: u64| {
            (2..=trees.len())
                .map(|k| (k, with(k, m)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((1, f64::INFINITY))
        };
        let multi = |m: u64| best(m).1;
        let (used, striped_s) = if force || trees.len() < 2 {
            (trees.len(), with(trees.len(), len))
        } else {
            best(len)
        };
        let single_s = single(len);
        let crossover_bytes = stripe::crossover_bytes(single, multi, 1024, 1 << 30);
        let chosen = if force || (used > 1 && striped_s < single_s) {
            trees[..used].to_vec()
        } else {
            vec![best_single(len).map_or(singles[0].clone(), |(t, _)| t)]
        };
        // Inside each cluster: a chain or a wider tree, as its measured rate says.
        let inside: Vec<stripe::Inside> = (0..clusters.len())
            .map(|c| stripe::Inside {
                bps: view.bps(c, c),
                latency_us: graph.latency(c, c),
            })
            .collect();
        let fanouts =
            stripe::choose_fanouts(self.id, &clusters, rc, &chosen, &inside, len, SEGMENT);
        let fanout = |c: usize| {
            fanouts
                .get(c)
                .copied()
                .unwrap_or(stripe::fanout::UNMEASURED)
        };
        let delays_s = (chosen.iter())
            .map(|t| 2.0 * t.depth_latency_us(&graph) as f64 * 1e-6)
            .collect();
        let routes = stripe::node_routes_with(self.id, &clusters, rc, &chosen, &fanout)
            .into_iter()
            .map(|r| r.edges)
            .collect();
        Some(StripePlan {
            routes,
            rates_bps: chosen.iter().map(|t| t.rate_bps).collect(),
            trees: chosen,
            clusters: view
                .clusters
                .iter()
                .map(|c| c.iter().copied().min().unwrap_or(self.id))
                .collect(),
            striped_s,
            single_s,
            crossover_bytes,
            bound_bps: stripe::max_flow_bound(&graph, rc),
            fanouts,
            delays_s,
        })
    }
}
