//! How this node would send a broadcast of a given size now, and why.

use super::*;

/// How this node would send a broadcast of a given size now, and why: the trees packed
/// over the cluster bandwidths it measured, each tree's rate, and the model's predictions
/// ([`crate::api::Node::broadcast_plan`]). Clusters are named by their smallest member, as
/// in [`ClusterBandwidth`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BroadcastPlan {
    /// The payload size planned for.
    pub bytes: u64,
    /// Whether the payload is striped over several trees (else one tree carries it).
    pub striped: bool,
    /// The trees, each with the rate it is planned to carry.
    pub trees: Vec<PlannedTree>,
    /// Predicted completion striped and over the widest single tree, seconds.
    pub striped_s: f64,
    pub single_s: f64,
    /// From which size striping is predicted faster (`None`: never, up to 1 GiB).
    pub crossover_bytes: Option<u64>,
    /// The max-flow bound from this node's cluster over the measured links, Mbit/s.
    pub bound_mbit: f64,
    /// Per cluster (by name), the fanout inside it: 1 is a pipelined chain, more a wider
    /// tree; the model picks it from the cluster's measured in-cluster rate.
    pub fanouts: Vec<(NodeId, usize)>,
}

/// One tree of a [`BroadcastPlan`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedTree {
    /// The rate the packing gives this tree, Mbit/s.
    pub mbit: f64,
    /// Its cluster edges, (parent cluster, child cluster), from the root's cluster down.
    pub edges: Vec<(NodeId, NodeId)>,
}

impl BroadcastPlan {
    /// The plan of the node's core for `bytes`.
    pub(crate) fn new(bytes: u64, plan: &crate::proto::StripePlan) -> Self {
        let label = |c: usize| plan.clusters.get(c).copied();
        let trees = plan
            .trees
            .iter()
            .map(|t| {
                let mut edges: Vec<(usize, usize)> = t
                    .parent
                    .iter()
                    .enumerate()
                    .filter_map(|(c, p)| Some(((*p)?, c)))
                    .collect();
                // Parents before children: by depth from the root.
                let depth = |mut c: usize| {
                    let mut d = 0;
                    while let Some(p) = t.parent.get(c).copied().flatten() {
                        c = p;
                        d += 1;
                        if d > t.parent.len() {
                            break;
                        }
                    }
                    d
                };
                edges.sort_by_key(|&(p, c)| (depth(c), p, c));
                PlannedTree {
                    mbit: t.rate_bps / 1e6,
                    edges: edges
                        .into_iter()
                        .filter_map(|(p, c)| Some((label(p)?, label(c)?)))
                        .collect(),
                }
            })
            .collect();
        BroadcastPlan {
            bytes,
            striped: plan.striped(),
            trees,
            striped_s: plan.striped_s,
            single_s: plan.single_s,
            crossover_bytes: plan.crossover_bytes,
            bound_mbit: plan.bound_bps / 1e6,
            fanouts: (plan.fanouts.iter().enumerate())
                .filter_map(|(c, k)| Some((label(c)?, *k)))
                .collect(),
        }
    }
}
