//! Bandwidth emulation: a QUIC transfer at the link's rate, tail drop beyond the buffer,
//! no limit without it.

use super::*;

/// Two clusters 5 ms apart: NICs of 1000 Mbit/s, 10 Mbit/s from near to far and
/// 1000 Mbit/s back.
const NARROW_LINK: &str = r#"
name = "emulated-bandwidth-test"
source = "unit test: a 10 Mbit/s link one way"
[[cluster]]
name = "near"
nodes = 1
latency_ms = 0.1
bandwidth_mbit = 1000
[[cluster]]
name = "far"
nodes = 1
latency_ms = 0.1
bandwidth_mbit = 1000
[[link]]
from = "near"
to = "far"
latency_ms = 5.0
bandwidth_mbit = 10
[[link]]
from = "far"
to = "near"
latency_ms = 5.0
bandwidth_mbit = 1000
"#;

fn narrow_link(bandwidth: bool) -> Arc<LatencyMap> {
    let topology = Topology::parse(NARROW_LINK, "test").unwrap();
    if bandwidth {
        LatencyMap::with_bandwidth(topology)
    } else {
        LatencyMap::new(topology)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_transfer_runs_at_the_link_bandwidth() {
    const SIZE: usize = 1_000_000;
    let map = narrow_link(true);
    let (server_config, client_config) = tls_configs();
    let server = endpoint(lo(), map.clone(), FAR, Some(server_config)).unwrap();
    let server_addr = server.local_addr().unwrap();
    // Reads a stream to its end and answers with the number of bytes read.
    tokio::spawn(async move {
        let conn = server.accept().await.context("no connection")?.await?;
        let (mut send, mut recv) = conn.accept_bi().await?;
        let data = recv.read_to_end(2 * SIZE).await?;
        send.write_all(&(data.len() as u64).to_le_bytes()).await?;
        send.finish()?;
        let _ = send.stopped().await;
        anyhow::Ok(())
    });
    // The client's socket is kept to read its drop counter.
    let socket = EmulatedUdpSocket::bind(lo(), map.clone(), NEAR).unwrap();
    let mut client = Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        None,
        socket.clone(),
        Arc::new(quinn::TokioRuntime),
    )
    .unwrap();
    client.set_default_client_config(client_config);
    let (conn, _) = connect(&client, server_addr).await;
    let start = Instant::now();
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&vec![7u8; SIZE]).await.unwrap();
    send.finish().unwrap();
    let answer = recv.read_to_end(64).await.unwrap();
    let took = start.elapsed();
    assert_eq!(answer, (SIZE as u64).to_le_bytes());
    // 1 MB at 10 Mbit/s is 0.8 s; QUIC's headers and acknowledgements come on top, and
    // congestion control may leave the link idle for a while after a loss.
    let ideal = SIZE as f64 * 8.0 / 10e6;
    eprintln!(
        "1 MB over an emulated 10 Mbit/s link: {took:?} (ideal {ideal:.2} s, {:.0}% of \
         the link), {} datagrams dropped by full pipes",
        ideal / took.as_secs_f64() * 100.0,
        socket.dropped()
    );
    assert!(
        took.as_secs_f64() >= ideal,
        "{took:?}: faster than the link"
    );
    assert!(
        took.as_secs_f64() < ideal * 3.0,
        "{took:?}: far below the link rate"
    );
    conn.close(0u32.into(), b"done");
}

#[tokio::test]
async fn a_burst_beyond_the_link_buffer_is_dropped_and_the_rest_paced() {
    let map = narrow_link(true);
    let a = EmulatedUdpSocket::bind(lo(), map.clone(), NEAR).unwrap();
    let b = EmulatedUdpSocket::bind(lo(), map.clone(), FAR).unwrap();
    let start = Instant::now();
    for i in 0..200u8 {
        a.try_send(&transmit(b.registered_addr(), &[i; 1000]))
            .unwrap();
    }
    // The 10 Mbit/s link buffers 64 KiB (50 ms at its rate is less): 65 datagrams of
    // 1000 bytes fit, counting the one being sent (a few more if the loop was slow
    // enough for some to leave meanwhile); the NIC (1000 Mbit/s) drops nothing.
    let accepted = 200 - a.dropped() as usize;
    assert!((65..=75).contains(&accepted), "dropped {}", a.dropped());
    let mut got = Vec::new();
    for _ in 0..accepted {
        got.push(recv_one(&b).await.0[0]);
    }
    let took = start.elapsed();
    assert_eq!(
        got[..65],
        (0..65).collect::<Vec<u8>>(),
        "the head of the burst passes"
    );
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order: {got:?}");
    // The last one leaves the link after 0.8 ms per datagram, then travels 5 ms.
    let ideal = Duration::from_micros(accepted as u64 * 800 + 5000);
    eprintln!("burst of 200 over 10 Mbit/s: {accepted} delivered in {took:?} (ideal {ideal:?})");
    assert!(took >= ideal, "{took:?} < {ideal:?}");
    assert!(took < ideal * 4, "{took:?}: sanity cap");
}

#[tokio::test]
async fn without_bandwidth_emulation_a_burst_is_not_limited() {
    // The same file through `LatencyMap::new`: latency only, as before bandwidth existed.
    let map = narrow_link(false);
    assert!(!map.emulates_bandwidth());
    let a = EmulatedUdpSocket::bind(lo(), map.clone(), NEAR).unwrap();
    let b = EmulatedUdpSocket::bind(lo(), map.clone(), FAR).unwrap();
    let start = Instant::now();
    for i in 0..200u8 {
        a.try_send(&transmit(b.registered_addr(), &[i; 1000]))
            .unwrap();
    }
    // With the link emulated, 135 of these would have been dropped.
    assert_eq!(a.dropped(), 0);
    assert_eq!(recv_one(&b).await.0, [0; 1000]);
    assert!(
        start.elapsed() >= Duration::from_millis(5),
        "the latency still applies"
    );
}
