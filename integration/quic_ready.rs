//! `Node::ready`, `Node::nearest` and `Node::clusters` on real nodes over QUIC: a node
//! that joined is ready once it knows every tree and has a measured path to each root, and
//! the nearest members come sorted by measured RTT.

use overlay::Node;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_nodes_become_ready_and_know_who_is_near() {
    let _net = crate::common::real_network();
    let any = "127.0.0.1:0".parse().unwrap();
    let first = Node::builder().listen(any).start().await.expect("first");
    let mut nodes = vec![first.clone()];
    for _ in 0..3 {
        let n = Node::builder()
            .listen(any)
            .join(first.local_addr())
            .token(first.token())
            .start()
            .await
            .expect("join");
        nodes.push(n);
    }
    for n in &nodes {
        n.ready_within(Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{} not ready: {e}", n.id().short()));
    }
    // Once ready, every tree it knows has a path and there is one per member.
    let last = nodes.last().expect("nodes");
    let status = last.status().await.expect("status");
    assert_eq!(status.trees.len(), nodes.len(), "one tree per member");
    assert!(status.trees.iter().all(|t| t.connected));
    // Probing measures the peers that are not tree neighbours soon after.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let near = loop {
        let near = last.nearest(2).await.expect("nearest");
        if near.len() == 2 || std::time::Instant::now() > deadline {
            break near;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(near.len(), 2, "two of three peers asked for");
    assert!(near.iter().all(|m| m.id != last.id()), "never itself");
    assert!(near[0].rtt_ms <= near[1].rtt_ms, "nearest first: {near:?}");
    assert!(last.nearest(10).await.expect("nearest").len() <= 3);
    let _ = last.clusters().await.expect("clusters");
    // A bound that cannot be met says what is missing rather than hanging.
    let lonely = Node::builder()
        .listen(any)
        .start()
        .await
        .expect("a node of its own");
    lonely
        .ready_within(Duration::from_secs(5))
        .await
        .expect("a lone node is ready");
    for n in nodes.iter().chain([&lonely]) {
        n.leave().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_broadcasts_arrive_decoded_and_foreign_ones_as_decode_errors() {
    use futures::StreamExt;
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Step {
        n: u32,
        loss: f64,
    }
    let _net = crate::common::real_network();
    let any = "127.0.0.1:0".parse().unwrap();
    let a = Node::builder().listen(any).start().await.expect("a");
    let b = Node::builder()
        .listen(any)
        .join(a.local_addr())
        .token(a.token())
        .start()
        .await
        .expect("b");
    b.ready_within(Duration::from_secs(20))
        .await
        .expect("ready");
    a.ready_within(Duration::from_secs(20))
        .await
        .expect("ready");
    let mut steps = b.deliveries_of::<Step>();
    a.broadcast_value(&Step { n: 7, loss: 0.25 })
        .await
        .expect("typed");
    a.broadcast(vec![0xff; 3]).await.expect("bytes");
    // Two broadcasts are two operations: nothing orders them (under load the second one
    // was seen first), so both are collected before they are judged.
    let limit = Duration::from_secs(10);
    let (mut decoded, mut foreign) = (0, 0);
    for _ in 0..2 {
        let got = tokio::time::timeout(limit, steps.next())
            .await
            .expect("in time");
        match got.expect("the stream goes on") {
            Ok((from, step)) => {
                assert_eq!((from, step), (a.id(), Step { n: 7, loss: 0.25 }));
                decoded += 1;
            }
            Err(overlay::DeliveryError::Decode { root, .. }) => {
                assert_eq!(root, a.id());
                foreign += 1;
            }
            Err(other) => panic!("expected a Step or a decode error, got {other:?}"),
        }
    }
    assert_eq!((decoded, foreign), (1, 1), "one Step and one decode error");
    a.leave().await;
    b.leave().await;
}
