//! What a node publishes, and how two tables reconcile.

use super::*;
use crate::proto::message::{ClusterMessage, MAX_CLUSTER_SUMMARIES};
use crate::proto::time::Time;
use std::sync::Arc;

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
        &summary::choose(&row, &edges, &p),
        &p
    ));
    let mut drift = row.clone();
    drift[0].1 += 5; // 100 -> 105 µs: noise
    assert!(!summary::differs(
        &edges,
        &summary::choose(&drift, &edges, &p),
        &p
    ));
    drift[6].1 = 9_000; // a peer moved out of its shell
    assert!(summary::differs(
        &edges,
        &summary::choose(&drift, &edges, &p),
        &p
    ));
}

/// A summary of `node` at `version` with no edges and no figures.
fn bare(node: NodeId, version: u32) -> Arc<ClusterSummary> {
    Arc::new(ClusterSummary {
        node,
        version,
        edges: Arc::from([]),
        bandwidth: Arc::from([]),
    })
}

/// Runs digest, versions and summaries between `a` and `b` until neither answers.
fn sync(a: &mut ClusterTable, b: &mut ClusterTable, member: &impl Fn(&NodeId) -> bool) -> usize {
    let mut to_b = vec![a.digest()];
    let mut to_a = Vec::new();
    let mut messages = 0;
    while !to_a.is_empty() || !to_b.is_empty() {
        messages += to_a.len() + to_b.len();
        let next_a: Vec<ClusterMessage> = to_b
            .drain(..)
            .flat_map(|m| b.handle(Time::from_micros(0), m, member))
            .collect();
        let next_b: Vec<ClusterMessage> = to_a
            .drain(..)
            .flat_map(|m| a.handle(Time::from_micros(0), m, member))
            .collect();
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
    a.publish_edges(vec![edge(1, 100)]);
    b.publish_edges(vec![edge(0, 100)]);
    // c's summary reaches a; a stranger's is refused.
    let c = Arc::new(ClusterSummary {
        node: ids[2],
        version: 3,
        edges: vec![edge(0, 200)].into(),
        bandwidth: Arc::from([]),
    });
    let stranger = Arc::new(ClusterSummary {
        node: ids[4],
        version: 1,
        edges: vec![edge(0, 1)].into(),
        bandwidth: Arc::from([]),
    });
    a.handle(
        Time::from_micros(0),
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
    a.publish_edges(vec![ClusterEdge {
        peer: ids[1],
        rtt_us: 100,
    }]);
    let _ = a.take_news();
    let old = bare(ids[0], 40);
    a.handle(
        Time::from_micros(0),
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
    // Its own current summary coming back (the epidemic returns it) changes nothing...
    let back = news[0][0].clone();
    let own = |s: Arc<ClusterSummary>| ClusterMessage::Summaries { summaries: vec![s] };
    a.handle(Time::from_micros(0), own(back.clone()), |_: &NodeId| true);
    assert_eq!((a.version(&ids[0]), a.has_news()), (Some(41), false));
    // ...but the same version with other edges (a run before a restart) is outranked.
    let other = bare(ids[0], back.version);
    a.handle(Time::from_micros(0), own(other), |_: &NodeId| true);
    assert_eq!(a.version(&ids[0]), Some(42));
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
    let mut many: Vec<Arc<ClusterSummary>> = (0..2 * MAX_CLUSTER_SUMMARIES as u64)
        .map(|i| bare(NodeId::from_seed(5, i), 1))
        .collect();
    many.insert(
        0,
        Arc::new(ClusterSummary {
            node: ids[1],
            version: 1,
            edges: edges.into(),
            bandwidth: Arc::from([]),
        }),
    );
    a.handle(
        Time::from_micros(0),
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

#[test]
fn in_a_large_table_one_new_summary_is_reconciled_by_its_fine_bucket() {
    // 3000 summaries on both sides: 94 per coarse bucket, past the fine split.
    let me = NodeId::from_seed(9, 0);
    let mut a = ClusterTable::new(me);
    let mut b = ClusterTable::new(NodeId::from_seed(9, 1));
    let all: Vec<Arc<ClusterSummary>> = (0..3000)
        .map(|i| bare(NodeId::from_seed(8, i), 1))
        .collect();
    let member = |_: &NodeId| true;
    for chunk in all.chunks(MAX_CLUSTER_SUMMARIES) {
        for t in [&mut a, &mut b] {
            let summaries = chunk.to_vec();
            t.handle(
                Time::from_micros(0),
                ClusterMessage::Summaries { summaries },
                member,
            );
        }
    }
    a.handle(
        Time::from_micros(0),
        ClusterMessage::Summaries {
            summaries: vec![bare(all[17].node, 2)],
        },
        member,
    );
    // Digest, coarse buckets, fine buckets, then a version list each way of a few entries.
    let to_b = a.digest();
    let buckets = b.handle(Time::from_micros(0), to_b, member);
    let fine = a.handle(Time::from_micros(0), buckets[0].clone(), member);
    assert!(matches!(fine[..], [ClusterMessage::FineBuckets { .. }]));
    let versions = b.handle(Time::from_micros(0), fine[0].clone(), member);
    let ClusterMessage::Versions { versions: list, .. } = &versions[0] else {
        panic!("{versions:?}");
    };
    assert!(list.len() < 20, "a fine bucket's versions: {}", list.len());
    let mut messages = 0;
    let mut to_a = versions;
    let mut to_b: Vec<ClusterMessage> = Vec::new();
    while !to_a.is_empty() || !to_b.is_empty() {
        messages += 1;
        let next_b: Vec<ClusterMessage> = (to_a.drain(..))
            .flat_map(|m| a.handle(Time::from_micros(0), m, member))
            .collect();
        let next_a: Vec<ClusterMessage> = (to_b.drain(..))
            .flat_map(|m| b.handle(Time::from_micros(0), m, member))
            .collect();
        (to_a, to_b) = (next_a, next_b);
        assert!(messages < 10);
    }
    assert_eq!(b.version(&all[17].node), Some(2));
    assert_eq!(a.digest(), b.digest());
}

#[test]
fn new_bandwidth_figures_alone_leave_the_view_as_it_is() {
    let ids = ids(3);
    let member = |_: &NodeId| true;
    let edges: Arc<[ClusterEdge]> = vec![ClusterEdge {
        peer: ids[0],
        rtt_us: 100,
    }]
    .into();
    let summary = |version: u32, kbps: u32| {
        Arc::new(ClusterSummary {
            node: ids[1],
            version,
            edges: Arc::clone(&edges),
            bandwidth: vec![crate::proto::message::BandwidthEdge {
                from: ids[2],
                kbps,
                samples: 3,
            }]
            .into(),
        })
    };
    let own = |rtt_us| {
        vec![ClusterEdge {
            peer: ids[1],
            rtt_us,
        }]
    };
    let mut a = ClusterTable::new(ids[0]);
    a.publish_edges(own(100));
    let receive = |a: &mut ClusterTable, s| {
        let msg = ClusterMessage::Summaries { summaries: vec![s] };
        a.handle(Time::from_micros(0), msg, member);
    };
    receive(&mut a, summary(1, 1_000));
    let alive = [ids[1], ids[2]];
    let params = ClusterParams::default();
    assert!(a.recompute(&alive, &params));
    // A newer version with new bandwidth figures: held and spread, no new view.
    receive(&mut a, summary(2, 2_000));
    assert_eq!(a.version(&ids[1]), Some(2));
    assert!(a.has_news());
    assert!(!a.recompute(&alive, &params), "same latencies: same view");
    // Our own republish with the same latencies: the same.
    a.publish_edges(own(100));
    assert!(!a.recompute(&alive, &params));
    // New latencies do make a new view.
    a.publish_edges(own(150));
    assert!(a.recompute(&alive, &params));
}
