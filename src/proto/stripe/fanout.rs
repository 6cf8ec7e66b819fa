//! How wide the tree inside each cluster is: a pipelined chain or a wider, shallower tree,
//! as the model says.
//!
//! Inside a cluster the entry of a stripe feeds the other members through a tree of some
//! fanout k (k = 1 is a chain). A wider tree reaches everyone in fewer hops, but each of
//! its forwarders sends k copies: on a fast LAN that costs nothing, on a slow one it makes
//! the forwarders' NICs the bottleneck of the whole broadcast. For each cluster and each
//! k the model takes the routes that fanout gives, adds up what every member of the
//! cluster would send (its wide-area and in-cluster children, every stripe at its rate),
//! and predicts: the hops to the deepest member, each a segment at the member's share of
//! its measured rate plus the in-cluster latency, and the payload streamed at the planned
//! rate slowed by the most loaded member's excess over [`HEADROOM`] of its rate. The
//! smallest prediction wins; a cluster with no in-cluster measurement keeps
//! [`UNMEASURED`].

use super::Arborescence;
use super::route::node_routes_with;
use crate::proto::id::NodeId;
use std::collections::HashMap;

/// The widest tree considered inside a cluster.
pub const MAX_FANOUT: usize = 4;
/// The fanout of a cluster whose in-cluster rate is not measured.
pub const UNMEASURED: usize = 2;
/// Share of a member's measured rate the plan loads it to: a forwarder near its line rate
/// queues, and a LAN's short train can read high on a busy machine (the station's 50
/// Mbit/s read 80.7 once, which made a fan-out of 2 look as if it fitted).
pub const HEADROOM: f64 = 0.8;

/// What the model knows of one cluster's inside.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Inside {
    /// What one member sends another, bits per second (`None`: not measured).
    pub bps: Option<f64>,
    /// One-way latency between two members, microseconds.
    pub latency_us: u32,
}

/// The fanout per cluster (index as in `clusters`) for striping `bytes` over `trees` from
/// `root`, in segments of `segment` bytes; see the module documentation.
pub fn choose_fanouts(
    root: NodeId,
    clusters: &[Vec<NodeId>],
    root_cluster: usize,
    trees: &[Arborescence],
    inside: &[Inside],
    bytes: u64,
    segment: u64,
) -> Vec<usize> {
    (0..clusters.len())
        .map(|c| {
            let Some(Inside {
                bps: Some(cap),
                latency_us,
            }) = inside.get(c).copied()
            else {
                return UNMEASURED;
            };
            if !(cap.is_finite() && cap > 0.0) || clusters[c].len() < 3 {
                // Two members: every fanout is the same single edge.
                return UNMEASURED;
            }
            (1..=MAX_FANOUT)
                .map(|k| {
                    let cost = predict_inside_s(
                        root,
                        clusters,
                        root_cluster,
                        trees,
                        c,
                        k,
                        (cap, latency_us),
                        (bytes, segment),
                    );
                    (k, cost)
                })
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map_or(UNMEASURED, |(k, _)| k)
        })
        .collect()
}

/// Predicted time cluster `c` adds with fanout `k`, seconds (see the module docs).
#[allow(clippy::too_many_arguments)]
fn predict_inside_s(
    root: NodeId,
    clusters: &[Vec<NodeId>],
    root_cluster: usize,
    trees: &[Arborescence],
    c: usize,
    k: usize,
    (cap, latency_us): (f64, u32),
    (bytes, segment): (u64, u64),
) -> f64 {
    let routes = node_routes_with(root, clusters, root_cluster, trees, &|x| {
        if x == c { k } else { 1 }
    });
    let mine: std::collections::HashSet<NodeId> = clusters[c].iter().copied().collect();
    let is_mine = |n: &NodeId| mine.contains(n);
    let mut sends: HashMap<NodeId, f64> = HashMap::new();
    let mut depth = 0usize;
    let mut total_rate = 0.0;
    for (route, tree) in routes.iter().zip(trees) {
        let rate = tree.rate_bps.max(0.0);
        total_rate += rate;
        let mut parent: HashMap<NodeId, NodeId> = HashMap::new();
        for (from, to) in &route.edges {
            if is_mine(from) && from != to {
                *sends.entry(*from).or_default() += rate;
                parent.insert(*to, *from);
            }
        }
        // Hops inside the cluster from its entry to its deepest member.
        for n in mine.iter() {
            let mut hops = 0;
            let mut at = *n;
            while let Some(&p) = parent.get(&at).filter(|p| is_mine(p)) {
                hops += 1;
                at = p;
                if hops > mine.len() {
                    break;
                }
            }
            depth = depth.max(hops);
        }
    }
    let load = sends.values().fold(0.0, |a: f64, b| a.max(*b)) / (cap * HEADROOM);
    let slow = load.max(1.0);
    let per_hop = latency_us as f64 * 1e-6 + segment as f64 * 8.0 * k as f64 / cap;
    let stream = if total_rate > 0.0 {
        bytes as f64 * 8.0 * slow / total_rate
    } else {
        0.0
    };
    depth as f64 * per_hop + stream
}
