//! The max-flow bound of a topology file: what a broadcast from one cluster, striped over
//! packed trees, can carry at most. For reporting only (benchmarks and the netns testbed
//! print shares of it); nodes never read bandwidth from a file, they measure it.

use crate::proto::stripe::{ClusterGraph, max_flow_bound};
use crate::topology::Topology;

/// The max-flow bound from cluster `root` over the file's cluster-to-cluster bandwidths,
/// Mbit/s: the minimum over the other clusters of the max flow from `root` to each
/// (Edmonds: packed arborescences reach it). 0 if `root` is out of range.
///
/// ```
/// use overlay::sim::max_flow_mbit;
/// use overlay::topology::Topology;
/// let das4 = Topology::load("topologies/das-4.toml").unwrap();
/// assert!((max_flow_mbit(&das4, 0) - 15.5).abs() < 1e-6);
/// ```
pub fn max_flow_mbit(topo: &Topology, root: usize) -> f64 {
    let n = topo.clusters.len();
    let cap_bps = (0..n)
        .map(|a| {
            (0..n)
                .map(|b| topo.bandwidth_mbit(a, b).unwrap_or(0.0) * 1e6)
                .collect()
        })
        .collect();
    let latency_us = (0..n)
        .map(|a| {
            (0..n)
                .map(|b| topo.latency(a, b).as_micros() as u32)
                .collect()
        })
        .collect();
    max_flow_bound(
        &ClusterGraph {
            cap_bps,
            latency_us,
        },
        root,
    ) / 1e6
}
