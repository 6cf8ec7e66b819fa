//! Seed inputs for the fuzz entry points: real encodings of every kind of input, so that
//! mutations start from what nodes actually exchange rather than from noise. The seed
//! corpus of `integration/fuzz` is written from these, and the property test mutates them.

use super::fixed_token;
use crate::net::frame::append_frame;
use crate::net::token::{JoinToken, Role};
use crate::proto::message::UpPart;
use crate::proto::{
    AdvertEntry, BandwidthEdge, BulkHeader, ClusterEdge, ClusterMessage, ClusterSummary,
    CollectiveMessage, DataHeader, DownBody, GossipMessage, Liveness, MemberRecord, Message,
    NodeId, NumKind, OpId, Packet, Purpose, QueryMessage, Reducer,
};
use crate::topology::Topology;
use std::sync::Arc;

/// One packet of every kind (every message, gossip and query variant, every collective
/// body, both data-plane headers), with small but non-empty fields.
pub fn packets() -> Vec<Packet> {
    let (a, b) = (NodeId::from_seed(1, 1), NodeId::from_seed(1, 2));
    let op = OpId { root: a, nonce: 9 };
    let entry = AdvertEntry {
        root: a,
        serial: 7,
        dist_us: 15_100,
        connected: true,
    };
    let down = |body| {
        Message::Collective(CollectiveMessage::Down {
            op,
            budget_us: 1000,
            direct: false,
            more: true,
            plan: vec![b],
            hoisted: vec![a],
            covered: vec![7, 65535],
            body,
            route: vec![(a, b)],
            group: Some("workers".into()),
        })
    };
    let messages = vec![
        Message::Ping {
            sent_us: 42,
            rtt_hint_us: Some(300),
            watch: true,
        },
        Message::Pong { sent_us: u64::MAX },
        Message::PongPing {
            sent_us: 1,
            ping_sent_us: u64::MAX,
            watch: true,
        },
        Message::Advert {
            entries: vec![entry, entry],
        },
        Message::TreeUpdate(entry),
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
        Message::TreeUpdates(vec![entry]),
        Message::Resync,
        down(DownBody::Broadcast {
            payload: b"hello".to_vec(),
            purpose: Purpose::Data,
        }),
        down(DownBody::Scatter {
            items: vec![(a, vec![1]), (b, vec![2, 3])],
        }),
        down(DownBody::Stream {
            len: 1 << 20,
            digest: [3; 32],
        }),
        down(DownBody::Gather {
            key: "info".into(),
            request: vec![],
            purpose: Purpose::AllGather { of: 2 },
        }),
        down(DownBody::Reduce {
            key: "k".into(),
            request: vec![1, 2],
            reducer: Reducer::Sum(NumKind::U64),
            purpose: Purpose::AllReduce { of: 3 },
        }),
        down(DownBody::Reduce {
            key: "count".into(),
            request: vec![],
            reducer: Reducer::Named("json-max".into()),
            purpose: Purpose::BarrierRelease { of: 4 },
        }),
        Message::Collective(CollectiveMessage::Up {
            op,
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
                bandwidth: vec![BandwidthEdge {
                    from: b,
                    kbps: 20_000,
                    samples: 3,
                }]
                .into(),
            })],
        }),
        Message::TrainRequest {
            id: 4,
            packets: 16,
            size: 1200,
        },
        Message::PathSaturated { kbps: 3_120 },
    ];
    let record = |id, port, state| MemberRecord {
        id,
        name: "campus-1".into(),
        addr: std::net::SocketAddr::from(([10, 77, 1, 2], port)),
        incarnation: 3,
        boot: 1_700_000_000_000,
        state,
        groups: vec!["workers".into()],
        // The size of an Ed25519 proof: public key and signature.
        proof: vec![0x5a; 96],
    };
    let mut v6 = record(b, 7400, Liveness::Suspect);
    v6.addr = "[::1]:7401".parse().expect("an address");
    let gossip = vec![
        GossipMessage::Join {
            me: record(a, 7400, Liveness::Alive),
        },
        GossipMessage::Sync {
            members: vec![record(a, 1, Liveness::Dead).into(), v6.clone().into()],
            reply: true,
        },
        GossipMessage::Rumor {
            updates: vec![record(b, 2, Liveness::Left).into()],
        },
        GossipMessage::Probe {
            seq: 1,
            updates: vec![],
        },
        GossipMessage::Ack {
            seq: 1,
            target: a,
            updates: vec![v6.clone().into()],
        },
        GossipMessage::ProbeRequest {
            seq: 2,
            target: b,
            updates: vec![],
        },
        GossipMessage::Digest { hash: 99, live: 5 },
    ];
    let queries = vec![
        QueryMessage::TreeRequest { id: 1, root: a },
        QueryMessage::TreeReply {
            id: 1,
            root: a,
            parent: Some(b),
            dist_us: Some(2_000),
        },
        QueryMessage::TreeReply {
            id: 2,
            root: b,
            parent: None,
            dist_us: None,
        },
    ];
    let mut out: Vec<Packet> = messages.into_iter().map(Packet::Overlay).collect();
    out.extend(gossip.into_iter().map(Packet::Gossip));
    out.extend(queries.into_iter().map(Packet::Query));
    out.push(data_header(5));
    out.push(Packet::Bulk(BulkHeader {
        op: 7,
        tag: 1,
        len: 5,
    }));
    out
}

/// The header of a data stream of `len` bytes.
fn data_header(len: u64) -> Packet {
    Packet::Data(DataHeader {
        op: OpId {
            root: NodeId::from_seed(1, 1),
            nonce: 9,
        },
        len,
        digest: crate::net::stream::digest(&vec![b'x'; len as usize]),
    })
}

fn encode(p: &Packet) -> Vec<u8> {
    p.encode().expect("a seed packet encodes")
}

/// Seeds of [`super::packet`]: every packet of [`packets`], encoded.
pub fn packet_inputs() -> Vec<Vec<u8>> {
    packets().iter().map(encode).collect()
}

/// Seeds of [`super::frame`]: whole streams as peers send them.
pub fn frame_inputs() -> Vec<Vec<u8>> {
    let framed = |bodies: &[Vec<u8>]| {
        let mut out = Vec::new();
        for body in bodies {
            append_frame(&mut out, body).expect("within the limit");
        }
        out
    };
    let all = packet_inputs();
    let mut out: Vec<Vec<u8>> = all
        .iter()
        .map(|p| framed(std::slice::from_ref(p)))
        .collect();
    // Control streams carry several packets back to back.
    out.push(framed(&all[..6]));
    // Data and bulk streams: the header, then raw payload.
    let mut data = framed(&[encode(&data_header(5))]);
    data.extend_from_slice(b"xxxxx");
    out.push(data);
    let mut bulk = framed(&[all[all.len() - 1].clone()]);
    bulk.extend_from_slice(b"12345");
    out.push(bulk);
    // A data header after the first frame is dropped, not obeyed.
    out.push(framed(&[all[0].clone(), encode(&data_header(5))]));
    // The join-token proof the acceptor reads first.
    let proof = fixed_token().proof(Role::Dialer, &[0; 32]);
    out.push(framed(&[proof.to_vec()]));
    // Framing errors: an announced length over the limit, a cut-off body and prefix.
    out.push(vec![0x00, 0x10, 0x00, 0x01, 3]);
    out.push(vec![0, 0, 0, 10, 3, 0, 0]);
    out.push(vec![0, 0]);
    out
}

/// Seeds of [`super::token`]: token texts as given on the command line or read from a
/// token file, and keying material followed by a proof (right, wrong, short).
pub fn token_inputs() -> Vec<Vec<u8>> {
    let fixed = fixed_token().to_string();
    let mut out: Vec<Vec<u8>> = [
        fixed.clone(),
        format!("{fixed}\n"),
        format!("  {}\t", fixed.to_uppercase().replace("OVL1-", "ovl1-")),
        JoinToken::generate().to_string(),
        "ovl1-".into(),
        "ovl1-zz".into(),
        fixed[..fixed.len() - 1].into(),
        format!("{fixed}0"),
        "token".into(),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect();
    let exporter = [7u8; 32];
    for role in [Role::Dialer, Role::Acceptor] {
        let proof = fixed_token().proof(role, &exporter);
        let mut right = exporter.to_vec();
        right.extend_from_slice(&proof);
        let mut wrong = right.clone();
        wrong[40] ^= 1;
        out.push(right.clone());
        out.push(wrong);
        out.push(right[..50].to_vec());
    }
    out
}

/// Seeds of [`super::admin_request`]: every request as the command line sends it (one
/// JSON line; a broadcast's payload after it), and a few broken ones.
#[cfg(feature = "cli")]
pub fn admin_inputs() -> Vec<Vec<u8>> {
    use crate::admin::{AdminRequest, JsonOp};
    let line = |r: &AdminRequest| {
        let mut out = serde_json::to_vec(r).expect("a request serializes");
        out.push(b'\n');
        out
    };
    let publish = |json: &str| AdminRequest::Publish {
        key: "load".into(),
        json: json.into(),
    };
    let mut out: Vec<Vec<u8>> = [
        AdminRequest::Status,
        AdminRequest::Tree {
            root: "campus-1".into(),
        },
        AdminRequest::GatherInfo,
        AdminRequest::ReduceCount,
        AdminRequest::Leave,
        publish("1.5"),
        publish("[1, 2, 3]"),
        publish("{\"a\": [true, null, \"x\"]}"),
        AdminRequest::Gather { key: "load".into() },
        AdminRequest::Reduce {
            key: "load".into(),
            op: JsonOp::Sum,
        },
        AdminRequest::Reduce {
            key: "load".into(),
            op: JsonOp::Max,
        },
        AdminRequest::Listen,
    ]
    .iter()
    .map(line)
    .collect();
    let mut broadcast = line(&AdminRequest::Broadcast { len: 5 });
    broadcast.extend_from_slice(b"hello");
    out.push(broadcast.clone());
    // A payload cut short, and one announced over the limit.
    out.push(broadcast[..broadcast.len() - 2].to_vec());
    out.push(line(&AdminRequest::Broadcast { len: u64::MAX }));
    out.push(b"{\"Tree\":{}}\n".to_vec());
    out.push(b"\"Status\"".to_vec());
    out
}

/// Seeds of [`super::topology`]: every shipped topology file, and small files that break
/// one rule each.
pub fn topology_inputs() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Topology::builtin_names()
        .filter_map(Topology::builtin_text)
        .map(|t| t.as_bytes().to_vec())
        .collect();
    let head = "name = \"t\"\nsource = \"s\"\n";
    let a = "[[cluster]]\nname = \"A\"\nnodes = 2\nlatency_ms = 0.5\n";
    let b = "[[cluster]]\nname = \"B\"\nnodes = 1\nlatency_ms = 1\nsite = \"x\"\n";
    let link = "[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 10\nbandwidth_mbit = 20\n";
    for body in [
        format!("{a}{b}{link}"),
        format!("{a}{b}"),
        format!("{a}{a}"),
        format!("{a}{b}{link}{link}"),
        a.replace("0.5", "-1"),
        a.replace("= 2", "= 0"),
        a.replace("= 2", "= 99999999999"),
        format!("{a}bandwidth_mbit = nan\n"),
        String::new(),
    ] {
        out.push(format!("{head}{body}").into_bytes());
    }
    out
}

/// Seeds of [`super::reduce`]: each built-in reducer on pairs of real encoded vectors
/// (equal and different lengths, empty, extreme values).
pub fn reduce_inputs() -> Vec<Vec<u8>> {
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (enc(&[1i64, -2, i64::MAX]), enc(&[3i64, i64::MIN, 1])),
        (enc(&[1u64, u64::MAX]), enc(&[2u64, 5])),
        (enc(&[0.5f64, f64::NAN]), enc(&[-1.0f64, f64::INFINITY])),
        (enc(&[1u64, 2, 3]), enc(&[1u64])),
        (enc::<u64>(&[]), enc::<u64>(&[])),
    ];
    let mut out = Vec::new();
    for pick in 0..9u8 {
        for (a, b) in &pairs {
            let split = (a.len() as u16).to_be_bytes();
            let mut input = vec![pick, split[0], split[1]];
            input.extend_from_slice(a);
            input.extend_from_slice(b);
            out.push(input);
        }
    }
    out
}

/// A vector encoded as a peer sends it.
fn enc<T: serde::Serialize>(v: &[T]) -> Vec<u8> {
    postcard::to_allocvec(v).expect("a vector encodes")
}
