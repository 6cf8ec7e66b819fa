//! Tests of the emulated socket: latency, bandwidth, queues and drops, over real loopback
//! sockets and real QUIC.

use super::*;
use anyhow::Context as _;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, ClientConfig, Connection, Endpoint, ServerConfig};
use std::io::IoSliceMut;
use tokio::time::Instant;

mod bandwidth;

/// Two clusters: 1 ms inside each, 50 ms one way between them.
const TWO_CLUSTERS: &str = r#"
name = "emulated-test"
source = "unit test: 1 ms intra-cluster, 50 ms between clusters"
[[cluster]]
name = "near"
nodes = 2
latency_ms = 1.0
[[cluster]]
name = "far"
nodes = 1
latency_ms = 1.0
[[link]]
from = "near"
to = "far"
latency_ms = 50.0
"#;

const NEAR: usize = 0;
const FAR: usize = 1;

fn two_clusters() -> Arc<LatencyMap> {
    LatencyMap::new(Topology::parse(TWO_CLUSTERS, "test").unwrap())
}

fn lo() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn transmit(dest: SocketAddr, contents: &[u8]) -> Transmit<'_> {
    Transmit {
        destination: dest,
        ecn: None,
        contents,
        segment_size: None,
        src_ip: None,
    }
}

/// Receives one datagram through the quinn-facing receive path.
async fn recv_one(socket: &EmulatedUdpSocket) -> (Vec<u8>, SocketAddr) {
    let mut buf = vec![0u8; 2048];
    let meta = std::future::poll_fn(|cx| {
        let mut bufs = [IoSliceMut::new(&mut buf)];
        let mut meta = [RecvMeta::default()];
        socket
            .poll_recv(cx, &mut bufs, &mut meta)
            .map(|r| r.map(|n| (n, meta[0])))
    })
    .await
    .unwrap();
    assert_eq!(meta.0, 1);
    buf.truncate(meta.1.len);
    (buf, meta.1.addr)
}

/// A self-signed certificate for "localhost" and a client that trusts exactly it.
fn tls_configs() -> (ServerConfig, ClientConfig) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = ck.cert.der().clone();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der());
    let server = ServerConfig::with_single_cert(vec![cert.clone()], key.into()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = ClientConfig::with_root_certificates(Arc::new(roots)).unwrap();
    (server, client)
}

/// Echoes every bidirectional stream of every connection back to its sender.
fn spawn_echo_server(server: Endpoint) {
    tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                    tokio::spawn(async move {
                        let data = recv.read_to_end(64 * 1024).await?;
                        send.write_all(&data).await?;
                        send.finish()?;
                        // Keep the stream until the peer has everything.
                        let _ = send.stopped().await;
                        anyhow::Ok(())
                    });
                }
            });
        }
    });
}

/// Connects `client` to `server`; returns the connection and how long the handshake took.
async fn connect(client: &Endpoint, server: SocketAddr) -> (Connection, Duration) {
    let start = Instant::now();
    let conn = client
        .connect(server, "localhost")
        .unwrap()
        .await
        .expect("handshake");
    (conn, start.elapsed())
}

/// Round trip of a small echo on a fresh bidirectional stream.
async fn echo_rtt(conn: &Connection) -> Duration {
    let start = Instant::now();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(b"ping").await.unwrap();
    send.finish().unwrap();
    let back = recv.read_to_end(1024).await.unwrap();
    assert_eq!(back, b"ping");
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_echo_pays_the_topology_latency() {
    let topology = Topology::builtin("fig2-shortcut").unwrap();
    let root = topology.cluster_index("root").unwrap();
    let b = topology.cluster_index("B").unwrap();
    let map = LatencyMap::new(topology);
    let (server_config, client_config) = tls_configs();
    let server = endpoint(lo(), map.clone(), root, Some(server_config)).unwrap();
    let server_addr = server.local_addr().unwrap();
    spawn_echo_server(server);
    let mut client = endpoint(lo(), map.clone(), b, None).unwrap();
    client.set_default_client_config(client_config);
    let client_addr = client.local_addr().unwrap();

    let there = map.one_way(client_addr, server_addr).unwrap();
    let back = map.one_way(server_addr, client_addr).unwrap();
    assert_eq!(there, Duration::from_millis(100));
    let round = there + back;

    let (conn, handshake) = connect(&client, server_addr).await;
    let mut rtts = Vec::new();
    for _ in 0..3 {
        rtts.push(echo_rtt(&conn).await);
    }
    eprintln!(
        "fig2-shortcut B->root: one-way {there:?}, handshake {handshake:?}, \
         echo RTTs {rtts:?}, quinn RTT estimate {:?}",
        conn.rtt()
    );
    // The client hears the server's handshake reply only after a full round trip.
    assert!(handshake >= round, "handshake {handshake:?} < {round:?}");
    for rtt in &rtts {
        assert!(*rtt >= round, "echo {rtt:?} < {round:?}");
        assert!(*rtt < round * 10, "echo {rtt:?}: sanity cap");
    }
    conn.close(0u32.into(), b"done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intra_cluster_echo_is_faster_than_inter_cluster() {
    let map = two_clusters();
    let (server_config, client_config) = tls_configs();
    let server = endpoint(lo(), map.clone(), NEAR, Some(server_config)).unwrap();
    let server_addr = server.local_addr().unwrap();
    spawn_echo_server(server);

    let mut rtt = Vec::new();
    for cluster in [NEAR, FAR] {
        let mut client = endpoint(lo(), map.clone(), cluster, None).unwrap();
        client.set_default_client_config(client_config.clone());
        let (conn, handshake) = connect(&client, server_addr).await;
        let mut best = Duration::MAX;
        for _ in 0..3 {
            best = best.min(echo_rtt(&conn).await);
        }
        let expected = map.topology().latency(cluster, NEAR) * 2;
        eprintln!(
            "cluster {cluster} -> {NEAR}: expected round trip {expected:?}, \
             handshake {handshake:?}, best echo {best:?}"
        );
        assert!(best >= expected, "echo {best:?} < {expected:?}");
        rtt.push(best);
        conn.close(0u32.into(), b"done");
    }
    let (intra, inter) = (rtt[0], rtt[1]);
    assert!(
        intra + Duration::from_millis(30) < inter,
        "intra {intra:?} vs inter {inter:?}"
    );
}

#[tokio::test]
async fn datagrams_arrive_after_the_one_way_latency_in_order() {
    let map = two_clusters();
    let a = EmulatedUdpSocket::bind(lo(), map.clone(), NEAR).unwrap();
    let b = EmulatedUdpSocket::bind(lo(), map.clone(), FAR).unwrap();
    let dest = b.registered_addr();
    let start = Instant::now();
    for i in 0..100u8 {
        a.try_send(&transmit(dest, &[i])).unwrap();
    }
    // A transmit with a segment size carries several datagrams; each keeps its boundary.
    a.try_send(&Transmit {
        segment_size: Some(4),
        ..transmit(dest, b"abcdefghij")
    })
    .unwrap();
    // Counted as sent: 100 one-byte datagrams and three segments of 10 bytes.
    assert_eq!(map.sent(), (110, 103));
    for i in 0..100u8 {
        let (data, from) = recv_one(&b).await;
        assert_eq!((data.as_slice(), from), (&[i][..], a.registered_addr()));
    }
    let elapsed = start.elapsed();
    for want in [&b"abcd"[..], b"efgh", b"ij"] {
        assert_eq!(recv_one(&b).await.0, want);
    }
    eprintln!("near->far datagrams: first batch after {elapsed:?} (one-way 50 ms)");
    assert!(elapsed >= Duration::from_millis(50), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}: sanity cap");
}

#[tokio::test]
async fn unknown_destination_is_not_delayed() {
    let map = two_clusters();
    let a = EmulatedUdpSocket::bind(lo(), map.clone(), FAR).unwrap();
    // A plain socket, not in the map.
    let plain = tokio::net::UdpSocket::bind(lo()).await.unwrap();
    let dest = plain.local_addr().unwrap();
    assert_eq!(map.one_way(a.registered_addr(), dest), None);
    let start = Instant::now();
    a.try_send(&transmit(dest, b"x")).unwrap();
    let mut buf = [0u8; 16];
    let (n, _) = plain.recv_from(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"x");
    assert!(start.elapsed() < Duration::from_millis(40));
}

#[tokio::test]
async fn full_queue_drops_and_counts() {
    let map = two_clusters();
    let limits = QueueLimits {
        datagrams: 10,
        bytes: 1 << 20,
    };
    let a = EmulatedUdpSocket::bind_with_limits(lo(), map.clone(), NEAR, limits).unwrap();
    let b = EmulatedUdpSocket::bind(lo(), map.clone(), FAR).unwrap();
    for i in 0..100u8 {
        a.try_send(&transmit(b.registered_addr(), &[i])).unwrap();
    }
    assert_eq!((a.queued(), a.dropped()), (10, 90));
    assert_eq!(
        map.sent(),
        (100, 100),
        "a datagram dropped on the way was still sent"
    );
    // The ten that fit are the first ten, delivered in order; nothing else follows.
    for i in 0..10u8 {
        assert_eq!(recv_one(&b).await.0, [i]);
    }
    let more = tokio::time::timeout(Duration::from_millis(120), recv_one(&b)).await;
    assert!(more.is_err(), "an 11th datagram arrived");
    assert_eq!(a.queued(), 0);
}

#[test]
fn delay_queue_is_bounded_by_datagrams_and_bytes() {
    let dest: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let now = Instant::now();
    let delay = Duration::from_millis(5);

    let mut q = DelayQueue::new(QueueLimits {
        datagrams: 3,
        bytes: 1000,
    });
    for _ in 0..5 {
        q.push(now, delay, dest, &[0; 10]);
    }
    assert_eq!((q.len(), q.bytes, q.dropped), (3, 30, 2));

    let mut q = DelayQueue::new(QueueLimits {
        datagrams: 1000,
        bytes: 25,
    });
    for _ in 0..5 {
        q.push(now, delay, dest, &[0; 10]);
    }
    assert_eq!((q.len(), q.bytes, q.dropped), (2, 20, 3));
    // Leaving makes room again.
    assert!(q.pop_due(now).is_none(), "not due yet");
    assert!(q.pop_due(now + delay).is_some());
    assert!(q.push(now, delay, dest, &[0; 5]).is_some());
    assert_eq!((q.len(), q.bytes), (2, 15));
}

#[test]
fn delay_queue_orders_by_due_then_fifo_and_keeps_per_destination_order() {
    let d1: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let d2: SocketAddr = "127.0.0.1:2".parse().unwrap();
    let now = Instant::now();
    let ms = Duration::from_millis;
    let mut q = DelayQueue::new(QueueLimits::default());
    q.push(now, ms(50), d1, b"a");
    q.push(now, ms(10), d2, b"b");
    q.push(now, ms(10), d2, b"c");
    // d1's latency dropped (re-registration): "d" must still not overtake "a".
    q.push(now, ms(1), d1, b"d");
    let order: Vec<_> = std::iter::from_fn(|| q.pop_due(now + ms(100)))
        .map(|d| d.bytes[0])
        .collect();
    assert_eq!(order, b"bcad");
}

#[tokio::test]
async fn latency_map_lookups_and_errors() {
    let map = two_clusters();
    let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
    let b: SocketAddr = "127.0.0.1:2000".parse().unwrap();
    assert_eq!(map.one_way(a, b), None);
    map.register(a, NEAR).unwrap();
    assert_eq!(map.one_way(a, b), None, "one side unknown");
    assert_eq!(map.one_way(b, a), None, "one side unknown");
    map.register(b, FAR).unwrap();
    assert_eq!(map.one_way(a, b), Some(Duration::from_millis(50)));
    assert_eq!(map.one_way(a, a), Some(Duration::from_millis(1)));
    let err = map.register(a, 2).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert_eq!(
        map.cluster_of(a),
        Some(NEAR),
        "failed register changes nothing"
    );
    map.unregister(b);
    assert_eq!(map.one_way(a, b), None);

    let err = EmulatedUdpSocket::bind(lo(), map.clone(), 7).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn bind_outside_a_runtime_is_an_error() {
    let err = EmulatedUdpSocket::bind(lo(), two_clusters(), NEAR).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Other);
}

#[tokio::test]
async fn drop_unregisters_delivers_in_flight_and_ends_the_task() {
    let map = two_clusters();
    let a = EmulatedUdpSocket::bind(lo(), map.clone(), NEAR).unwrap();
    let b = EmulatedUdpSocket::bind(lo(), map.clone(), FAR).unwrap();
    let a_addr = a.registered_addr();
    a.try_send(&transmit(b.registered_addr(), b"last")).unwrap();
    let task_state = Arc::downgrade(&a.shared);
    drop(a);
    assert_eq!(map.cluster_of(a_addr), None);
    // Already sent means already on the wire.
    assert_eq!(recv_one(&b).await.0, b"last");
    let deadline = Instant::now() + Duration::from_secs(2);
    while task_state.strong_count() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(task_state.strong_count(), 0, "sender task still running");
}
