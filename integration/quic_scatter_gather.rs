//! Large scatter and gather over real QUIC: das-4 with two nodes per cluster and its
//! bandwidths emulated. Every algorithm delivers every piece whole to the right member, and
//! a member crashed mid-transfer leaves every other piece whole and is named exactly once.
//!
//! `cargo test --release --test integration quic_scatter_gather -- --nocapture` prints times.

use crate::quic_bandwidth::start_das4;
use bytes::Bytes;
use overlay::bulk::{Algorithm, BulkOptions};
use overlay::{Node, NodeId};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The piece of member `id`: its id's bytes repeated, `len` bytes (a different length
/// for each member, some empty).
fn piece(id: NodeId, len: usize) -> Bytes {
    id.to_hex()
        .into_bytes()
        .into_iter()
        .cycle()
        .take(len)
        .collect::<Vec<u8>>()
        .into()
}

fn options(algorithm: Option<Algorithm>) -> BulkOptions {
    BulkOptions {
        algorithm,
        timeout: Duration::from_secs(120),
        ..BulkOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_scatters_and_gathers_every_piece_whole() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let nodes: Vec<Node> = overlay.nodes.clone();
    let root = nodes[0].id();
    let len_of = |i: usize| if i == 3 { 0 } else { 100_000 + 7919 * i };
    let choices = [
        None,
        Some(Algorithm::Relayed),
        Some(Algorithm::Direct),
        Some(Algorithm::Hierarchical),
        Some(Algorithm::Tree),
    ];
    for algorithm in choices {
        let label = algorithm.map_or("default", Algorithm::name);
        // Scatter from node 0.
        let start = Instant::now();
        let calls = nodes.iter().enumerate().map(|(i, node)| {
            let node = node.clone();
            let pieces: HashMap<NodeId, Bytes> = (0..nodes.len())
                .map(|j| (nodes[j].id(), piece(nodes[j].id(), len_of(j))))
                .collect();
            async move {
                let got = if i == 0 {
                    node.scatter_pieces("s", pieces, options(algorithm)).await
                } else {
                    node.scatter_receive("s", root, options(algorithm)).await
                };
                (
                    i,
                    got.unwrap_or_else(|e| panic!("scatter {label}, node {i}: {e}")),
                )
            }
        });
        for (i, (got, report)) in futures::future::join_all(calls).await {
            assert_eq!(
                got,
                piece(nodes[i].id(), len_of(i)),
                "scatter {label}, node {i}"
            );
            assert_eq!(report.contributors.len(), nodes.len());
            if let Some(a) = algorithm {
                assert_eq!(report.algorithm, a);
            }
        }
        let scattered = start.elapsed();
        // Gather to node 0.
        let start = Instant::now();
        let calls = nodes.iter().enumerate().map(|(i, node)| {
            let node = node.clone();
            async move {
                let mine = piece(node.id(), len_of(i));
                let got = node
                    .gather_pieces("g", root, mine, options(algorithm))
                    .await;
                (
                    i,
                    got.unwrap_or_else(|e| panic!("gather {label}, node {i}: {e}")),
                )
            }
        });
        for (i, (all, _)) in futures::future::join_all(calls).await {
            if i != 0 {
                assert!(all.is_empty());
                continue;
            }
            assert_eq!(all.len(), nodes.len());
            for (id, p) in all {
                let j = nodes.iter().position(|n| n.id() == id).expect("a member");
                assert_eq!(
                    p,
                    piece(id, len_of(j)),
                    "gather {label}: the piece of node {j}"
                );
            }
        }
        println!(
            "{label:<12} scatter {scattered:?}, gather {:?} ({} nodes)",
            start.elapsed(),
            nodes.len()
        );
    }
    // A forced allreduce algorithm is refused at once for a scatter.
    let e = nodes[0]
        .scatter_pieces("bad", HashMap::new(), options(Some(Algorithm::Ring)))
        .await;
    assert!(e.is_err());
    overlay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_allgathers_every_piece_whole_to_every_member() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let nodes: Vec<Node> = overlay.nodes.clone();
    let len_of = |i: usize| if i == 5 { 0 } else { 60_000 + 4099 * i };
    let mut choices = vec![None];
    choices.extend(Algorithm::ALLGATHER.map(Some));
    for algorithm in choices {
        let label = algorithm.map_or("default", Algorithm::name);
        let start = Instant::now();
        let calls = nodes.iter().enumerate().map(|(i, node)| {
            let node = node.clone();
            async move {
                let mine = piece(node.id(), len_of(i));
                let got = node.allgather_pieces("ag", mine, options(algorithm)).await;
                (
                    i,
                    got.unwrap_or_else(|e| panic!("allgather {label}, node {i}: {e}")),
                )
            }
        });
        let mut ran = None;
        for (i, (all, report)) in futures::future::join_all(calls).await {
            assert_eq!(report.contributors.len(), nodes.len(), "node {i}");
            assert_eq!(all.len(), nodes.len(), "allgather {label}, node {i}");
            assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "in id order");
            for (id, p) in all {
                let j = nodes.iter().position(|n| n.id() == id).expect("a member");
                assert_eq!(
                    p,
                    piece(id, len_of(j)),
                    "allgather {label}: node {i} has a wrong piece of node {j}"
                );
            }
            if let Some(a) = algorithm {
                assert_eq!(report.algorithm, a);
            }
            ran = Some(report.algorithm);
        }
        println!(
            "allgather {label:<12} {:?} ({} nodes, ran {})",
            start.elapsed(),
            nodes.len(),
            ran.map_or("-", Algorithm::name)
        );
    }
    // A forced algorithm that cannot allgather is refused at once.
    let e = nodes[0]
        .allgather_pieces("bad", Bytes::new(), options(Some(Algorithm::Clustered)))
        .await;
    assert!(e.is_err());
    overlay.shutdown().await;
}

/// Ours with each pattern inside the clusters forced, over two given clusters of four (so
/// a chain has four members and a binomial tree a member with two children): every piece
/// whole everywhere, and the report names the pattern. A star inside a reduction is
/// refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pattern_inside_the_clusters_allgathers_every_piece_whole() {
    use overlay::bulk::Inside;
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let nodes: Vec<Node> = overlay.nodes.clone();
    let n = nodes.len();
    let mut ids: Vec<NodeId> = nodes.iter().map(Node::id).collect();
    ids.sort();
    let groups = vec![ids[..n / 2].to_vec(), ids[n / 2..].to_vec()];
    let len_of = |i: usize| 70_000 + 3001 * i;
    for inside in [Inside::Chain, Inside::Binomial, Inside::Star] {
        let start = Instant::now();
        let calls = nodes.iter().enumerate().map(|(i, node)| {
            let node = node.clone();
            let options = BulkOptions {
                groups: Some(groups.clone()),
                inside: Some(inside),
                ..options(Some(Algorithm::Relayed))
            };
            async move {
                let got = node.allgather_pieces("inside", piece(node.id(), len_of(i)), options);
                (
                    i,
                    got.await
                        .unwrap_or_else(|e| panic!("{inside:?}, node {i}: {e}")),
                )
            }
        });
        for (i, (all, report)) in futures::future::join_all(calls).await {
            assert_eq!(report.inside, vec![inside; 2], "node {i}");
            assert_eq!(all.len(), n, "{inside:?}, node {i}");
            for (id, p) in all {
                let j = nodes.iter().position(|x| x.id() == id).expect("a member");
                assert_eq!(
                    p,
                    piece(id, len_of(j)),
                    "{inside:?}: node {i}, piece of {j}"
                );
            }
        }
        eprintln!("allgather inside {inside:?}: {:?}", start.elapsed());
    }
    // Every member calls, so the planner plans at once; it refuses, and tells them all.
    let calls = nodes.iter().map(|node| {
        let node = node.clone();
        async move {
            let star = BulkOptions {
                inside: Some(Inside::Star),
                ..options(Some(Algorithm::Clustered))
            };
            let mut data = vec![1.0f32; 1000];
            let sum = overlay::bulk::ReduceOp::Sum;
            node.allreduce_slice_with("star", &mut data, sum, star)
                .await
        }
    });
    for (i, got) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let e = got.expect_err("a star inside a reduction");
        assert!(e.to_string().contains("star"), "node {i}: {e}");
    }
    overlay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_crashed_mid_allgather_leaves_every_other_piece_whole_everywhere() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let nodes: Vec<Node> = overlay.nodes.clone();
    let n = nodes.len();
    // 1 MiB pieces: seconds over das-4's slow links, so the crash lands mid-transfer.
    let len = 1 << 20;
    let planner = nodes.iter().map(Node::id).min().expect("nodes");
    let victim = (0..n)
        .find(|i| nodes[*i].id() != planner)
        .expect("a non-planner");
    let calls = nodes.iter().enumerate().map(|(i, node)| {
        let node = node.clone();
        async move {
            let mine = piece(node.id(), len);
            (i, node.allgather_pieces("crash", mine, options(None)).await)
        }
    });
    let calls = futures::future::join_all(calls);
    let results = crate::common::crash_during(&overlay, victim, "mid-allgather", calls).await;
    let victim_id = nodes[victim].id();
    for (i, r) in results {
        if i == victim {
            continue;
        }
        let (got, report) = r.unwrap_or_else(|e| panic!("node {i}: {e}"));
        assert!(
            !report.contributors.contains(&victim_id),
            "node {i}: {report:?}"
        );
        assert!(report.missing.contains(&victim_id), "node {i}: {report:?}");
        assert_eq!(report.contributors.len(), n - 1, "node {i}: {report:?}");
        let ids: Vec<NodeId> = got.iter().map(|(id, _)| *id).collect();
        assert_eq!(
            ids, report.contributors,
            "node {i}: one piece per named contributor"
        );
        for (id, p) in got {
            assert_eq!(p, piece(id, len), "node {i}: the piece of {}", id.short());
        }
    }
    overlay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_crashed_mid_scatter_leaves_every_other_piece_whole() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let nodes: Vec<Node> = overlay.nodes.clone();
    let n = nodes.len();
    let root = nodes[0].id();
    let victim = crate::common::victim_of(&nodes, root);
    let victim_id = nodes[victim].id();
    // 1 MiB pieces: seconds over das-4's slow links, so the crash lands mid-transfer, and
    // pieces may be relayed through the victim (default algorithm).
    let len = 1 << 20;
    let pieces: HashMap<NodeId, Bytes> =
        nodes.iter().map(|m| (m.id(), piece(m.id(), len))).collect();
    let calls = nodes.iter().enumerate().map(|(i, node)| {
        let node = node.clone();
        let pieces = pieces.clone();
        async move {
            let got = if i == 0 {
                node.scatter_pieces("crash", pieces, options(None)).await
            } else {
                node.scatter_receive("crash", root, options(None)).await
            };
            (i, got)
        }
    });
    let calls = futures::future::join_all(calls);
    let results = crate::common::crash_during(&overlay, victim, "mid-scatter", calls).await;
    for (i, r) in results {
        if i == victim {
            continue;
        }
        let (got, report) = r.unwrap_or_else(|e| panic!("node {i}: {e}"));
        assert_eq!(got, piece(nodes[i].id(), len), "node {i}: its piece, whole");
        if i == 0 {
            crate::common::victim_named_once(&report, victim_id, n, "the root");
        }
    }
    overlay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_crashed_mid_gather_leaves_the_root_every_other_piece_whole() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let nodes: Vec<Node> = overlay.nodes.clone();
    let n = nodes.len();
    let root_at = 0;
    let root = nodes[root_at].id();
    let victim = crate::common::victim_of(&nodes, root);
    let victim_id = nodes[victim].id();
    let len = 1 << 20;
    let calls = nodes.iter().enumerate().map(|(i, node)| {
        let node = node.clone();
        async move {
            let mine = piece(node.id(), len);
            (
                i,
                node.gather_pieces("crash", root, mine, options(None)).await,
            )
        }
    });
    let calls = futures::future::join_all(calls);
    let results = crate::common::crash_during(&overlay, victim, "mid-gather", calls).await;
    for (i, r) in results {
        if i == victim {
            continue;
        }
        let (all, report) = r.unwrap_or_else(|e| panic!("node {i}: {e}"));
        if i != root_at {
            assert!(all.is_empty(), "node {i}: only the root gets the pieces");
            continue;
        }
        crate::common::victim_named_once(&report, victim_id, n, "the root");
        let ids: Vec<NodeId> = all.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, report.contributors, "one piece per named contributor");
        for (id, p) in all {
            assert_eq!(p, piece(id, len), "the piece of {}", id.short());
        }
    }
    overlay.shutdown().await;
}
