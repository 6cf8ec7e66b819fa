//! Real QUIC, in one process: 27 nodes on 127.0.0.1 over the emulated-latency socket with
//! the phoenix-27 topology. Every tree must become wide-area optimal, and every node must
//! discover the three clusters from its measurements; after a graceful leave the others
//! must drop the departed node, its tree and its place in the clusters, and stay optimal;
//! what QUIC put on the wire is counted, the departed node's connection included.

use overlay::local::LocalOverlay;
use overlay::proto::{Config, Liveness, NodeId};
use overlay::topology::Topology;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Polls until every node's level-1 clusters (from its status) are the topology's clusters
/// of the nodes still running; returns how long that took, or the last mismatch.
async fn wait_clusters(overlay: &LocalOverlay, timeout: Duration) -> Result<Duration, String> {
    let mut want: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
    for (node, c) in overlay.nodes.iter().zip(&overlay.clusters) {
        want.entry(*c).or_default().push(node.id());
    }
    let mut want: Vec<Vec<NodeId>> = want.into_values().collect();
    want.iter_mut().for_each(|g| g.sort());
    want.sort();
    let t = Instant::now();
    loop {
        let statuses = overlay.statuses().await;
        let wrong = statuses.iter().find_map(|s| {
            let mut got: Vec<Vec<NodeId>> = s
                .clusters
                .first()
                .map(|l| l.groups.iter().map(|g| g.members.clone()).collect())
                .unwrap_or_default();
            got.sort();
            (got != want).then(|| {
                let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
                format!("{} sees clusters of {sizes:?}", s.name)
            })
        });
        match wrong {
            None if statuses.len() == overlay.nodes.len() => return Ok(t.elapsed()),
            _ if t.elapsed() > timeout => {
                return Err(wrong.unwrap_or_else(|| "a node did not answer".into()));
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phoenix_27_over_quic_becomes_wide_area_optimal_and_survives_a_leave() {
    let _alone = crate::common::real_network();
    let topology = Topology::builtin("phoenix-27").expect("embedded");
    let wall = Instant::now();
    let mut overlay = LocalOverlay::start(topology, Config::wan())
        .await
        .expect("27 nodes start and join");
    eprintln!(
        "27 nodes started and joined in {} ms",
        wall.elapsed().as_millis()
    );

    // Bound the wait with a wide margin: the machines are shared and noisy.
    let (check, converged) = overlay
        .wait_optimal(Duration::from_secs(120), Duration::from_secs(2))
        .await;
    assert!(converged.is_some(), "trees did not converge: {check:?}");
    eprintln!(
        "phoenix-27 over QUIC: all 27 trees wide-area optimal {} ms after the first start",
        converged.unwrap().as_millis()
    );

    let took = wait_clusters(&overlay, Duration::from_secs(60)).await;
    let took = took.unwrap_or_else(|e| panic!("clusters not discovered: {e}"));
    eprintln!(
        "every node discovered the 3 clusters {} ms after the trees converged",
        took.as_millis()
    );

    // What QUIC put on the wire is counted beneath the frames.
    let before: BTreeMap<NodeId, overlay::QuicCounters> = overlay
        .statuses()
        .await
        .into_iter()
        .map(|s| (s.id, s.quic))
        .collect();
    for q in before.values() {
        assert!(
            q.datagrams_sent > 0 && q.datagrams_received > 0,
            "datagrams counted: {q:?}"
        );
        assert!(
            q.ack_frames_sent > 0 && q.stream_frames_sent > 0,
            "frames counted: {q:?}"
        );
    }

    // A node of cluster B leaves gracefully.
    let leaving = overlay.nodes.remove(12);
    let cluster = overlay.clusters.remove(12);
    assert_eq!(overlay.map.topology().clusters[cluster].name, "B");
    let id = leaving.id();
    let t = Instant::now();
    leaving.leave().await;
    let (check, repaired) = overlay
        .wait_optimal(Duration::from_secs(60), Duration::from_secs(1))
        .await;
    assert!(
        repaired.is_some(),
        "not optimal again after a leave: {check:?}"
    );
    assert_eq!(check.trees, 26);
    for status in overlay.statuses().await {
        let m = status.members.iter().find(|m| m.id == id);
        assert!(
            m.is_none_or(|m| m.state == Liveness::Left),
            "{} still sees the departed node as {:?}",
            status.name,
            m.map(|m| m.state)
        );
        assert!(
            status.trees.iter().all(|t| t.root != id),
            "tree of the departed node kept"
        );
        // The closed connection's counters stay in the totals.
        let (was, now) = (before[&status.id], status.quic);
        assert!(
            now.datagrams_sent >= was.datagrams_sent
                && now.datagrams_received >= was.datagrams_received
                && now.ack_frames_sent >= was.ack_frames_sent,
            "{}: QUIC counters went back: {was:?} then {now:?}",
            status.name
        );
    }
    eprintln!(
        "after a leave: 26 trees optimal again within {} ms",
        t.elapsed().as_millis()
    );
    match wait_clusters(&overlay, Duration::from_secs(30)).await {
        Ok(took) => eprintln!(
            "after a leave: every node's clusters without it {} ms after the trees",
            took.as_millis()
        ),
        Err(e) => panic!("the departed node is still in the clusters: {e}"),
    }
    overlay.shutdown().await;
}
