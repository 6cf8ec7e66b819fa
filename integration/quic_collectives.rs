//! Collectives over real QUIC, in one process: 27 nodes on 127.0.0.1 over the
//! emulated-latency socket with the phoenix-27 topology. Broadcast, scatter, gather and
//! reduce (and allreduce and barrier) from different roots must be exactly right; bad
//! input gets a clear error. On a small network with emulated bandwidth, store-and-forward
//! relays must wait for whole payloads and pipelined ones must not.
//!
//! `cargo test --release --test integration quic_collectives -- --nocapture` prints the figures.

use futures::StreamExt;
use overlay::api::{
    Delivery, Forwarding, INFO_KEY, Node, NodeError, NodeInfo, decode_reduce_outcome,
};
use overlay::local::LocalOverlay;
use overlay::proto::collective::MAX_INLINE_PAYLOAD;
use overlay::proto::{Config, DeliveryKind, NodeId, NumKind, Reducer};
use overlay::topology::Topology;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Collects every node's deliveries into one channel: (receiver index, delivery).
fn tap(nodes: &[Node]) -> mpsc::UnboundedReceiver<(usize, Delivery)> {
    let (tx, rx) = mpsc::unbounded_channel();
    for (i, n) in nodes.iter().enumerate() {
        let mut s = Box::pin(n.deliveries());
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(d) = s.next().await {
                let d = d.expect("this reader keeps up: nothing is dropped for it");
                if tx.send((i, d)).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// Waits until `want` deliveries of `kind` for operation `op` arrived (or 20 s passed).
async fn collect(
    rx: &mut mpsc::UnboundedReceiver<(usize, Delivery)>,
    root: NodeId,
    op: u64,
    kind: DeliveryKind,
    want: usize,
) -> Vec<(usize, Delivery)> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.len() < want {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((i, d))) if d.root == root && (op == 0 || d.op == op) && d.kind == kind => {
                got.push((i, d))
            }
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_four_collectives_are_exact_over_quic_on_phoenix_27() {
    let _alone = crate::common::real_network();
    let topology = Topology::builtin("phoenix-27").expect("embedded");
    let overlay = LocalOverlay::start(topology, Config::wan())
        .await
        .expect("27 nodes start");
    let (check, converged) = overlay
        .wait_optimal(Duration::from_secs(120), Duration::from_secs(2))
        .await;
    assert!(converged.is_some(), "trees did not converge: {check:?}");
    let nodes = &overlay.nodes;
    let n = nodes.len();
    let ids: Vec<NodeId> = nodes.iter().map(|x| x.id()).collect();
    let all: BTreeSet<NodeId> = ids.iter().copied().collect();
    let mut rx = tap(nodes);

    // Broadcast from a node of cluster C: everyone delivers exactly the payload, once.
    let root = 20;
    let sent = Instant::now();
    let report = nodes[root]
        .broadcast(b"to everyone".to_vec())
        .await
        .expect("broadcast");
    let got = collect(&mut rx, ids[root], report.op, DeliveryKind::Broadcast, n).await;
    let receivers: BTreeSet<usize> = got.iter().map(|(i, _)| *i).collect();
    assert_eq!(receivers.len(), n, "every node delivers");
    assert_eq!(got.len(), n, "nobody delivers twice");
    assert!(got.iter().all(|(_, d)| &d.payload[..] == b"to everyone"));
    // Each delivery carries when its node received it: after the start, and no earlier
    // than the emulated one-way latency from the root's cluster allows.
    let topology = overlay.map.topology();
    for (i, d) in &got {
        let floor = topology.latency(overlay.clusters[root], overlay.clusters[*i]);
        let took = d.received.saturating_duration_since(sent);
        assert!(d.received >= sent, "node {i} received before the start");
        if *i != root {
            assert!(
                took >= floor,
                "node {i} received after {took:?}, under {floor:?}"
            );
        }
    }
    assert_eq!(
        report.delivered.iter().copied().collect::<BTreeSet<_>>(),
        all
    );
    assert!(report.missing.is_empty());
    eprintln!(
        "broadcast from {root}: {n} deliveries, report after {:?}",
        report.elapsed
    );

    // Scatter from cluster A's first node: each takes its own item; an unknown id is
    // reported, not dropped silently.
    let stranger = NodeId::from_bytes([7; 16]);
    let mut items: HashMap<NodeId, Vec<u8>> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (*id, format!("item {i}").into_bytes()))
        .collect();
    items.insert(stranger, b"nobody".to_vec());
    let s = nodes[0].scatter(items).await.expect("scatter");
    let got = collect(&mut rx, ids[0], s.op, DeliveryKind::Scatter, n).await;
    assert_eq!(got.len(), n);
    for (i, d) in &got {
        assert_eq!(
            d.payload,
            format!("item {i}").into_bytes(),
            "node {i} got another's item"
        );
    }
    assert_eq!(s.unknown, vec![stranger]);
    assert_eq!(s.delivered.iter().copied().collect::<BTreeSet<_>>(), all);
    assert!(s.missing.is_empty());
    eprintln!("scatter from 0: {n} items, report after {:?}", s.elapsed);

    // Gather: every node's built-in info answer.
    let g = nodes[9].gather(INFO_KEY, Vec::new()).await.expect("gather");
    assert_eq!(g.items.len(), n);
    for (id, v) in &g.items {
        let info: NodeInfo = serde_json::from_slice(v).expect("info json");
        assert_eq!(info.id, *id);
        assert_eq!(
            info.addr,
            nodes[ids.iter().position(|x| x == id).unwrap()].local_addr()
        );
    }
    assert!(g.missing.is_empty() && g.declined.is_empty());
    eprintln!(
        "gather from 9: {} items after {:?}",
        g.items.len(),
        g.elapsed
    );

    // Reduce: sums, minima and a user-defined reducer, exact.
    for (i, node) in nodes.iter().enumerate() {
        node.publish_value("x", &vec![i as u64 + 1, 2 * i as u64])
            .await
            .unwrap();
        node.publish_value("f", &vec![i as f64 * 0.5])
            .await
            .unwrap();
        node.publish("s", vec![i as u8]).await.unwrap();
        node.register_reducer("concat-sorted", |a: &[u8], b: &[u8]| {
            let mut v = [a, b].concat();
            v.sort_unstable();
            Ok(v)
        })
        .await
        .unwrap();
    }
    let r = nodes[26]
        .reduce("x", Reducer::Sum(NumKind::U64))
        .await
        .expect("reduce");
    let sum: Vec<u64> = r.values().unwrap().unwrap();
    let k = n as u64;
    assert_eq!(sum, vec![k * (k + 1) / 2, k * (k - 1)]);
    assert_eq!(r.contributors.len(), n);
    let m = nodes[3]
        .reduce("f", Reducer::Max(NumKind::F64))
        .await
        .expect("max");
    assert_eq!(
        m.values::<Vec<f64>>().unwrap().unwrap(),
        vec![(n - 1) as f64 * 0.5]
    );
    let c = nodes[14]
        .reduce("s", Reducer::Named("concat-sorted".into()))
        .await
        .expect("named");
    assert_eq!(c.value.unwrap(), (0..n as u8).collect::<Vec<u8>>());
    eprintln!("reduce from 26: sum {sum:?} after {:?}", r.elapsed);

    // Allreduce: everyone receives the result.
    let a = nodes[5]
        .allreduce("x", Reducer::Sum(NumKind::U64))
        .await
        .expect("allreduce");
    let got = collect(&mut rx, ids[5], 0, DeliveryKind::AllReduce, n).await;
    assert_eq!(got.len(), n);
    for (_, d) in &got {
        let o = decode_reduce_outcome(d).unwrap();
        assert_eq!(o.value, a.value);
        assert_eq!(o.contributors.len(), n);
    }

    // Barrier: all 27 arrive at once; every one is released with nobody missing.
    let t = Instant::now();
    let waits = nodes.iter().map(|node| {
        let node = node.clone();
        tokio::spawn(async move { node.barrier("phase-1").await })
    });
    for w in futures::future::join_all(waits).await {
        let outcome = w.expect("task").expect("barrier");
        assert!(outcome.missing.is_empty(), "{outcome:?}");
    }
    eprintln!("barrier of {n} released after {:?}", t.elapsed());

    // Bad input: clear errors.
    let too_big = vec![0u8; MAX_INLINE_PAYLOAD + 1];
    match nodes[0].gather("x", too_big).await {
        Err(NodeError::PayloadTooLarge { len, limit }) => assert!(len > limit),
        other => panic!("oversized request accepted: {other:?}"),
    }

    // The nodes that sent an operation to several peers at once measured what a send
    // costs, and their plans go by it.
    let measured: Vec<(String, u64)> = (overlay.statuses().await.into_iter())
        .filter(|s| s.send_cost_measured)
        .map(|s| (s.name, s.send_cost_us))
        .collect();
    assert!(!measured.is_empty(), "no node measured its send cost");
    eprintln!(
        "send cost measured on {} nodes: {measured:?}",
        measured.len()
    );
    overlay.shutdown().await;
}

/// Peak resident memory of this process (VmHWM), kB.
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_mib_broadcast_arrives_identical_everywhere_over_quic() {
    let _alone = crate::common::real_network();
    const SIZE: usize = 64 << 20;
    let topology = Topology::builtin("phoenix-27").expect("embedded");
    let overlay = LocalOverlay::start(topology, Config::wan())
        .await
        .expect("27 nodes start");
    let (check, converged) = overlay
        .wait_optimal(Duration::from_secs(120), Duration::from_secs(2))
        .await;
    assert!(converged.is_some(), "trees did not converge: {check:?}");
    let nodes = &overlay.nodes;
    let n = nodes.len();
    let rss_before = peak_rss_kb();
    // Each receiver hashes its copy and keeps only the hash.
    let (tx, mut rx) = mpsc::unbounded_channel();
    for (i, node) in nodes.iter().enumerate() {
        let mut s = Box::pin(node.deliveries());
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(d) = s.next().await {
                let d = d.expect("this reader keeps up: nothing is dropped for it");
                let at = Instant::now();
                let digest = overlay::net::stream::digest(&d.payload);
                let _ = tx.send((i, d.payload.len(), digest, at));
            }
        });
    }
    let mut payload = vec![0u8; SIZE];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for chunk in payload.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    let want = overlay::net::stream::digest(&payload);
    let t = Instant::now();
    let report = nodes[13]
        .broadcast(payload)
        .await
        .expect("64 MiB broadcast");
    let took = t.elapsed();
    let mut got = Vec::new();
    while got.len() < n {
        match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
            Ok(Some(x)) => got.push(x),
            _ => break,
        }
    }
    assert_eq!(got.len(), n, "every node delivers the 64 MiB payload");
    let last = got.iter().map(|g| g.3).max().expect("deliveries") - t;
    for (i, len, digest, _) in &got {
        assert_eq!(*len, SIZE, "node {i} got a different length");
        assert_eq!(digest, &want, "node {i} got different bytes");
    }
    assert!(
        report.missing.is_empty(),
        "missing after {:?}: {:?}",
        took,
        report.missing
    );
    assert_eq!(report.delivered.len(), n);
    let peak = peak_rss_kb();
    eprintln!(
        "64 MiB broadcast from node 13 to {n} nodes over QUIC (27 nodes on 2 cores, every \
         byte encrypted and decrypted at every hop): last delivery after {:.2} s, report \
         after {:.2} s; identical SHA-256 on every node; peak RSS of the process {} MB \
         ({} MB before; {:.1} MB per node for the payload)",
        last.as_secs_f64(),
        took.as_secs_f64(),
        peak / 1024,
        rss_before / 1024,
        (peak - rss_before) as f64 / 1024.0 / n as f64
    );
    overlay.shutdown().await;
}

/// Two clusters of two nodes, 5 ms apart; every NIC 80 Mbit/s (10 MB/s), links unlimited.
const TWO_BY_TWO: &str = r#"
name = "two-by-two"
source = "test: NICs limit, so a relay's forwarding shows in the delivery times"
[[cluster]]
name = "A"
nodes = 2
latency_ms = 0.1
bandwidth_mbit = 80
[[cluster]]
name = "B"
nodes = 2
latency_ms = 0.1
bandwidth_mbit = 80
[[link]]
from = "A"
to = "B"
latency_ms = 5.0
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_and_forward_relays_only_whole_payloads_and_pipelining_does_not_wait() {
    let _alone = crate::common::real_network();
    const SIZE: usize = 4 << 20;
    let topology = Topology::parse(TWO_BY_TWO, "test").expect("valid");
    let map = overlay::net::emulated::LatencyMap::with_bandwidth(topology);
    let overlay = LocalOverlay::start_on(map, Config::wan())
        .await
        .expect("4 nodes start");
    let (check, converged) = overlay
        .wait_optimal(Duration::from_secs(60), Duration::from_secs(1))
        .await;
    assert!(converged.is_some(), "trees did not converge: {check:?}");
    let nodes = &overlay.nodes;
    let (tx, mut rx) = mpsc::unbounded_channel();
    for (i, node) in nodes.iter().enumerate() {
        let mut s = Box::pin(node.deliveries());
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(d) = s.next().await {
                let d = d.expect("this reader keeps up: nothing is dropped for it");
                let _ = tx.send((i, Instant::now(), overlay::net::stream::digest(&d.payload)));
            }
        });
    }
    let payload: Vec<u8> = (0..SIZE).map(|i| (i * 7 % 251) as u8).collect();
    let want = overlay::net::stream::digest(&payload);
    // Serializing the payload once on a relay's NIC.
    let hop = Duration::from_secs_f64(SIZE as f64 * 8.0 / 80e6);
    let mut gaps = Vec::new();
    for mode in [Forwarding::StoreAndForward, Forwarding::Pipelined] {
        for node in nodes {
            node.set_forwarding(mode).await.expect("running");
        }
        let report = nodes[0]
            .broadcast(payload.clone())
            .await
            .expect("broadcast");
        assert!(report.missing.is_empty(), "{mode:?}: {report:?}");
        let mut at = HashMap::new();
        while at.len() < nodes.len() {
            let (i, t, digest) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .expect("every node delivers")
                .expect("open");
            assert_eq!(digest, want, "{mode:?}: node {i} got other bytes");
            at.insert(i, t);
        }
        // Cluster B (nodes 2 and 3) is entered by one of them, which relays to the other.
        let gap = if at[&2] > at[&3] {
            at[&2] - at[&3]
        } else {
            at[&3] - at[&2]
        };
        eprintln!(
            "{mode:?}: B's relay and its child delivered {gap:?} apart (one NIC hop {hop:?})"
        );
        gaps.push(gap);
    }
    // Store-and-forward: the child's copy leaves the relay only after the relay has it all.
    assert!(
        gaps[0] >= hop,
        "store-and-forward gap {:?} < {hop:?}",
        gaps[0]
    );
    // Pipelined: the child's copy follows the relay's closely.
    assert!(
        gaps[1] < gaps[0],
        "pipelined {:?} vs {:?}",
        gaps[1],
        gaps[0]
    );
    overlay.shutdown().await;
}
