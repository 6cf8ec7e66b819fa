//! Unit tests of the connection table.

use super::*;
use crate::net::identity::Identity;
use crate::net::link::LinkInput;
use crate::net::token::JoinToken;
use crate::net::token_ring::TokenRing;
use crate::net::view::{MemberInfo, MemberView};
use crate::proto::Config;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The default membership probe period.
const GOSSIP_PROBE: Duration = Duration::from_secs(1);

/// A node's links on a loopback UDP endpoint that accepts connections, and what its
/// connection tasks report (the driver's inbox).
fn links_on_loopback(token: &Arc<JoinToken>) -> (Links, mpsc::Receiver<LinkInput>, SocketAddr) {
    let ring = Arc::new(TokenRing::new((**token).clone(), 0, None, None));
    links_with_ring(ring, MemberView::default())
}

/// As [`links_on_loopback`], with the node's tokens and members given.
fn links_with_ring(
    ring: Arc<TokenRing>,
    members: MemberView,
) -> (Links, mpsc::Receiver<LinkInput>, SocketAddr) {
    let identity = Identity::generate().expect("identity");
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let socket = quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket).expect("wrap");
    let server = identity.server_config().expect("server config");
    let endpoint = crate::net::endpoint_on(socket, Some(server)).expect("endpoint");
    let addr = endpoint.local_addr().expect("address");
    let (to_driver, inbox) = mpsc::channel(link::INBOX);
    let ctx = LinkContext {
        me: identity.id(),
        ring,
        members,
        to_driver,
        stats: Arc::default(),
        mailbox: Arc::default(),
        guard: Arc::default(),
    };
    tokio::spawn(link::accept_loop(endpoint.clone(), ctx.clone()));
    let client = identity.client_config().expect("client config");
    let idle = IdleLimits::for_config(&Config::wan(), GOSSIP_PROBE);
    let links = Links::new(ctx.me, Instant::now(), endpoint, client, ctx, idle);
    (links, inbox, addr)
}

/// The next report of a connection task, within 10 s.
async fn next(inbox: &mut mpsc::Receiver<LinkInput>) -> LinkInput {
    tokio::time::timeout(Duration::from_secs(10), inbox.recv())
        .await
        .expect("a report within 10 s")
        .expect("tasks alive")
}

/// `a` sends `b` a frame while unconnected: `a` dials, both take the connection,
/// and `b` reads the frame.
async fn connect(
    (a, a_inbox): (&mut Links, &mut mpsc::Receiver<LinkInput>),
    (b, b_inbox): (&mut Links, &mut mpsc::Receiver<LinkInput>),
    b_addr: SocketAddr,
    frame: Outgoing,
) {
    let (a_id, b_id) = (a.me, b.me);
    let to_b = |p: NodeId| (p == b_id).then_some(b_addr);
    assert_eq!(a.send(b_id, frame, Priority::Urgent, to_b), Sent::Pending);
    let LinkInput::Connected {
        peer, conn, dialed, ..
    } = next(a_inbox).await
    else {
        panic!("a dialed b");
    };
    assert_eq!((peer, dialed), (b_id, true));
    a.connected(peer, conn, dialed);
    loop {
        match next(b_inbox).await {
            LinkInput::Connected {
                peer, conn, dialed, ..
            } => b.connected(peer, conn, dialed),
            LinkInput::Received { peer, .. } => {
                assert_eq!(peer, a_id);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn frames_that_may_be_lost_are_reported_per_peer() {
    let token = Arc::new(JoinToken::generate());
    let (mut a, mut a_inbox, _) = links_on_loopback(&token);
    let (mut b, mut b_inbox, b_addr) = links_on_loopback(&token);
    let (a_id, b_id) = (a.me, b.me);
    let packet = crate::proto::Packet::Overlay(crate::proto::Message::Resync);
    let frame = || Outgoing::Frame(packet.encode().expect("encodes"));

    // No address to dial: dropped at once, and reported.
    let nowhere = crate::proto::NodeId::from_seed(9, 9);
    assert_eq!(
        a.send(nowhere, frame(), Priority::Urgent, |_| None),
        Sent::Dropped
    );
    assert_eq!(a.take_lost(), BTreeSet::from([nowhere]));
    assert!(a.take_lost().is_empty(), "taken once");

    // Kept while dialed, up to a bound: the oldest frame beyond it is dropped, and
    // reported (the address is a socket that never answers, so the dial hangs).
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let silent_addr = silent.local_addr().expect("address");
    let mute = crate::proto::NodeId::from_seed(9, 10);
    for _ in 0..PENDING_PER_PEER {
        let sent = a.send(mute, frame(), Priority::Urgent, |_| Some(silent_addr));
        assert_eq!(sent, Sent::Pending);
    }
    assert!(a.take_lost().is_empty(), "all kept");
    a.send(mute, frame(), Priority::Urgent, |_| Some(silent_addr));
    assert_eq!(a.take_lost(), BTreeSet::from([mute]));

    // Kept while dialed, written once connected: nothing lost.
    let (ends_a, ends_b) = ((&mut a, &mut a_inbox), (&mut b, &mut b_inbox));
    connect(ends_a, ends_b, b_addr, frame()).await;
    assert!(a.take_lost().is_empty() && b.take_lost().is_empty());

    // b closes the connection: a is told it closed, and reports b, as b reports a.
    b.conn(&a_id)
        .expect("b's link to a")
        .close(0u32.into(), b"test");
    let LinkInput::Closed { peer, conn, .. } = next(&mut a_inbox).await else {
        panic!("a sees the close");
    };
    assert!(a.closed(peer, conn));
    assert_eq!(a.take_lost(), BTreeSet::from([b_id]));
    let LinkInput::Closed { peer, conn, .. } = next(&mut b_inbox).await else {
        panic!("b sees its own close");
    };
    assert!(b.closed(peer, conn));
    assert_eq!(b.take_lost(), BTreeSet::from([a_id]));

    // Connected again; once a's idle check has seen the frame, b closes the link for
    // idleness: nothing was in flight, so nothing is reported.
    let (ends_a, ends_b) = ((&mut a, &mut a_inbox), (&mut b, &mut b_inbox));
    connect(ends_a, ends_b, b_addr, frame()).await;
    a.close_idle(1);
    let idle = crate::net::auth::CLOSE_IDLE;
    b.conn(&a_id)
        .expect("b's new link")
        .close(idle.into(), b"idle");
    let LinkInput::Closed { peer, conn, .. } = next(&mut a_inbox).await else {
        panic!("a sees the idle close");
    };
    assert!(a.closed(peer, conn));
    assert!(
        a.take_lost().is_empty(),
        "a quiet link closed for idleness lost nothing"
    );
}

#[test]
fn idle_limits_are_the_constants_at_default_periods_and_grow_with_slower_clocks() {
    let wan = IdleLimits::for_config(&Config::wan(), GOSSIP_PROBE);
    assert_eq!(wan.link, LINK_IDLE);
    assert_eq!(wan.measure, MEASURE_IDLE);
    assert_eq!(IdleLimits::for_config(&Config::lan(), GOSSIP_PROBE), wan);
    // On this clock a steady peer is probed every 12 rounds of 20 s (up to 25 s each):
    // its link must outlive the longest gap.
    let config = Config::wan().dilated(20);
    let slow = IdleLimits::for_config(&config, GOSSIP_PROBE);
    let rounds = config.probe_backoff_max + 1;
    assert!(
        slow.link > config.probe_interval * rounds * 5 / 4,
        "{slow:?}"
    );
    assert!(slow.link >= config.serial_period * 4);
    assert_eq!(slow.measure, MEASURE_IDLE);
}

#[test]
fn member_links_outlive_a_round_of_membership_probes_and_measurements_do_not() {
    let idle = IdleLimits::for_config(&Config::wan(), GOSSIP_PROBE);
    // A small overlay: the protocol's own limit.
    assert_eq!(idle.limit(false, 5), LINK_IDLE);
    // 120 members: a member is probed about every 120 s; its link waits longer than that.
    assert!(idle.limit(false, 120) > GOSSIP_PROBE * 120, "{idle:?}");
    // Capped however many members, and QUIC's own timeout is set past the cap.
    assert_eq!(idle.limit(false, 100_000), MOST_MEMBER_IDLE);
    assert!(idle.most() >= idle.limit(false, usize::MAX));
    // A link only ever used to measure closes soon whatever the size.
    assert_eq!(idle.limit(true, 120), MEASURE_IDLE);
}

/// After a rotation, over real QUIC: a member still holding the old token is let in and
/// flagged to be sent the new one; a stranger with the old token is refused; a newcomer
/// with the new token is let in.
#[tokio::test]
async fn a_rotated_token_admits_members_behind_and_refuses_strangers_with_the_old_one() {
    let old = JoinToken::generate();
    let ring = |t: &JoinToken| Arc::new(TokenRing::new(t.clone(), 0, None, None));
    let seed_ring = ring(&old);
    let seed_members = MemberView::default();
    let (mut seed, mut seed_inbox, seed_addr) =
        links_with_ring(seed_ring.clone(), seed_members.clone());
    let (new, _) = seed_ring.rotate();
    let packet = crate::proto::Packet::Overlay(crate::proto::Message::Resync);
    let frame = || Outgoing::Frame(packet.encode().expect("encodes"));

    // Dials the seed from a node holding `token`; true if admitted (and, on the seed's
    // side, whether it was flagged as behind).
    async fn dial_seed(
        from: (Links, mpsc::Receiver<LinkInput>, SocketAddr),
        seed: (&mut Links, &mut mpsc::Receiver<LinkInput>),
        seed_addr: SocketAddr,
        frame: Outgoing,
    ) -> Option<bool> {
        let (mut links, mut inbox, _) = from;
        let seed_id = seed.0.me;
        let to_seed = |p: NodeId| (p == seed_id).then_some(seed_addr);
        links.send(seed_id, frame, Priority::Urgent, to_seed);
        match next(&mut inbox).await {
            LinkInput::Connected { behind, .. } => assert!(!behind, "the seed is ahead"),
            LinkInput::DialFailed { .. } => return None,
            other => panic!("unexpected {other:?}"),
        }
        match next(seed.1).await {
            LinkInput::Connected { behind, .. } => Some(behind),
            other => panic!("unexpected {other:?}"),
        }
    }

    let member = links_with_ring(ring(&old), MemberView::default());
    seed_members.upsert(MemberInfo {
        id: member.0.me,
        name: "member".into(),
        addr: member.2,
        state: crate::proto::Liveness::Alive,
        rtt_ms: None,
        groups: Vec::new(),
    });
    let ends = (&mut seed, &mut seed_inbox);
    assert_eq!(
        dial_seed(member, ends, seed_addr, frame()).await,
        Some(true)
    );

    let stranger = links_with_ring(ring(&old), MemberView::default());
    let ends = (&mut seed, &mut seed_inbox);
    assert_eq!(dial_seed(stranger, ends, seed_addr, frame()).await, None);

    let newcomer = links_with_ring(ring(&new), MemberView::default());
    let ends = (&mut seed, &mut seed_inbox);
    assert_eq!(
        dial_seed(newcomer, ends, seed_addr, frame()).await,
        Some(false)
    );
}
