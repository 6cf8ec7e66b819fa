//! Striping large broadcasts over several spanning trees: a pure planner.
//!
//! One tree carries a broadcast at the rate of its narrowest wide-area link. Edmonds'
//! branching theorem says more is possible: a root can reach every cluster at the minimum,
//! over the receiving clusters, of the maximum flow from the root to that cluster, by
//! packing (fractionally) spanning arborescences rooted at the root's cluster and sending
//! to each a share of the data in proportion to the rate it is given. On asymmetric
//! wide-area links (DAS-4 style) that bound is often several times the widest single tree.
//!
//! The planner works on a [`ClusterGraph`] (what a node measured between clusters):
//! - [`pack()`] computes the bound ([`max_flow_bound`]), the widest single tree
//!   ([`widest_tree`]) and a packing of at most a given number of trees ([`pack()`]);
//! - [`route`] turns each cluster tree into a node-level [`Route`] (entry nodes rotated per
//!   stripe so the forwarding work is spread), with the in-cluster fanout [`fanout`]
//!   picks per cluster (a chain where members forward slowly, a wider tree on a fast LAN);
//! - [`model`] predicts, with a P-LogP-style cost model, how long one tree or the stripes
//!   take, and from which size striping pays off ([`crossover_bytes`]).
//!
//! Sans-IO: no clock, no randomness, no I/O, and no panics on any input (empty graphs,
//! NaN or negative capacities, unreachable clusters, a single cluster).

mod algo;
pub mod fanout;
mod lp;
pub mod model;
pub mod pack;
pub mod route;

#[cfg(test)]
mod tests;

pub use self::fanout::{Inside, choose_fanouts};
pub use self::model::{crossover_bytes, gap_s, predict_striped_s, predict_tree_s};
pub use self::pack::{max_flow_bound, min_arborescence, pack, single_trees, widest_tree};
pub use self::route::{Route, node_routes, node_routes_with};

/// Directed cluster-level graph as a node measured it. Index i is a cluster.
///
/// Kept as plain matrices so that a measurement (or a topology file) maps onto it directly;
/// the accessors below read it defensively, so a ragged or partly invalid matrix is fine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterGraph {
    /// Achievable bandwidth from cluster i to cluster j, bits per second; 0 (or not finite) = unknown / no link. Diagonal ignored.
    pub cap_bps: Vec<Vec<f64>>,
    /// One-way latency from i to j, microseconds.
    pub latency_us: Vec<Vec<u32>>,
}

impl ClusterGraph {
    /// Number of clusters (rows of the capacity matrix), the size every plan is made for.
    pub fn n(&self) -> usize {
        self.cap_bps.len()
    }

    /// Usable capacity from `i` to `j`: the measured value if it is finite and positive,
    /// else 0 (no link), so that NaN, negative or missing entries never reach the solvers.
    pub fn cap(&self, i: usize, j: usize) -> f64 {
        if i == j || j >= self.n() {
            return 0.0;
        }
        match self.cap_bps.get(i).and_then(|row| row.get(j)) {
            Some(&c) if c.is_finite() && c > 0.0 => c,
            _ => 0.0,
        }
    }

    /// One-way latency from `i` to `j` in microseconds; 0 where the matrix has no entry, so
    /// a missing measurement never makes a prediction fail.
    pub fn latency(&self, i: usize, j: usize) -> u32 {
        self.latency_us
            .get(i)
            .and_then(|row| row.get(j))
            .copied()
            .unwrap_or(0)
    }

    /// The sanitized capacity matrix (`cap(i, j)` for every pair): what the solvers work on.
    pub fn cap_matrix(&self) -> Vec<Vec<f64>> {
        let n = self.n();
        (0..n)
            .map(|i| (0..n).map(|j| self.cap(i, j)).collect())
            .collect()
    }
}

/// A spanning arborescence over clusters, rooted at the root's cluster, and the rate the packing gives it.
///
/// `parent[c]` is the cluster `c` receives from; the root (and only it) has `None`.
#[derive(Clone, Debug, PartialEq)]
pub struct Arborescence {
    /// The parent cluster of every cluster; `None` for the root.
    pub parent: Vec<Option<usize>>,
    /// The rate this tree carries, bits per second.
    pub rate_bps: f64,
}

impl Arborescence {
    /// Number of clusters the tree spans.
    pub fn n(&self) -> usize {
        self.parent.len()
    }

    /// The root cluster (the first cluster without a parent), if any.
    pub fn root(&self) -> Option<usize> {
        self.parent.iter().position(|p| p.is_none())
    }

    /// Clusters that receive from `i` in this tree, in index order (what `i` forwards to).
    pub fn children(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.parent
            .iter()
            .enumerate()
            .filter(move |&(c, p)| *p == Some(i) && c != i)
            .map(|(c, _)| c)
    }

    /// The arcs `(parent, child)` of the tree: what the packing charges capacity for.
    pub fn arcs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.parent
            .iter()
            .enumerate()
            .filter_map(|(c, p)| p.map(|p| (p, c)))
    }

    /// The path from `c` up to the root as arcs `(parent, child)`, or `None` if `c` does
    /// not reach a root (a malformed tree: cycle or out-of-range parent).
    fn path_to_root(&self, c: usize) -> Option<Vec<(usize, usize)>> {
        let mut path = Vec::new();
        let mut at = c;
        while let Some(p) = *self.parent.get(at)? {
            if p >= self.n() || path.len() >= self.n() {
                return None;
            }
            path.push((p, at));
            at = p;
        }
        Some(path)
    }

    /// Largest, over clusters, sum of one-way latencies along the path from the root: when
    /// the last cluster hears the first byte. Clusters a malformed tree does not connect
    /// are skipped.
    pub fn depth_latency_us(&self, graph: &ClusterGraph) -> u64 {
        (0..self.n())
            .filter_map(|c| self.path_to_root(c))
            .map(|path| {
                path.iter()
                    .map(|&(p, c)| u64::from(graph.latency(p, c)))
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0)
    }

    /// Largest depth in arcs: how many wide-area hops a segment makes, which sets the
    /// pipeline fill time.
    pub fn hops(&self) -> usize {
        (0..self.n())
            .filter_map(|c| self.path_to_root(c))
            .map(|p| p.len())
            .max()
            .unwrap_or(0)
    }
}
