//! Hand-built latency layouts: the hierarchy, the summaries and the table's exchange.

use super::*;
use crate::proto::message::{ClusterMessage, MAX_CLUSTER_SUMMARIES};
use crate::proto::rng::SplitMix64;

fn ids(n: usize) -> Vec<NodeId> {
    (0..n).map(|i| NodeId::from_seed(99, i as u64)).collect()
}

/// A layout: the cluster of every node and the RTT between two nodes.
struct Layout {
    cluster: Vec<usize>,
    rtt_us: Box<dyn Fn(usize, usize) -> u32>,
}

impl Layout {
    /// `sizes[c]` nodes in cluster c; `inside_us` between two nodes of a cluster;
    /// `between(a, b)` between clusters a and b.
    fn new(
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

    fn len(&self) -> usize {
        self.cluster.len()
    }

    /// Every pair, as a node with the full matrix would see it.
    fn all_edges(&self, ids: &[NodeId]) -> Vec<(NodeId, NodeId, u32)> {
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
    fn published_edges(&self, ids: &[NodeId], noise: f64, seed: u64) -> Vec<(NodeId, NodeId, u32)> {
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
    fn partition(&self, ids: &[NodeId], key: impl Fn(usize) -> usize) -> Vec<Vec<NodeId>> {
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
fn das4() -> Layout {
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
fn sites64() -> Layout {
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

#[test]
fn das_4_from_the_full_matrix_is_four_clusters_in_one_level() {
    let l = das4();
    let ids = ids(l.len());
    let v = compute(&ids, &l.all_edges(&ids), &ClusterParams::default());
    assert_eq!(v.depth(), 1, "{v:?}");
    assert_eq!(v.partition(1), l.partition(&ids, |c| c));
    let vu = v.group_of(1, &ids[0]).expect("in a group");
    assert_eq!(vu.members.len(), 16);
    assert_eq!(vu.rtt_us, Some(40));
    assert_eq!(vu.label, *vu.members.iter().min().expect("members"));
}

#[test]
fn sites_64_from_the_full_matrix_is_clusters_then_sites_then_wider() {
    let l = sites64();
    let ids = ids(l.len());
    let v = compute(&ids, &l.all_edges(&ids), &ClusterParams::default());
    assert_eq!(v.partition(1), l.partition(&ids, |c| c));
    assert_eq!(v.partition(2), l.partition(&ids, |c| c / 2));
    // Above the sites: ANL and NCSA (2.5 ms apart) join, then PSC, then SDSC.
    assert_eq!(v.partition(3), l.partition(&ids, |c| [0, 1, 1, 3][c / 2]));
    assert_eq!(v.partition(4), l.partition(&ids, |c| [0, 1, 1, 1][c / 2]));
    assert_eq!(v.depth(), 4);
    assert_eq!(v.group_of(2, &ids[0]).and_then(|g| g.rtt_us), Some(2_000));
    assert_eq!(v.group_of(3, &ids[20]).and_then(|g| g.rtt_us), Some(5_000));
    // SDSC stays one group from level 2 up.
    assert_eq!(v.group_of(4, &ids[0]), v.group_of(2, &ids[0]));
}

#[test]
fn a_wrong_partition_does_not_match() {
    let l = sites64();
    let ids = ids(l.len());
    let v = compute(&ids, &l.all_edges(&ids), &ClusterParams::default());
    assert_ne!(v.partition(1), l.partition(&ids, |c| c / 2));
    assert_ne!(v.partition(2), l.partition(&ids, |c| c));
    assert!(v.partition(9).is_empty());
}

#[test]
fn the_summaries_alone_recover_both_layouts_even_with_noise() {
    for seed in 1..=5 {
        for (l, levels) in [(das4(), 1usize), (sites64(), 2)] {
            let ids = ids(l.len());
            let v = compute(
                &ids,
                &l.published_edges(&ids, 0.3, seed),
                &ClusterParams::default(),
            );
            assert_eq!(v.partition(1), l.partition(&ids, |c| c), "seed {seed}");
            if levels == 2 {
                assert_eq!(v.partition(2), l.partition(&ids, |c| c / 2), "seed {seed}");
            }
        }
    }
}

#[test]
fn jitter_below_the_floor_does_not_split_a_lan() {
    let ids = ids(40);
    let mut rng = SplitMix64::new(3);
    let mut edges = Vec::new();
    for i in 0..40 {
        for j in i + 1..40 {
            edges.push((ids[i], ids[j], 30 + rng.below(470) as u32));
        }
    }
    let v = compute(&ids, &edges, &ClusterParams::default());
    assert_eq!(v.depth(), 1);
    assert_eq!(v.levels[0].len(), 1, "one LAN, one cluster");
}

#[test]
fn a_far_node_stands_alone_and_a_smooth_chain_is_not_cut() {
    let ids = ids(6);
    // 0..4 a LAN; 5 is 20 ms from all.
    let mut edges = Vec::new();
    for i in 0..5 {
        for j in i + 1..5 {
            edges.push((ids[i], ids[j], 100));
        }
        edges.push((ids[i], ids[5], 20_000));
    }
    let v = compute(&ids, &edges, &ClusterParams::default());
    assert_eq!(v.depth(), 1);
    assert_eq!(v.levels[0].len(), 2);
    let alone = v.group_of(1, &ids[5]).expect("listed");
    assert_eq!((alone.members.len(), alone.rtt_us), (1, None));
    // A chain whose links grow by less than the factor each step: one group.
    let chain: Vec<(NodeId, NodeId, u32)> = (0..5)
        .map(|i| (ids[i], ids[i + 1], 1_000 + 600 * i as u32))
        .collect();
    assert_eq!(
        compute(&ids, &chain, &ClusterParams::default()).levels[0].len(),
        1
    );
}

#[test]
fn odd_inputs_give_sane_views() {
    let ids = ids(4);
    let p = ClusterParams::default();
    assert_eq!(compute(&[], &[], &p), ClusterView::default());
    // No edges at all: everyone alone, one level.
    assert_eq!(compute(&ids, &[], &p).levels[0].len(), 4);
    // Self-loops, unknown nodes and duplicates are ignored; the lowest RTT of a pair counts.
    let stranger = NodeId::from_seed(7, 7);
    let edges = vec![
        (ids[0], ids[0], 1),
        (ids[0], stranger, 1),
        (ids[0], ids[1], 90_000),
        (ids[1], ids[0], 100),
        (ids[2], ids[3], 100),
    ];
    let v = compute(&ids, &edges, &p);
    assert_eq!(v.levels[0].len(), 2, "two separate pairs: {v:?}");
    assert_eq!(v.group_of(1, &ids[0]).and_then(|g| g.rtt_us), Some(100));
    // The same edges in another order give the same view.
    let mut rev = edges.clone();
    rev.reverse();
    assert_eq!(compute(&ids, &rev, &p), v);
}

#[test]
fn a_summary_takes_the_nearest_and_smallest_of_every_shell() {
    let ids = ids(12);
    let p = ClusterParams::default();
    // 0..6 at 100 µs (a LAN), 6..9 at 3 ms, 9..12 at 30 ms.
    let row: Vec<(NodeId, u32)> = (0..12)
        .map(|i| {
            (
                ids[i],
                [100, 3_000, 30_000][i / 6 + usize::from(i >= 9)] + i as u32,
            )
        })
        .collect();
    let mut sorted = row.clone();
    sorted.sort_by_key(|(_, r)| *r);
    assert_eq!(summary::shells(&sorted, &p), vec![0..6, 6..9, 9..12]);
    let edges = summary::choose(&row, &[], &p);
    for shell in [0..6, 6..9, 9..12] {
        let mine: Vec<NodeId> = edges
            .iter()
            .filter(|e| shell.clone().any(|i| ids[i] == e.peer))
            .map(|e| e.peer)
            .collect();
        assert!(mine.len() >= summary::NEAREST_PER_SHELL.min(shell.len()));
        let smallest = shell.clone().map(|i| ids[i]).min().expect("shell");
        assert!(mine.contains(&smallest));
        assert!(mine.contains(&ids[shell.start]), "nearest of the shell");
    }
    assert!(edges.len() <= MAX_CLUSTER_EDGES);
    // Republished only on a real change; a previous peer about as near keeps its place.
    assert!(!summary::differs(
        &edges,
        &summary::choose(&row, &edges, &p)
    ));
    let mut drift = row.clone();
    drift[0].1 += 5; // 100 -> 105 µs: noise
    assert!(!summary::differs(
        &edges,
        &summary::choose(&drift, &edges, &p)
    ));
    drift[6].1 = 9_000; // a peer moved out of its shell
    assert!(summary::differs(
        &edges,
        &summary::choose(&drift, &edges, &p)
    ));
}

/// Runs digest, versions and summaries between `a` and `b` until neither answers.
fn sync(a: &mut ClusterTable, b: &mut ClusterTable, member: &impl Fn(&NodeId) -> bool) -> usize {
    let mut to_b = vec![a.digest()];
    let mut to_a = Vec::new();
    let mut messages = 0;
    while !to_a.is_empty() || !to_b.is_empty() {
        messages += to_a.len() + to_b.len();
        let next_a: Vec<ClusterMessage> =
            to_b.drain(..).flat_map(|m| b.handle(m, member)).collect();
        let next_b: Vec<ClusterMessage> =
            to_a.drain(..).flat_map(|m| a.handle(m, member)).collect();
        to_a = next_a;
        to_b = next_b;
        assert!(messages < 100, "no end to the exchange");
    }
    messages
}

#[test]
fn two_tables_reconcile_and_refuse_strangers() {
    let ids = ids(5);
    let member = |id: &NodeId| *id != ids[4];
    let edge = |i: usize, r: u32| ClusterEdge {
        peer: ids[i],
        rtt_us: r,
    };
    let mut a = ClusterTable::new(ids[0]);
    let mut b = ClusterTable::new(ids[1]);
    a.publish(vec![edge(1, 100)]);
    b.publish(vec![edge(0, 100)]);
    // c's summary reaches a; a stranger's is refused.
    let c = ClusterSummary {
        node: ids[2],
        version: 3,
        edges: vec![edge(0, 200)],
    };
    let stranger = ClusterSummary {
        node: ids[4],
        version: 1,
        edges: vec![edge(0, 1)],
    };
    a.handle(
        ClusterMessage::Summaries {
            summaries: vec![c, stranger],
        },
        member,
    );
    assert_eq!((a.len(), a.version(&ids[4])), (2, None));
    assert!(sync(&mut a, &mut b, &member) > 0);
    assert_eq!(a.digest(), b.digest());
    assert_eq!(b.version(&ids[2]), Some(3));
    assert_eq!(
        sync(&mut a, &mut b, &member),
        1,
        "equal digests: one message, no answer"
    );
    // Both compute the same view.
    let alive_a = [ids[1], ids[2]];
    let alive_b = [ids[0], ids[2]];
    assert!(a.recompute(&alive_a, &ClusterParams::default()));
    assert!(b.recompute(&alive_b, &ClusterParams::default()));
    assert_eq!(a.view(), b.view());
    assert_eq!(a.view().levels[0].len(), 1);
    assert!(
        !a.recompute(&alive_a, &ClusterParams::default()),
        "unchanged: not recomputed"
    );
    // A departed member's summary goes.
    a.remove(&ids[2]);
    assert_eq!(a.version(&ids[2]), None);
}

#[test]
fn a_node_outranks_its_own_summary_from_before_a_restart() {
    let ids = ids(2);
    let mut a = ClusterTable::new(ids[0]);
    a.publish(vec![ClusterEdge {
        peer: ids[1],
        rtt_us: 100,
    }]);
    let _ = a.take_news();
    let old = ClusterSummary {
        node: ids[0],
        version: 40,
        edges: Vec::new(),
    };
    a.handle(
        ClusterMessage::Summaries {
            summaries: vec![old],
        },
        |_: &NodeId| true,
    );
    assert_eq!(a.version(&ids[0]), Some(41));
    let news = a.take_news();
    assert_eq!(news.len(), 1);
    assert_eq!(news[0][0].version, 41);
    assert_eq!(
        news[0][0].edges.len(),
        1,
        "its current edges, under the higher version"
    );
}

#[test]
fn received_summaries_are_bounded() {
    let ids = ids(3);
    let mut a = ClusterTable::new(ids[0]);
    let edges = vec![
        ClusterEdge {
            peer: ids[2],
            rtt_us: 5
        };
        3 * MAX_CLUSTER_EDGES
    ];
    let mut many: Vec<ClusterSummary> = (0..2 * MAX_CLUSTER_SUMMARIES as u64)
        .map(|i| ClusterSummary {
            node: NodeId::from_seed(5, i),
            version: 1,
            edges: Vec::new(),
        })
        .collect();
    many.insert(
        0,
        ClusterSummary {
            node: ids[1],
            version: 1,
            edges,
        },
    );
    a.handle(
        ClusterMessage::Summaries { summaries: many },
        |_: &NodeId| true,
    );
    assert_eq!(
        a.len(),
        MAX_CLUSTER_SUMMARIES,
        "the rest of an oversized batch is ignored"
    );
    let news = a.take_news();
    let of_1 = news
        .iter()
        .flatten()
        .find(|s| s.node == ids[1])
        .expect("kept");
    assert_eq!(of_1.edges.len(), MAX_CLUSTER_EDGES);
    assert!(news.iter().all(|b| b.len() <= MAX_CLUSTER_SUMMARIES));
}
