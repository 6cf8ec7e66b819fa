//! The rate a broadcast can reach on a topology's bandwidths: the bound `bench large`
//! measures the data plane against.
//!
//! The model is the emulated socket's ([`crate::net::emulated`]): a hop from a node of
//! cluster A to a node of cluster B passes A's NIC (A's per-node `bandwidth_mbit`) and, if
//! A and B differ, the directed link A -> B, so it can carry at most the smaller of the two
//! ([`hop_mbit`]). A broadcast along one tree carries every byte over every tree edge, so
//! it is no faster than the tree's narrowest edge. The best single tree from a root is the
//! widest-path tree: each cluster reached along the path whose narrowest hop is widest
//! (maximin), and the broadcast rate is the narrowest of those paths over all clusters,
//! including the last hop inside a cluster of more than one node ([`best_tree`]).
//!
//! Not counted: a relay that sends to several children shares its NIC between them, and
//! several trees used at once could beat a single one. On das-4 the NICs (400 Mbit/s) are an
//! order of magnitude above the inter-cluster links (3-28 Mbit/s), so the first does not
//! bind; the overlay uses one tree per root, so the second is not what it is measured
//! against.

use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// A bound on the broadcast rate and where it binds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bound {
    /// The rate, Mbit/s (infinite if no hop has a bandwidth).
    pub mbit: f64,
    /// The cluster reached through the narrowest hop (the root's, if nothing limits).
    pub cluster: usize,
}

/// Capacity of one hop from a node of cluster `from` to a node of cluster `to`, Mbit/s:
/// the sender's NIC and, between clusters, the link; infinite where the file gives none.
///
/// # Panics
/// If either index is not a cluster of `topo`.
pub fn hop_mbit(topo: &Topology, from: usize, to: usize) -> f64 {
    let nic = topo.clusters[from].bandwidth_mbit.unwrap_or(f64::INFINITY);
    if from == to {
        return nic;
    }
    nic.min(topo.bandwidth_mbit(from, to).unwrap_or(f64::INFINITY))
}

/// For every cluster, the widest path's narrowest hop from `root` (infinite for `root`;
/// empty if `root` is not a cluster of `topo`).
pub fn widest_paths(topo: &Topology, root: usize) -> Vec<f64> {
    let n = topo.clusters.len();
    if root >= n {
        return Vec::new();
    }
    // Dijkstra with max-min in place of plus-min: n is a handful of clusters, so the
    // quadratic scan is simpler than a heap and just as fast.
    let mut width = vec![0.0f64; n];
    let mut done = vec![false; n];
    width[root] = f64::INFINITY;
    for _ in 0..n {
        let Some(u) = (0..n)
            .filter(|&u| !done[u])
            .max_by(|&a, &b| width[a].total_cmp(&width[b]))
        else {
            break;
        };
        done[u] = true;
        for v in (0..n).filter(|&v| !done[v]) {
            width[v] = width[v].max(width[u].min(hop_mbit(topo, u, v)));
        }
    }
    width
}

/// The rate of the best single broadcast tree from a node of cluster `root` to every node
/// of `topo` (see the module documentation), and the cluster where it binds.
pub fn best_tree(topo: &Topology, root: usize) -> Bound {
    let width = widest_paths(topo, root);
    let mut bound = Bound {
        mbit: f64::INFINITY,
        cluster: root,
    };
    for (c, w) in width.iter().enumerate() {
        let nodes = topo.clusters[c].nodes;
        // The root's own cluster is entered by no hop; its other nodes by NIC hops.
        let entry = if c == root || nodes == 0 {
            f64::INFINITY
        } else {
            *w
        };
        let inside = if nodes > 1 {
            hop_mbit(topo, c, c)
        } else {
            f64::INFINITY
        };
        let rate = entry.min(inside);
        if rate < bound.mbit {
            bound = Bound {
                mbit: rate,
                cluster: c,
            };
        }
    }
    bound
}

/// The rate of a given tree: the narrowest of its `edges`, each (parent's cluster, child's
/// cluster); `root` is reported as the binding cluster when no edge limits.
pub fn tree_rate(topo: &Topology, root: usize, edges: &[(usize, usize)]) -> Bound {
    let n = topo.clusters.len();
    let mut bound = Bound {
        mbit: f64::INFINITY,
        cluster: root,
    };
    for &(from, to) in edges.iter().filter(|(f, t)| *f < n && *t < n) {
        let rate = hop_mbit(topo, from, to);
        if rate < bound.mbit {
            bound = Bound {
                mbit: rate,
                cluster: to,
            };
        }
    }
    bound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn das4() -> Topology {
        Topology::builtin("das-4").unwrap()
    }

    fn idx(t: &Topology, name: &str) -> usize {
        t.cluster_index(name).unwrap()
    }

    #[test]
    fn das4_from_vu_is_bound_by_the_path_to_leiden_through_uva() {
        let t = das4();
        let (vu, leiden, uva, delft) = (
            idx(&t, "VU"),
            idx(&t, "Leiden"),
            idx(&t, "UvA"),
            idx(&t, "Delft"),
        );
        let w = widest_paths(&t, vu);
        // VU -> UvA (26) beats nothing; Leiden: direct 5, via UvA min(26, 6) = 6;
        // Delft: direct 7, via UvA min(26, 7.5) = 7.5.
        assert_eq!(w[uva], 26.0);
        assert_eq!(w[leiden], 6.0);
        assert_eq!(w[delft], 7.5);
        assert_eq!(w[vu], f64::INFINITY);
        assert_eq!(
            best_tree(&t, vu),
            Bound {
                mbit: 6.0,
                cluster: leiden
            }
        );
        // The latency tree goes straight from VU to every cluster: Leiden's 5 Mbit/s binds.
        let direct = [(vu, vu), (vu, leiden), (vu, uva), (vu, delft)];
        assert_eq!(
            tree_rate(&t, vu, &direct),
            Bound {
                mbit: 5.0,
                cluster: leiden
            }
        );
    }

    #[test]
    fn nics_bind_inside_clusters_and_missing_figures_are_unlimited() {
        let text = r#"
name = "t"
source = "test"
[[cluster]]
name = "A"
nodes = 3
latency_ms = 1
bandwidth_mbit = 2
[[cluster]]
name = "B"
nodes = 1
latency_ms = 1
[[link]]
from = "A"
to = "B"
latency_ms = 5
"#;
        let t = Topology::parse(text, "t").unwrap();
        assert_eq!(
            hop_mbit(&t, 0, 1),
            2.0,
            "A's NIC limits the link without a figure"
        );
        assert_eq!(
            hop_mbit(&t, 1, 0),
            f64::INFINITY,
            "B has no NIC figure, the link none"
        );
        assert_eq!(
            best_tree(&t, 0),
            Bound {
                mbit: 2.0,
                cluster: 0
            }
        );
        // From B: one unlimited hop into A, then A's NICs.
        assert_eq!(
            best_tree(&t, 1),
            Bound {
                mbit: 2.0,
                cluster: 0
            }
        );
        assert_eq!(tree_rate(&t, 1, &[]).mbit, f64::INFINITY);
        assert!(
            widest_paths(&t, 7).is_empty(),
            "bad root: nothing, no panic"
        );
        assert_eq!(
            tree_rate(&t, 0, &[(9, 0)]).mbit,
            f64::INFINITY,
            "bad edge ignored"
        );
    }
}
