//! The cluster-level bandwidth matrix every node builds from the published figures.
//!
//! Each node publishes, in its cluster summary, what it measured arriving from a few peers
//! (packet trains and real transfers, see the core's `bandwidth` part). Every node holds
//! every summary, so every node can aggregate the figures by discovered cluster: for the
//! directed pair (A, B), the median of what members of B measured from members of A.
//! Links are directed because wide-area links are often asymmetric. Each entry says how
//! many figures it rests on and how old the newest is, and the latency of the pair comes
//! from the published RTTs (half the smallest RTT between the two clusters): together the
//! two make the P-LogP-style model (latency L, gap g(m) = m / bandwidth) planning uses.

use crate::proto::clusters::ClusterView;
use crate::proto::id::{IdMap, NodeId};
use crate::proto::message::{BandwidthEdge, ClusterEdge};
use crate::proto::time::Time;
use std::time::Duration;

/// One directed cluster-to-cluster estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterLink {
    /// Index of the sending cluster in [`BandwidthView::clusters`].
    pub from: usize,
    /// Index of the receiving cluster.
    pub to: usize,
    /// The median of the figures, bits per second.
    pub bps: f64,
    /// How many figures (one per measuring node and peer) it rests on.
    pub figures: u32,
    /// How long ago the newest of them reached this node.
    pub age: Duration,
}

/// The discovered clusters and the bandwidth and latency between them, as this node sees
/// them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BandwidthView {
    /// The level-1 clusters: each one's sorted members (the first names it).
    pub clusters: Vec<Vec<NodeId>>,
    /// Directed estimates, one per pair measured (inside a cluster too, `from == to`).
    pub links: Vec<ClusterLink>,
    /// One-way latency between clusters in microseconds (`latency_us[a][b]`), half the
    /// smallest published RTT between their members; 0 where none is published.
    pub latency_us: Vec<Vec<u32>>,
}

impl BandwidthView {
    /// Builds the view from the groups, the published bandwidth figures (who measured,
    /// what, when it arrived) and the published latencies, at `now`.
    pub fn build<'a>(
        view: &ClusterView,
        figures: impl Iterator<Item = (NodeId, &'a [BandwidthEdge], Time)>,
        rtts: impl Iterator<Item = (NodeId, &'a ClusterEdge)>,
        now: Time,
    ) -> Self {
        let clusters = view.partition(1);
        let n = clusters.len();
        let mut index: IdMap<NodeId, usize> = IdMap::default();
        for (i, c) in clusters.iter().enumerate() {
            for m in c {
                index.insert(*m, i);
            }
        }
        let mut samples: Vec<Vec<(Vec<f64>, Option<Time>)>> = vec![vec![(Vec::new(), None); n]; n];
        for (to_node, edges, at) in figures {
            let Some(&b) = index.get(&to_node) else {
                continue;
            };
            for e in edges {
                let Some(&a) = index.get(&e.from) else {
                    continue;
                };
                let cell = &mut samples[a][b];
                cell.0.push(e.kbps as f64 * 1e3);
                cell.1 = Some(cell.1.map_or(at, |t: Time| t.max(at)));
            }
        }
        let mut latency_us = vec![vec![0u32; n]; n];
        for (x, e) in rtts {
            let (Some(&a), Some(&b)) = (index.get(&x), index.get(&e.peer)) else {
                continue;
            };
            let one_way = (e.rtt_us / 2).max(1);
            for (i, j) in [(a, b), (b, a)] {
                let cell = &mut latency_us[i][j];
                *cell = if *cell == 0 {
                    one_way
                } else {
                    (*cell).min(one_way)
                };
            }
        }
        let mut links = Vec::new();
        for (a, row) in samples.iter_mut().enumerate() {
            for (b, (vals, at)) in row.iter_mut().enumerate() {
                if vals.is_empty() {
                    continue;
                }
                vals.sort_by(f64::total_cmp);
                links.push(ClusterLink {
                    from: a,
                    to: b,
                    bps: median(vals),
                    figures: vals.len() as u32,
                    age: at.map_or(Duration::ZERO, |t| now.saturating_since(t)),
                });
            }
        }
        BandwidthView {
            clusters,
            links,
            latency_us,
        }
    }

    /// The estimate from cluster `a` to cluster `b`, bits per second.
    pub fn bps(&self, a: usize, b: usize) -> Option<f64> {
        self.links
            .iter()
            .find(|l| l.from == a && l.to == b)
            .map(|l| l.bps)
    }

    /// The index of the cluster holding `id`.
    pub fn cluster_of(&self, id: &NodeId) -> Option<usize> {
        self.clusters
            .iter()
            .position(|c| c.binary_search(id).is_ok())
    }

    /// Whether every directed pair of distinct clusters has an estimate (planning over
    /// several clusters needs the whole matrix).
    pub fn complete(&self) -> bool {
        let n = self.clusters.len();
        (0..n).all(|a| (0..n).all(|b| a == b || self.bps(a, b).is_some()))
    }

    /// The capacity matrix (`cap_bps[a][b]`, 0 where unknown) for planning.
    pub fn capacities(&self) -> Vec<Vec<f64>> {
        let n = self.clusters.len();
        let mut cap = vec![vec![0.0; n]; n];
        for l in &self.links {
            if l.from != l.to {
                cap[l.from][l.to] = l.bps;
            }
        }
        cap
    }
}

/// The median of sorted, non-empty `vals`; of an even count, the mean of the middle two, so
/// that one figure read high (or low) of two moves the result half as far.
pub(crate) fn median(vals: &[f64]) -> f64 {
    let n = vals.len();
    if n % 2 == 1 {
        vals[n / 2]
    } else {
        (vals[n / 2 - 1] + vals[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::clusters::Group;

    fn id(i: u8) -> NodeId {
        NodeId([i; 16])
    }

    fn two_clusters() -> ClusterView {
        let g = |m: Vec<NodeId>| {
            std::sync::Arc::new(Group {
                label: m[0],
                members: m,
                rtt_us: Some(100),
            })
        };
        ClusterView {
            levels: vec![vec![g(vec![id(1), id(2)]), g(vec![id(3), id(4)])]],
        }
    }

    #[test]
    fn figures_are_aggregated_per_directed_cluster_pair_by_their_median() {
        let e = |from, kbps| BandwidthEdge {
            from,
            kbps,
            samples: 1,
        };
        let at3 = [e(id(1), 5_000), e(id(2), 7_000)];
        let at4 = [e(id(1), 6_000)];
        let at1 = [e(id(3), 3_000)];
        let t = |s: u64| Time::from_micros(s * 1_000_000);
        let figures = vec![
            (id(3), &at3[..], t(1)),
            (id(4), &at4[..], t(2)),
            (id(1), &at1[..], t(3)),
        ];
        let rtt = ClusterEdge {
            peer: id(3),
            rtt_us: 7_000,
        };
        let rtts = vec![(id(1), &rtt)];
        let v = BandwidthView::build(
            &two_clusters(),
            figures.into_iter(),
            rtts.into_iter(),
            t(10),
        );
        assert_eq!(v.bps(0, 1), Some(6e6), "median of 5, 6 and 7 Mbit/s");
        assert_eq!(v.bps(1, 0), Some(3e6), "the other direction is its own");
        let l = v.links.iter().find(|l| l.from == 0 && l.to == 1).unwrap();
        assert_eq!((l.figures, l.age), (3, Duration::from_secs(8)));
        assert_eq!(v.latency_us[0][1], 3_500);
        assert_eq!(v.latency_us[1][0], 3_500);
        assert!(v.complete());
        assert_eq!(v.capacities()[0][1], 6e6);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[28e6, 47e6]), 37.5e6);
        assert_eq!(median(&[1.0, 2.0, 4.0, 9.0]), 3.0);
        assert_eq!(median(&[5.0]), 5.0);
    }

    #[test]
    fn figures_about_unknown_nodes_are_ignored_and_a_missing_pair_is_incomplete() {
        let at3 = [BandwidthEdge {
            from: id(9),
            kbps: 1,
            samples: 1,
        }];
        let figures = vec![(id(3), &at3[..], Time::from_micros(0))];
        let v = BandwidthView::build(
            &two_clusters(),
            figures.into_iter(),
            std::iter::empty(),
            Time::from_micros(0),
        );
        assert!(v.links.is_empty());
        assert!(!v.complete());
    }
}
