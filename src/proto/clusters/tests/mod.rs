//! Hand-built latency layouts: the hierarchy ([`hierarchy`]), the summaries and the
//! table's exchange ([`exchange`]).

mod exchange;
mod hierarchy;

use super::*;
use crate::proto::rng::SplitMix64;

pub(super) fn ids(n: usize) -> Vec<NodeId> {
    (0..n).map(|i| NodeId::from_seed(99, i as u64)).collect()
}

/// A layout: the cluster of every node and the RTT between two nodes.
pub(super) struct Layout {
    cluster: Vec<usize>,
    rtt_us: Box<dyn Fn(usize, usize) -> u32>,
}

impl Layout {
    /// `sizes[c]` nodes in cluster c; `inside_us` between two nodes of a cluster;
    /// `between(a, b)` between clusters a and b.
    pub(super) fn new(
        sizes: &[usize],
        inside_us: u32,
        between: impl Fn(usize, usize) -> u32 + 'static,
    ) -> Self {
        let cluster: Vec<usize> = sizes
            .iter()
            .enumerate()
            .flat_map(|(c, n)| std::iter::repeat_n(c, *n))
            .collect();
        let of = cluster.clone();
        Layout {
            cluster,
            rtt_us: Box::new(move |i, j| {
                if of[i] == of[j] {
                    inside_us
                } else {
                    between(of[i], of[j])
                }
            }),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.cluster.len()
    }

    /// Every pair, as a node with the full matrix would see it.
    pub(super) fn all_edges(&self, ids: &[NodeId]) -> Vec<(NodeId, NodeId, u32)> {
        let n = self.len();
        let mut out = Vec::new();
        for i in 0..n {
            for j in i + 1..n {
                out.push((ids[i], ids[j], (self.rtt_us)(i, j)));
            }
        }
        out
    }

    /// The union of every node's published summary, each node's row measured with `noise`
    /// (each estimate multiplied by 1 + up to `noise`).
    pub(super) fn published_edges(
        &self,
        ids: &[NodeId],
        noise: f64,
        seed: u64,
    ) -> Vec<(NodeId, NodeId, u32)> {
        let mut rng = SplitMix64::new(seed);
        let params = ClusterParams::default();
        let mut out = Vec::new();
        for i in 0..self.len() {
            let row: Vec<(NodeId, u32)> = (0..self.len())
                .filter(|&j| j != i)
                .map(|j| {
                    let r = (self.rtt_us)(i, j) as f64 * (1.0 + noise * rng.unit());
                    (ids[j], r as u32)
                })
                .collect();
            for e in summary::choose(&row, &[], &params) {
                out.push((ids[i], e.peer, e.rtt_us));
            }
        }
        out
    }

    /// The expected partition: nodes grouped by `key(cluster)`.
    pub(super) fn partition(
        &self,
        ids: &[NodeId],
        key: impl Fn(usize) -> usize,
    ) -> Vec<Vec<NodeId>> {
        let mut map: std::collections::BTreeMap<usize, Vec<NodeId>> = Default::default();
        for (i, c) in self.cluster.iter().enumerate() {
            map.entry(key(*c)).or_default().push(ids[i]);
        }
        let mut p: Vec<Vec<NodeId>> = map
            .into_values()
            .map(|mut v| {
                v.sort();
                v
            })
            .collect();
        p.sort();
        p
    }
}

/// DAS-4 (Kielmann et al., Table 2): clusters of 16, 8, 8, 8; RTT = twice the one-way.
pub(super) fn das4() -> Layout {
    let one_way_ms = [
        [0.0, 3.5, 1.5, 2.5],
        [3.5, 0.0, 3.0, 4.0],
        [1.5, 3.0, 0.0, 2.0],
        [2.5, 4.0, 2.0, 0.0],
    ];
    Layout::new(&[16, 8, 8, 8], 40, move |a, b| {
        (one_way_ms[a][b] * 2000.0) as u32
    })
}

/// sites-64: 8 clusters of 8 in 4 sites (clusters 2k and 2k+1 share site k).
pub(super) fn sites64() -> Layout {
    let site_ms = [
        [1.0, 28.0, 29.0, 38.0],
        [28.0, 1.0, 2.5, 10.0],
        [29.0, 2.5, 1.0, 11.0],
        [38.0, 10.0, 11.0, 1.0],
    ];
    Layout::new(&[8; 8], 100, move |a, b| {
        (site_ms[a / 2][b / 2] * 2000.0) as u32
    })
}
