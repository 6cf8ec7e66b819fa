//! Clustered allreduce and reduce relayed through third clusters over real QUIC: das-4
//! with two nodes per cluster and its bandwidths emulated, relays forced (on das-4 the
//! model relays a reduce into Leiden, not an allreduce).
//!
//! `cargo test --release --test integration quic_relay -- --nocapture` prints times.

use crate::quic_allreduce::{expected, vector};
use crate::quic_bandwidth::start_das4;
use overlay::Node;
use overlay::bulk::{Algorithm, BulkOptions, ReduceOp};
use std::time::Duration;

/// Clustered plans relayed through third clusters (forced, over das-4's four clusters):
/// allreduce and reduce exact, the report says so; then a member crashed mid-allreduce
/// leaves an exact result over the contributors named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayed_reductions_are_exact_and_a_crash_mid_way_is_named() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let n = overlay.nodes.len();
    let relayed = || BulkOptions {
        algorithm: Some(Algorithm::Clustered),
        relays: Some(true),
        timeout: Duration::from_secs(120),
        ..BulkOptions::default()
    };
    let len = 100_000;
    let want = expected(&(0..n).collect::<Vec<_>>(), len);
    let root = overlay.nodes[n / 2].id();
    for reduce_to in [None, Some(root)] {
        let calls = overlay.nodes.iter().enumerate().map(|(i, node)| {
            let (node, options) = (node.clone(), relayed());
            async move {
                let mut data = vector(i, len);
                let sum = ReduceOp::Sum;
                let report = match reduce_to {
                    None => {
                        node.allreduce_slice_with("relay", &mut data, sum, options)
                            .await
                    }
                    Some(r) => {
                        (node.reduce_slice_with("relay-root", r, &mut data, sum, options)).await
                    }
                }
                .unwrap_or_else(|e| panic!("node {i}: {e}"));
                (node.id(), i, data, report)
            }
        });
        for (id, i, data, report) in futures::future::join_all(calls).await {
            assert!(report.relayed, "node {i}: {report:?}");
            assert_eq!(report.contributors.len(), n, "node {i}: {report:?}");
            let gets_it = reduce_to.is_none_or(|r| r == id);
            let ok = if gets_it {
                data == want
            } else {
                data == vector(i, len)
            };
            assert!(ok, "node {i}, reduce to {reduce_to:?}");
        }
    }
    // 4 MiB of f32: seconds on das-4's wide-area links, so the crash lands mid-transfer.
    let len = 1 << 20;
    let planner = overlay.nodes.iter().map(Node::id).min().expect("nodes");
    let victim = (0..n)
        .rev()
        .find(|i| overlay.nodes[*i].id() != planner)
        .expect("a non-planner");
    let calls = overlay.nodes.iter().enumerate().map(|(i, node)| {
        let (node, options) = (node.clone(), relayed());
        async move {
            let mut data = vector(i, len);
            let sum = ReduceOp::Sum;
            let r = node
                .allreduce_slice_with("relay-crash", &mut data, sum, options)
                .await;
            (i, r.map(|r| (data, r)))
        }
    });
    let calls = futures::future::join_all(calls);
    let results = crate::common::crash_during(&overlay, victim, "mid-relay", calls).await;
    let by_index = overlay.index_by_id();
    let victim_id = overlay.nodes[victim].id();
    for (i, r) in results {
        if i == victim {
            continue;
        }
        let (data, report) = r.unwrap_or_else(|e| panic!("node {i}: {e}"));
        crate::common::victim_named_once(&report, victim_id, n, &format!("node {i}"));
        assert!(report.missing.contains(&victim_id), "node {i}: {report:?}");
        assert!(
            report.attempts >= 2 && report.relayed,
            "node {i}: {report:?}"
        );
        let contributors: Vec<usize> = report.contributors.iter().map(|id| by_index[id]).collect();
        assert!(
            data == expected(&contributors, len),
            "node {i}: not exact over its contributors"
        );
    }
    overlay.shutdown().await;
}
