//! Unit tests of the wire messages.

use super::*;
use crate::proto::rng::SplitMix64;
use std::sync::Arc;

fn sample() -> Vec<Message> {
    let a = NodeId::from_seed(1, 1);
    let b = NodeId::from_seed(1, 2);
    let e = AdvertEntry {
        root: a,
        serial: 7,
        dist_us: 15_100,
        connected: true,
    };
    vec![
        Message::Ping {
            sent_us: 42,
            rtt_hint_us: Some(300),
            watch: true,
        },
        Message::Pong { sent_us: 42 },
        Message::Advert {
            entries: vec![e, e],
        },
        Message::TreeUpdate(e),
        Message::Attach { root: a },
        Message::Detach { root: b },
        Message::SerialRequest { root: a, serial: 8 },
        Message::AdvertRequest {
            roots: vec![(a, 3)],
        },
        Message::ParentQuery { roots: vec![a, b] },
        Message::ParentHint {
            parents: vec![(a, b)],
        },
        Message::Links {
            attach: vec![a],
            detach: vec![b],
        },
        Message::TreeUpdates(vec![e, e]),
        Message::Resync,
        Message::Collective(CollectiveMessage::Down {
            op: OpId { root: a, nonce: 9 },
            budget_us: 1000,
            direct: false,
            more: true,
            plan: vec![b],
            hoisted: vec![a],
            covered: vec![7, 65535],
            body: DownBody::Reduce {
                key: "k".into(),
                request: vec![1, 2],
                reducer: Reducer::Sum(NumKind::U64),
                purpose: Purpose::AllReduce { of: 3 },
            },
            route: vec![(a, b)],
            group: Some("workers".into()),
        }),
        Message::TrainRequest {
            id: 4,
            packets: 16,
            size: 1200,
        },
        Message::PathSaturated { kbps: 3_120 },
        Message::Collective(CollectiveMessage::Up {
            op: OpId { root: b, nonce: 1 },
            last: true,
            part: UpPart {
                reached: vec![a, b],
                declined: vec![b],
                items: vec![(a, vec![7])],
                contributors: vec![a],
                value: Some(vec![1]),
                exits: vec![(b, a)],
            },
        }),
        Message::Cluster(ClusterMessage::Digest { hash: 7, count: 2 }),
        Message::Cluster(ClusterMessage::Buckets {
            hashes: vec![1, 2, 3],
        }),
        Message::Cluster(ClusterMessage::FineBuckets {
            buckets: 1,
            hashes: vec![4; 32],
        }),
        Message::Cluster(ClusterMessage::Versions {
            versions: vec![(a, 3), (b, 1)],
            buckets: 5,
            fine: vec![70, 1023],
            reply: true,
        }),
        Message::Cluster(ClusterMessage::Summaries {
            summaries: vec![Arc::new(ClusterSummary {
                node: a,
                version: 4,
                edges: vec![ClusterEdge {
                    peer: b,
                    rtt_us: 3_000,
                }]
                .into(),
                bandwidth: Arc::from([]),
            })],
        }),
    ]
}

#[test]
fn every_message_round_trips_and_reports_its_size() {
    for m in sample() {
        let bytes = m.encode().expect("encodes");
        assert_eq!(bytes[0], WIRE_VERSION);
        assert_eq!(bytes.len(), m.encoded_len());
        assert_eq!(Message::decode(&bytes), Ok(m));
    }
}

#[test]
fn bad_frames_are_errors_never_panics() {
    assert_eq!(Message::decode(&[]), Err(WireError::Empty));
    assert!(matches!(
        Message::decode(&[9, 0]),
        Err(WireError::Version { got: 9, .. })
    ));
    let big = vec![WIRE_VERSION; MAX_MESSAGE_BYTES + 1];
    assert!(matches!(
        Message::decode(&big),
        Err(WireError::TooLarge { .. })
    ));
    let mut good = Message::Pong { sent_us: 1 }.encode().unwrap();
    good.push(0);
    assert_eq!(Message::decode(&good), Err(WireError::Trailing(1)));
    // Truncations of every message, and random bytes: errors, no panic.
    for m in sample() {
        let bytes = m.encode().unwrap();
        for cut in 1..bytes.len() {
            assert!(Message::decode(&bytes[..cut]).is_err());
        }
    }
    let mut rng = SplitMix64::new(5);
    for _ in 0..20_000 {
        let len = rng.below(64) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        if let Some(b) = bytes.first_mut() {
            *b = WIRE_VERSION;
        }
        let _ = Message::decode(&bytes);
    }
}

#[test]
fn the_largest_cluster_messages_fit_in_a_frame() {
    let id = NodeId::from_seed(0, 0);
    let edge = ClusterEdge {
        peer: id,
        rtt_us: u32::MAX,
    };
    let summary = Arc::new(ClusterSummary {
        node: id,
        version: u32::MAX,
        edges: vec![edge; MAX_CLUSTER_EDGES].into(),
        bandwidth: Arc::from([]),
    });
    let summaries = Message::Cluster(ClusterMessage::Summaries {
        summaries: vec![summary.clone(); MAX_CLUSTER_SUMMARIES],
    });
    let versions = Message::Cluster(ClusterMessage::Versions {
        versions: vec![(id, u32::MAX); MAX_CLUSTER_VERSIONS],
        buckets: u32::MAX,
        fine: (0..1024).collect(),
        reply: true,
    });
    let buckets = Message::Cluster(ClusterMessage::Buckets {
        hashes: vec![u32::MAX; CLUSTER_BUCKETS],
    });
    let fine = Message::Cluster(ClusterMessage::FineBuckets {
        buckets: u32::MAX,
        hashes: vec![u32::MAX; CLUSTER_BUCKETS * CLUSTER_BUCKETS],
    });
    for m in [summaries, versions, buckets, fine] {
        assert!(m.encode().is_ok_and(|b| b.len() < MAX_MESSAGE_BYTES / 4));
    }
    // One summary: about 21 bytes per edge.
    let one = Message::Cluster(ClusterMessage::Summaries {
        summaries: vec![summary],
    });
    assert!(one.encoded_len() <= 30 + 23 * MAX_CLUSTER_EDGES);
}

#[test]
fn an_oversized_message_is_refused_at_encoding() {
    let e = AdvertEntry {
        root: NodeId::from_seed(0, 0),
        serial: u32::MAX,
        dist_us: u32::MAX,
        connected: true,
    };
    let m = Message::Advert {
        entries: vec![e; MAX_MESSAGE_BYTES / 20],
    };
    assert!(matches!(m.encode(), Err(WireError::TooLarge { .. })));
}
