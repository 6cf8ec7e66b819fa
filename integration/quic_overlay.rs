//! Real QUIC, in one process: 27 nodes on 127.0.0.1 over the emulated-latency socket with
//! the phoenix-27 topology. Every tree must become wide-area optimal; after a graceful
//! leave the others must drop the departed node and its tree and stay optimal.

use overlay::local::LocalOverlay;
use overlay::proto::{Config, Liveness};
use overlay::topology::Topology;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phoenix_27_over_quic_becomes_wide_area_optimal_and_survives_a_leave() {
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
    }
    eprintln!(
        "after a leave: 26 trees optimal again within {} ms",
        t.elapsed().as_millis()
    );
    overlay.shutdown().await;
}
