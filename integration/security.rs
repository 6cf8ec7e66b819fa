//! Admission and robustness against hostile peers, in process, over real QUIC on
//! 127.0.0.1:
//! - a node with another overlay's token cannot join, and the member counts the failure;
//! - a peer cannot pass for another node: the TLS handshake fails when the key does not
//!   match the id the dialer asks for;
//! - connections that never prove the token, or prove a wrong one, get nothing processed;
//! - an admitted peer sending random, truncated or oversized frames gets them dropped (or
//!   its connection closed) without harming the node, which keeps serving other peers;
//!   one that keeps doing so is closed and kept out for a while.

mod frames;
mod records;

use overlay::api::{Node, NodeStatus};
use overlay::net::auth::{
    AuthError, CLOSE_AUTH_FAILED, CLOSE_PROTOCOL, CLOSE_TIMEOUT, authenticate_with_token,
};
use overlay::net::frame::{MAX_FRAME_BYTES, read_frame, write_frame};
use overlay::net::guard::MAX_STRIKES;
use overlay::net::identity::{ANY_NODE, Identity, server_name_for};
use overlay::net::token::{JoinToken, Role};
use overlay::proto::message::WIRE_VERSION;
use overlay::proto::rng::SplitMix64;
use overlay::proto::{GossipMessage, Liveness, MemberRecord, NodeId, Packet, QueryMessage};
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Every test body runs under this bound.
const TEST_LIMIT: Duration = Duration::from_secs(90);

async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_LIMIT, body)
        .await
        .unwrap_or_else(|_| panic!("test did not finish within {TEST_LIMIT:?}"));
}

async fn seed(name: &str) -> Node {
    Node::builder()
        .name(name)
        .start()
        .await
        .expect("starting a node")
}

async fn joiner(name: &str, via: &Node) -> Node {
    Node::builder()
        .name(name)
        .join(via.local_addr())
        .token(via.token())
        .join_timeout(Duration::from_secs(10))
        .start()
        .await
        .expect("a legitimate node must be able to join")
}

async fn status(node: &Node) -> NodeStatus {
    tokio::time::timeout(Duration::from_secs(5), node.status())
        .await
        .expect("status() did not answer within 5 s")
        .expect("status() failed: the node stopped")
}

/// Polls `node.status()` until `cond` holds; panics with `what` after `limit`.
async fn wait_status(
    node: &Node,
    what: &str,
    limit: Duration,
    cond: impl Fn(&NodeStatus) -> bool,
) -> NodeStatus {
    let start = Instant::now();
    loop {
        let s = status(node).await;
        if cond(&s) {
            return s;
        }
        if start.elapsed() >= limit {
            panic!("{what}: not within {limit:?}; last status: {s:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn alive_members(s: &NodeStatus) -> Vec<NodeId> {
    s.members
        .iter()
        .filter(|m| m.state == Liveness::Alive)
        .map(|m| m.id)
        .collect()
}

/// A hand-made peer: a fresh identity and a bare quinn endpoint.
struct RawPeer {
    endpoint: quinn::Endpoint,
    identity: Identity,
}

impl RawPeer {
    fn new() -> RawPeer {
        let identity = Identity::generate().expect("identity");
        let endpoint =
            quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
        RawPeer { endpoint, identity }
    }

    /// The QUIC + TLS handshake only (no token proof).
    async fn connect(
        &self,
        addr: SocketAddr,
        server_name: &str,
    ) -> Result<quinn::Connection, quinn::ConnectionError> {
        let config = self.identity.client_config().expect("client config");
        let connecting = self
            .endpoint
            .connect_with(config, addr, server_name)
            .expect("connect_with");
        tokio::time::timeout(Duration::from_secs(10), connecting)
            .await
            .expect("the handshake neither succeeded nor failed within 10 s")
    }

    /// Handshake and token proof: an admitted connection.
    async fn admitted(&self, node: &Node) -> quinn::Connection {
        let conn = self
            .connect(node.local_addr(), ANY_NODE)
            .await
            .expect("handshake");
        let peer =
            authenticate_with_token(&conn, &node.token(), Role::Dialer, Duration::from_secs(5))
                .await
                .expect("admission with the right token");
        assert_eq!(peer, node.id());
        conn
    }
}

/// Waits until the node closes `conn`; returns the application error code it gave.
async fn closed_by_node(conn: &quinn::Connection, within: Duration) -> u64 {
    match tokio::time::timeout(within, conn.closed()).await {
        Ok(quinn::ConnectionError::ApplicationClosed(c)) => c.error_code.into_inner(),
        Ok(other) => panic!("connection ended otherwise than closed by the node: {other}"),
        Err(_) => panic!("the node did not close the connection within {within:?}"),
    }
}

fn random_bytes(rng: &mut SplitMix64, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_token_cannot_join() {
    let _alone = crate::common::real_network();
    bounded(async {
        let legit = seed("legit").await;
        let dir = std::env::temp_dir().join(format!("ovl-sec-{}", std::process::id()));
        let t = Instant::now();
        let result = Node::builder()
            .name("intruder")
            .data_dir(&dir)
            .join(legit.local_addr())
            .token(JoinToken::generate())
            .join_timeout(Duration::from_secs(10))
            .start()
            .await;
        let err = match result {
            Ok(node) => {
                node.leave().await;
                panic!("a node with another overlay's token joined");
            }
            Err(e) => e.to_string(),
        };
        eprintln!(
            "wrong token refused after {} ms: {err}",
            t.elapsed().as_millis()
        );
        assert!(
            err.contains("token"),
            "the error does not name the token: {err}"
        );
        // The rejected token is not stored for the next start from that directory.
        let stored = dir.join(overlay::api::files::TOKEN).exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            !stored,
            "a rejected join token was written to the data directory"
        );
        let s = wait_status(
            &legit,
            "auth failure counted",
            Duration::from_secs(5),
            |s| s.auth_failures >= 1,
        )
        .await;
        assert_eq!(s.members.len(), 1, "the intruder became a member: {s:#?}");
        assert_eq!(s.connections, 0, "a connection was kept: {s:#?}");
        assert_eq!(s.frames_in, 0, "something from the intruder was processed");

        // The intruder never shows up later either, and the right token still works.
        let friend = joiner("friend", &legit).await;
        let s = wait_status(&legit, "friend alive", Duration::from_secs(10), |s| {
            alive_members(s).contains(&friend.id())
        })
        .await;
        assert_eq!(s.members.len(), 2, "{s:#?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = status(&legit).await;
        assert_eq!(s.members.len(), 2, "{s:#?}");
        assert!(s.auth_failures >= 1, "{s:#?}");
        friend.leave().await;
        legit.leave().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peer_cannot_claim_another_nodes_id() {
    let _alone = crate::common::real_network();
    bounded(async {
        let a = seed("a").await;
        let b = joiner("b", &a).await;
        let raw = RawPeer::new();

        // Dial B's address asking for A: B's key does not give A's id, so TLS fails.
        let err = raw
            .connect(b.local_addr(), &server_name_for(a.id()))
            .await
            .expect_err("a handshake with the wrong id succeeded");
        eprintln!("dialing B as A: {err}");
        assert!(
            matches!(err, quinn::ConnectionError::TransportError(_)),
            "expected a TLS (transport) error, got {err:?}"
        );
        // The same for A's address asked as B.
        let err = raw
            .connect(a.local_addr(), &server_name_for(b.id()))
            .await
            .expect_err("a handshake with the wrong id succeeded");
        assert!(matches!(err, quinn::ConnectionError::TransportError(_)));

        // Control: asking for B at B's address works, and B is who it says.
        let conn = raw
            .connect(b.local_addr(), &server_name_for(b.id()))
            .await
            .expect("the handshake with the right id must succeed");
        assert_eq!(overlay::net::identity::peer_id(&conn), Some(b.id()));
        conn.close(0u32.into(), b"done");

        let s = status(&b).await;
        assert_eq!(s.members.len(), 2, "{s:#?}");
        assert!(alive_members(&s).contains(&a.id()));
        b.leave().await;
        a.leave().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unauthenticated_connections_get_nothing_processed() {
    let _alone = crate::common::real_network();
    bounded(async {
        let node = seed("target").await;
        let before = status(&node).await;

        // 1. Right TLS, no proof, but a well-formed Join on a stream of its own.
        let raw = RawPeer::new();
        let conn = raw
            .connect(node.local_addr(), ANY_NODE)
            .await
            .expect("TLS handshake");
        let join = Packet::Gossip(GossipMessage::Join {
            me: MemberRecord {
                id: raw.identity.id(),
                name: "sneaky".into(),
                addr: raw.endpoint.local_addr().expect("addr"),
                incarnation: 0,
                boot: 1,
                state: Liveness::Alive,
                groups: Vec::new(),
                proof: Vec::new(),
            },
        });
        let mut send = conn.open_uni().await.expect("open_uni");
        for _ in 0..3 {
            write_frame(&mut send, &join.encode().expect("encode"))
                .await
                .expect("write");
        }
        let t = Instant::now();
        let code = closed_by_node(&conn, Duration::from_secs(15)).await;
        eprintln!(
            "silent connection closed by the node after {} ms, code {code:#x}",
            t.elapsed().as_millis()
        );
        assert_eq!(code, u64::from(CLOSE_TIMEOUT));

        // 2. A proof made with the wrong token.
        let raw2 = RawPeer::new();
        let conn2 = raw2
            .connect(node.local_addr(), ANY_NODE)
            .await
            .expect("TLS handshake");
        let err = authenticate_with_token(
            &conn2,
            &JoinToken::generate(),
            Role::Dialer,
            Duration::from_secs(5),
        )
        .await
        .expect_err("a wrong token was accepted");
        assert!(matches!(err, AuthError::Rejected), "{err:?}");
        assert_eq!(
            closed_by_node(&conn2, Duration::from_secs(5)).await,
            u64::from(CLOSE_AUTH_FAILED)
        );

        // 3. A "proof" of the right length but arbitrary bytes, then a Join behind it.
        let raw3 = RawPeer::new();
        let conn3 = raw3
            .connect(node.local_addr(), ANY_NODE)
            .await
            .expect("TLS handshake");
        let (mut send3, _recv3) = conn3.open_bi().await.expect("open_bi");
        write_frame(&mut send3, &[0x5a; 32]).await.expect("write");
        // The node may already have closed the connection: this write may fail.
        let _ = write_frame(&mut send3, &join.encode().expect("encode")).await;
        assert_eq!(
            closed_by_node(&conn3, Duration::from_secs(5)).await,
            u64::from(CLOSE_AUTH_FAILED)
        );

        // 4. An oversized "proof" (refused from its length prefix, nothing allocated) and
        // 5. a proof cut short by the end of its stream: both are bad proofs.
        for bytes in [u32::MAX.to_be_bytes().to_vec(), vec![0, 0, 0, 32, 1, 2, 3]] {
            let raw = RawPeer::new();
            let conn = raw
                .connect(node.local_addr(), ANY_NODE)
                .await
                .expect("TLS handshake");
            let (mut send, _recv) = conn.open_bi().await.expect("open_bi");
            send.write_all(&bytes).await.expect("write");
            let _ = send.finish();
            assert_eq!(
                closed_by_node(&conn, Duration::from_secs(5)).await,
                u64::from(CLOSE_AUTH_FAILED)
            );
        }

        let s = wait_status(&node, "4 auth failures", Duration::from_secs(5), |s| {
            s.auth_failures >= before.auth_failures + 4
        })
        .await;
        eprintln!(
            "after 5 unauthenticated connections: auth_failures {}, members {}, frames_in {}",
            s.auth_failures,
            s.members.len(),
            s.frames_in
        );
        assert_eq!(
            s.members.len(),
            1,
            "an unauthenticated peer became a member"
        );
        assert_eq!(
            s.connections, 0,
            "an unauthenticated connection was adopted"
        );
        assert_eq!(s.frames_in, before.frames_in, "a frame was processed");
        assert_eq!(s.frames_rejected, before.frames_rejected);
        assert_eq!(s.protocol_errors, before.protocol_errors);
        // The node still admits a legitimate peer.
        let friend = joiner("friend", &node).await;
        wait_status(&node, "friend alive", Duration::from_secs(10), |s| {
            alive_members(s).contains(&friend.id())
        })
        .await;
        friend.leave().await;
        node.leave().await;
    })
    .await;
}
