//! Large allreduce over real QUIC: das-4 with two nodes per cluster and its bandwidths
//! enforced by the emulated socket. Every algorithm gives the exact result on every node;
//! a member crashed in the middle of a large allreduce, reduce or allreduce of values leaves
//! a result that names its contributors and is exact over them.
//!
//! `cargo test --release --test integration quic_allreduce -- --nocapture` prints times.

use crate::quic_bandwidth::start_das4;
use overlay::bulk::{Algorithm, BulkOptions, ReduceOp};
use overlay::{Node, NodeId};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Node `i`'s vector: small integers, so f32 sums are exact in any order.
pub(crate) fn vector(i: usize, len: usize) -> Vec<f32> {
    (0..len).map(|j| ((i + 1) * (j % 7)) as f32).collect()
}

/// What the sum over `contributors` (indices) must be.
pub(crate) fn expected(contributors: &[usize], len: usize) -> Vec<f32> {
    (0..len)
        .map(|j| {
            contributors
                .iter()
                .map(|i| ((i + 1) * (j % 7)) as f32)
                .sum()
        })
        .collect()
}

pub(crate) async fn all_call(
    nodes: &[Node],
    name: &str,
    len: usize,
    algorithm: Option<Algorithm>,
) -> Vec<(Vec<f32>, overlay::bulk::BulkReport)> {
    let calls = nodes.iter().enumerate().map(|(i, node)| {
        let node = node.clone();
        let name = name.to_string();
        async move {
            let mut data = vector(i, len);
            let options = BulkOptions {
                algorithm,
                timeout: Duration::from_secs(120),
                ..BulkOptions::default()
            };
            let report = node
                .allreduce_slice_with(&name, &mut data, ReduceOp::Sum, options)
                .await
                .unwrap_or_else(|e| panic!("node {i}: {e}"));
            (data, report)
        }
    });
    futures::future::join_all(calls).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_gives_every_node_the_exact_sum() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let n = overlay.nodes.len();
    let len = 100_000;
    let want = expected(&(0..n).collect::<Vec<_>>(), len);
    let choices = [
        None,
        Some(Algorithm::Clustered),
        Some(Algorithm::Hierarchical),
        Some(Algorithm::Ring),
        Some(Algorithm::Tree),
    ];
    for algorithm in choices {
        let start = Instant::now();
        let out = all_call(&overlay.nodes, "sum", len, algorithm).await;
        let took = start.elapsed();
        for (i, (data, report)) in out.iter().enumerate() {
            assert_eq!(report.contributors.len(), n, "node {i}: {report:?}");
            assert!(report.missing.is_empty(), "node {i}: {report:?}");
            if let Some(a) = algorithm {
                assert_eq!(report.algorithm, a);
            }
            assert!(data == &want, "node {i} got a wrong sum with {algorithm:?}");
        }
        println!(
            "{:<12} {} x f32 on {n} nodes: {took:?} (ran {})",
            algorithm.map_or("default", Algorithm::name),
            len,
            out[0].1.algorithm.name()
        );
    }
    // Other types and operations, through the default.
    let calls = overlay.nodes.iter().enumerate().map(|(i, node)| {
        let node = node.clone();
        async move {
            let mut lows: Vec<i64> = (0..5000).map(|j| j as i64 - i as i64).collect();
            let mut highs: Vec<u64> = (0..5000).map(|j| (j * (i + 1)) as u64).collect();
            node.allreduce_slice("min", &mut lows, ReduceOp::Min)
                .await
                .expect("min");
            node.allreduce_slice("max", &mut highs, ReduceOp::Max)
                .await
                .expect("max");
            (lows, highs)
        }
    });
    for (lows, highs) in futures::future::join_all(calls).await {
        assert!(
            lows.iter()
                .enumerate()
                .all(|(j, v)| *v == j as i64 - (n as i64 - 1))
        );
        assert!(highs.iter().enumerate().all(|(j, v)| *v == (j * n) as u64));
    }
    // The planner (smallest id) kept a decision table of the default's calls.
    let planner = overlay.nodes.iter().min_by_key(|x| x.id()).expect("nodes");
    let table = planner.collective_table();
    assert!(
        table.iter().any(|e| e.calls >= 1 && e.chosen.is_some()),
        "{table:?}"
    );
    overlay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_reduces_to_the_root_alone_exactly() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let n = overlay.nodes.len();
    let len = 100_000;
    let want = expected(&(0..n).collect::<Vec<_>>(), len);
    // A root that is not the smallest id, so it is not the allreduce planner either.
    let mut by_id: Vec<usize> = (0..n).collect();
    by_id.sort_by_key(|i| overlay.nodes[*i].id());
    let root_at = by_id[n / 2];
    let root = overlay.nodes[root_at].id();
    let choices = [
        None,
        Some(Algorithm::Clustered),
        Some(Algorithm::Hierarchical),
        Some(Algorithm::Ring),
        Some(Algorithm::Tree),
    ];
    for algorithm in choices {
        let start = Instant::now();
        let calls = overlay.nodes.iter().enumerate().map(|(i, node)| {
            let node = node.clone();
            async move {
                let mut data = vector(i, len);
                let options = BulkOptions {
                    algorithm,
                    timeout: Duration::from_secs(120),
                    ..BulkOptions::default()
                };
                let report = node
                    .reduce_slice_with("to-root", root, &mut data, ReduceOp::Sum, options)
                    .await
                    .unwrap_or_else(|e| panic!("node {i}: {e}"));
                (data, report)
            }
        });
        let out = futures::future::join_all(calls).await;
        let took = start.elapsed();
        for (i, (data, report)) in out.iter().enumerate() {
            assert_eq!(report.contributors.len(), n, "node {i}: {report:?}");
            if let Some(a) = algorithm {
                assert_eq!(report.algorithm, a);
            }
            if i == root_at {
                assert!(data == &want, "the root got a wrong sum with {algorithm:?}");
            } else {
                assert!(data == &vector(i, len), "node {i}'s vector changed");
            }
        }
        println!(
            "reduce {:<12} {len} x f32 on {n} nodes: {took:?} (ran {})",
            algorithm.map_or("default", Algorithm::name),
            out[0].1.algorithm.name()
        );
    }
    let table = overlay.nodes[root_at].collective_table();
    assert!(
        table
            .iter()
            .any(|e| e.collective == "reduce" && e.calls >= 1),
        "the root keeps the reduce's decision table: {table:?}"
    );
    overlay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_reduce_with_the_callers_associative_operation() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let n = overlay.nodes.len();
    // Concatenation: associative, not commutative. Every member gets the same list, each
    // member's tag once, and each cluster's members next to each other (the plan's order).
    let concat = |mut a: Vec<String>, b: Vec<String>| {
        a.extend(b);
        a
    };
    let calls = overlay.nodes.iter().map(|node| {
        let node = node.clone();
        async move {
            let mine = vec![node.id().short()];
            node.allreduce_value("order", mine, concat, BulkOptions::default())
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", node.id().short()))
        }
    });
    let out = futures::future::join_all(calls).await;
    let first = &out[0].0;
    let mut tags = first.clone();
    tags.sort();
    let mut want: Vec<String> = overlay.nodes.iter().map(|x| x.id().short()).collect();
    want.sort();
    assert_eq!(tags, want, "every member once");
    for (v, report) in &out {
        assert_eq!(v, first, "the same value everywhere");
        assert_eq!(report.contributors.len(), n);
    }
    let cluster_of = |tag: &String| {
        let i = overlay
            .nodes
            .iter()
            .position(|x| &x.id().short() == tag)
            .expect("a member");
        overlay.clusters[i]
    };
    let runs = first
        .windows(2)
        .filter(|w| cluster_of(&w[0]) != cluster_of(&w[1]))
        .count();
    assert_eq!(runs, 3, "das-4's four clusters, each in one run: {first:?}");
    // A reduce of word counts (a map merge) to one root.
    let root = overlay.nodes[n - 1].id();
    let merge = |mut a: BTreeMap<String, u64>, b: BTreeMap<String, u64>| {
        for (k, v) in b {
            *a.entry(k).or_default() += v;
        }
        a
    };
    let calls = overlay.nodes.iter().enumerate().map(|(i, node)| {
        let node = node.clone();
        async move {
            let words =
                BTreeMap::from([("all".to_string(), 1u64), (format!("w{}", i % 3), i as u64)]);
            node.reduce_value("words", root, words, merge, BulkOptions::default())
                .await
                .unwrap_or_else(|e| panic!("node {i}: {e}"))
        }
    });
    for (i, (got, _)) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        if i != n - 1 {
            assert!(got.is_none(), "node {i} is not the root");
            continue;
        }
        let got = got.expect("the root gets the value");
        assert_eq!(got["all"], n as u64);
        let w0: u64 = (0..n).filter(|i| i % 3 == 0).map(|i| i as u64).sum();
        assert_eq!(got["w0"], w0);
    }
    overlay.shutdown().await;
}

/// Binomial trees inside the clusters (forced, over two given clusters of four, so a
/// tree has members with two children): allreduce and reduce exact, with clustered and
/// hierarchical plans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binomial_trees_inside_the_clusters_give_exact_results() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let n = overlay.nodes.len();
    let len = 100_000;
    let mut ids: Vec<NodeId> = overlay.nodes.iter().map(Node::id).collect();
    ids.sort();
    let groups = vec![ids[..n / 2].to_vec(), ids[n / 2..].to_vec()];
    let root = ids[n - 1];
    let want = expected(&(0..n).collect::<Vec<_>>(), len);
    for algorithm in [Algorithm::Clustered, Algorithm::Hierarchical] {
        for reduce_to in [None, Some(root)] {
            let calls = overlay.nodes.iter().enumerate().map(|(i, node)| {
                let node = node.clone();
                let options = BulkOptions {
                    algorithm: Some(algorithm),
                    groups: Some(groups.clone()),
                    inside: Some(overlay::bulk::Inside::Binomial),
                    timeout: Duration::from_secs(120),
                    ..BulkOptions::default()
                };
                async move {
                    let mut data = vector(i, len);
                    let report = match reduce_to {
                        None => {
                            (node.allreduce_slice_with("tree", &mut data, ReduceOp::Sum, options))
                                .await
                        }
                        Some(r) => {
                            let sum = ReduceOp::Sum;
                            (node.reduce_slice_with("tree-root", r, &mut data, sum, options)).await
                        }
                    }
                    .unwrap_or_else(|e| panic!("node {i}: {e}"));
                    (node.id(), i, data, report)
                }
            });
            for (id, i, data, report) in futures::future::join_all(calls).await {
                assert_eq!(report.algorithm, algorithm);
                assert_eq!(report.inside, vec![overlay::bulk::Inside::Binomial; 2]);
                assert_eq!(report.contributors.len(), n, "node {i}: {report:?}");
                let gets_it = reduce_to.is_none_or(|r| r == id);
                let mine = vector(i, len);
                let ok = if gets_it { data == want } else { data == mine };
                assert!(ok, "node {i}, {algorithm:?}, reduce to {reduce_to:?}");
            }
        }
    }
    overlay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_crashed_mid_allreduce_leaves_an_exact_result_over_the_named_contributors() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let n = overlay.nodes.len();
    // 4 MiB of f32: seconds on das-4's wide-area links, so the crash lands mid-transfer.
    let len = 1 << 20;
    let planner = overlay.nodes.iter().map(Node::id).min().expect("nodes");
    let victim = (0..n)
        .find(|i| overlay.nodes[*i].id() != planner)
        .expect("a non-planner");
    let calls = overlay.nodes.iter().enumerate().map(|(i, node)| {
        let node = node.clone();
        async move {
            let mut data = vector(i, len);
            let r = node
                .allreduce_slice("crash", &mut data, ReduceOp::Sum)
                .await;
            (i, r.map(|r| (data, r)))
        }
    });
    let calls = futures::future::join_all(calls);
    let results = crate::common::crash_during(&overlay, victim, "mid-allreduce", calls).await;
    let by_index = overlay.index_by_id();
    for (i, r) in results {
        if i == victim {
            continue;
        }
        let (data, report) = r.unwrap_or_else(|e| panic!("node {i}: {e}"));
        let contributors: Vec<usize> = report.contributors.iter().map(|id| by_index[id]).collect();
        let victim_id: NodeId = overlay.nodes[victim].id();
        assert!(
            !report.contributors.contains(&victim_id),
            "node {i}: the crashed member is named a contributor: {report:?}"
        );
        assert!(report.missing.contains(&victim_id), "node {i}: {report:?}");
        assert_eq!(contributors.len(), n - 1, "node {i}: {report:?}");
        assert!(report.attempts >= 2, "node {i}: {report:?}");
        assert!(
            data == expected(&contributors, len),
            "node {i}: not exact over its contributors"
        );
    }
    overlay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_crashed_mid_reduce_leaves_the_root_an_exact_sum_over_the_named_contributors() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let n = overlay.nodes.len();
    let len = 1 << 20;
    // The root plans a reduce; the victim is any other member.
    let root_at = n - 1;
    let root = overlay.nodes[root_at].id();
    let victim = 0;
    let calls = overlay.nodes.iter().enumerate().map(|(i, node)| {
        let node = node.clone();
        async move {
            let mut data = vector(i, len);
            let r = node
                .reduce_slice("crash-reduce", root, &mut data, ReduceOp::Sum)
                .await;
            (i, r.map(|r| (data, r)))
        }
    });
    let calls = futures::future::join_all(calls);
    let results = crate::common::crash_during(&overlay, victim, "mid-reduce", calls).await;
    let by_index = overlay.index_by_id();
    let victim_id = overlay.nodes[victim].id();
    for (i, r) in results {
        if i == victim {
            continue;
        }
        let (data, report) = r.unwrap_or_else(|e| panic!("node {i}: {e}"));
        // The sum is exact over the contributors named.
        crate::common::victim_named_once(&report, victim_id, n, &format!("node {i}"));
        let contributors: Vec<usize> = report.contributors.iter().map(|id| by_index[id]).collect();
        if i == root_at {
            assert!(
                data == expected(&contributors, len),
                "the root's sum is not exact"
            );
        } else {
            assert!(data == vector(i, len), "node {i}'s vector changed");
        }
    }
    overlay.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_crashed_mid_value_allreduce_leaves_each_named_contributor_once() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let n = overlay.nodes.len();
    let planner = overlay.nodes.iter().map(Node::id).min().expect("nodes");
    let victim = (0..n)
        .rev()
        .find(|i| overlay.nodes[*i].id() != planner)
        .expect("a non-planner");
    let victim_id = overlay.nodes[victim].id();
    // Each member's value: its tag and 512 KiB of a byte of its own, so the concatenated
    // values take seconds on das-4's slow links and the crash lands mid-transfer.
    let len = 512 << 10;
    let concat = |mut a: Vec<(String, Vec<u8>)>, b: Vec<(String, Vec<u8>)>| {
        a.extend(b);
        a
    };
    let calls = overlay.nodes.iter().enumerate().map(move |(i, node)| {
        let node = node.clone();
        async move {
            let mine = vec![(node.id().short(), vec![i as u8; len])];
            (
                i,
                node.allreduce_value("crash-values", mine, concat, BulkOptions::default())
                    .await,
            )
        }
    });
    let calls = futures::future::join_all(calls);
    let results = crate::common::crash_during(&overlay, victim, "mid-value-allreduce", calls).await;
    let by_index = overlay.index_by_id();
    let mut first = None;
    for (i, r) in results {
        if i == victim {
            continue;
        }
        let (value, report) = r.unwrap_or_else(|e| panic!("node {i}: {e}"));
        crate::common::victim_named_once(&report, victim_id, n, &format!("node {i}"));
        // Exactly the named contributors' values, each once and whole.
        let mut tags: Vec<String> = value.iter().map(|(t, _)| t.clone()).collect();
        tags.sort();
        let mut want: Vec<String> = report.contributors.iter().map(|id| id.short()).collect();
        want.sort();
        assert_eq!(tags, want, "node {i}: one value per named contributor");
        for id in &report.contributors {
            let j = by_index[id];
            let (_, bytes) = (value.iter().find(|(t, _)| *t == id.short())).expect("its value");
            assert!(
                bytes.len() == len && bytes.iter().all(|b| *b == j as u8),
                "node {i}: {j}'s value"
            );
        }
        let first = first.get_or_insert_with(|| value.clone());
        assert!(*first == value, "node {i}: the same value everywhere");
    }
    overlay.shutdown().await;
}
