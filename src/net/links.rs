//! The connection table of one node: which peer has an admitted connection, what waits for
//! a dial, and when a connection is closed again. Owned by the driver ([`super::driver`]).
//!
//! Why it is bounded: every member is measured once and gossip probes every member in
//! turn, so without closing, every node ends up connected to every other (a full mesh of
//! QUIC connections with their timers and keep-alives), and a large overlay started at once
//! spends its CPU on handshakes. So:
//! - at most [`MAX_DIALS_IN_FLIGHT`] dials run at once; the rest wait in two queues, and
//!   one-off RTT measurements ([`Priority::Background`]) wait behind everything else, at
//!   most [`MAX_BACKGROUND_IN_FLIGHT`] at a time, so measuring every member once costs a
//!   steady trickle of handshakes instead of a storm;
//! - a connection that carried no stream data in either direction for its idle limit
//!   ([`IdleLimits`]: [`LINK_IDLE`] at the default periods) is closed
//!   ([`CLOSE_IDLE`](super::auth::CLOSE_IDLE)); the next packet dials again. Peers in use
//!   (candidates probed every period, tree neighbours receiving serials) never idle: the
//!   limits grow with the protocol's periods, so a slowed or dilated clock does not close
//!   tree links between two serials. A connection opened only for a measurement is closed
//!   after [`MEASURE_IDLE`].
//!
//! An RTT probe that waited for a dial is re-stamped when it finally goes out: the wait is
//! not round-trip time, and a measurement that included the handshake would make a near
//! peer look far.

use super::link::{self, DialError, LinkContext, LinkInput};
use crate::proto::{NodeId, Packet};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tracing::debug;

/// Packets kept for a peer while it is being dialed.
const PENDING_PER_PEER: usize = 1024;
/// First retry delay after a failed dial; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Dials (handshake plus token exchange) this node runs at once.
pub const MAX_DIALS_IN_FLIGHT: usize = 8;
/// Of those, dials for one-off measurements.
pub const MAX_BACKGROUND_IN_FLIGHT: usize = 2;
/// A connection without stream data for this long is closed.
pub const LINK_IDLE: Duration = Duration::from_secs(20);
/// The same for a connection that only ever carried measurements.
pub const MEASURE_IDLE: Duration = Duration::from_secs(3);

/// When connections without stream data are closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdleLimits {
    /// A connection that carried protocol traffic.
    pub link: Duration,
    /// A connection that only ever carried measurements.
    pub measure: Duration,
}

impl IdleLimits {
    /// The limits for a core configured so: [`LINK_IDLE`], or four of its longest regular
    /// period (serials, probes) where that is longer, and [`MEASURE_IDLE`]. A tree link
    /// carries a serial every period and a candidate a probe (jittered by up to a
    /// quarter), so neither idles out however slow the clock (`Config::slowed`,
    /// `Config::dilated`), while links that gossip alone used still close.
    pub fn for_config(config: &crate::proto::Config) -> IdleLimits {
        let period = config.serial_period.max(config.probe_interval);
        IdleLimits {
            link: LINK_IDLE.max(period * 4),
            measure: MEASURE_IDLE,
        }
    }
}

/// A frame waiting for its connection.
#[derive(Debug)]
pub enum Outgoing {
    /// Encoded, sent as is.
    Frame(Vec<u8>),
    /// An RTT probe: encoded as is when the connection exists, stamped again with the
    /// send time otherwise ([`Packet::stamped`]).
    Probe { frame: Vec<u8>, packet: Packet },
}

impl Outgoing {
    fn into_frame(self, now_us: u64) -> Option<Vec<u8>> {
        match self {
            Outgoing::Frame(f) => Some(f),
            Outgoing::Probe { packet, .. } => packet.stamped(now_us).encode().ok(),
        }
    }
}

/// How urgently a packet needs its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// Protocol traffic: dial as soon as a slot is free.
    Urgent,
    /// A one-off measurement: dial when nothing urgent waits.
    Background,
}

/// One admitted connection in use.
struct Link {
    conn: quinn::Connection,
    writer: tokio::sync::mpsc::Sender<Vec<u8>>,
    /// Who opened it (decides which one survives when both sides dial at once).
    opened_by: NodeId,
    /// STREAM frames sent plus received when last looked at, and when that count moved.
    frames_seen: u64,
    active_at: Instant,
    /// Closed after this long without stream data.
    idle_after: Duration,
}

impl Link {
    /// The peer closed this connection for idleness, and no stream data moved on it and
    /// no frame waited for its writer since [`Links::close_idle`] last looked.
    fn quiet_close_by_idle_peer(&self) -> bool {
        let idle = quinn::VarInt::from_u32(super::auth::CLOSE_IDLE);
        let by_idle_peer = matches!(self.conn.close_reason(),
            Some(quinn::ConnectionError::ApplicationClosed(c)) if c.error_code == idle);
        let s = self.conn.stats();
        by_idle_peer
            && s.frame_tx.stream + s.frame_rx.stream == self.frames_seen
            && self.writer.capacity() == self.writer.max_capacity()
    }
}

#[derive(Default)]
struct DialState {
    in_progress: bool,
    /// The dial in progress is for a measurement only.
    background: bool,
    queued: Option<Priority>,
    failures: u32,
    retry_at: Option<Instant>,
}

/// What happened to a frame handed to [`Links::send`].
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// Queued on the connection's writer.
    Written,
    /// Kept until the peer is connected.
    Pending,
    /// Dropped (writer queue full, or no address to dial).
    Dropped,
}

/// Connections, dials and packets waiting for them.
pub struct Links {
    me: NodeId,
    /// The core's time origin (RTT probes carry core time).
    start: Instant,
    endpoint: quinn::Endpoint,
    client_config: quinn::ClientConfig,
    ctx: LinkContext,
    links: HashMap<NodeId, Link>,
    pending: HashMap<NodeId, VecDeque<Outgoing>>,
    dials: HashMap<NodeId, DialState>,
    urgent: VecDeque<NodeId>,
    background: VecDeque<NodeId>,
    in_flight: usize,
    background_in_flight: usize,
    /// Packets dropped: queues full, peer unreachable.
    pub dropped: u64,
    /// Peers frames may have been lost to since [`Links::take_lost`]: a frame dropped, or a
    /// connection closed with frames perhaps unsent.
    lost: BTreeSet<NodeId>,
    /// Connections closed for idleness.
    pub idle_closed: u64,
    /// When idle connections are closed.
    idle: IdleLimits,
}

impl Links {
    /// An empty table for a node with this endpoint.
    pub fn new(
        me: NodeId,
        start: Instant,
        endpoint: quinn::Endpoint,
        client_config: quinn::ClientConfig,
        ctx: LinkContext,
        idle: IdleLimits,
    ) -> Links {
        Links {
            me,
            start,
            endpoint,
            client_config,
            ctx,
            links: HashMap::new(),
            pending: HashMap::new(),
            dials: HashMap::new(),
            urgent: VecDeque::new(),
            background: VecDeque::new(),
            in_flight: 0,
            background_in_flight: 0,
            dropped: 0,
            lost: BTreeSet::new(),
            idle_closed: 0,
            idle,
        }
    }

    /// Open connections.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// True without connections.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The live connection to `peer`, if any.
    pub fn conn(&self, peer: &NodeId) -> Option<quinn::Connection> {
        self.links
            .get(peer)
            .filter(|l| l.conn.close_reason().is_none())
            .map(|l| l.conn.clone())
    }

    /// The earliest dial retry that is due later.
    pub fn next_retry(&self) -> Option<Instant> {
        self.dials.values().filter_map(|d| d.retry_at).min()
    }

    /// Sends a frame to `to`: on its connection, or kept while it is dialed at the address
    /// `addr` gives (`None`: address unknown, the frame is dropped).
    pub fn send(
        &mut self,
        to: NodeId,
        out: Outgoing,
        priority: Priority,
        addr: impl Fn(NodeId) -> Option<SocketAddr>,
    ) -> Sent {
        if let Some(link) = self.links.get_mut(&to) {
            if link.conn.close_reason().is_none() {
                if priority == Priority::Urgent {
                    link.idle_after = self.idle.link;
                }
                let frame = match out {
                    Outgoing::Frame(f) | Outgoing::Probe { frame: f, .. } => f,
                };
                if link.writer.try_send(frame).is_err() {
                    self.dropped += 1;
                    self.lost.insert(to);
                    return Sent::Dropped;
                }
                return Sent::Written;
            }
            // Closed, its `Closed` not handled yet: what its writer still held is gone.
            self.links.remove(&to);
            self.lost.insert(to);
        }
        if addr(to).is_none() {
            // Unknown address: nothing to dial (e.g. a message to a member not yet gossiped).
            self.dropped += 1 + self.pending.remove(&to).map_or(0, |q| q.len() as u64);
            self.lost.insert(to);
            return Sent::Dropped;
        }
        let queue = self.pending.entry(to).or_default();
        if queue.len() >= PENDING_PER_PEER {
            queue.pop_front();
            self.dropped += 1;
            self.lost.insert(to);
        }
        queue.push_back(out);
        self.request_dial(to, priority);
        self.pump(addr);
        Sent::Pending
    }

    /// Puts `peer` in the dial queue of `priority` unless it is being dialed, waits for a
    /// retry, or already waits at that priority or above.
    fn request_dial(&mut self, peer: NodeId, priority: Priority) {
        let state = self.dials.entry(peer).or_default();
        if state.in_progress || state.retry_at.is_some_and(|t| t > Instant::now()) {
            return;
        }
        match (state.queued, priority) {
            (Some(Priority::Urgent), _) | (Some(Priority::Background), Priority::Background) => {}
            (Some(Priority::Background), Priority::Urgent) => {
                // Promote: the stale background entry is skipped when popped.
                state.queued = Some(Priority::Urgent);
                self.urgent.push_back(peer);
            }
            (None, p) => {
                state.queued = Some(p);
                match p {
                    Priority::Urgent => self.urgent.push_back(peer),
                    Priority::Background => self.background.push_back(peer),
                }
            }
        }
    }

    /// Starts queued dials while slots are free, urgent ones first.
    pub fn pump(&mut self, addr: impl Fn(NodeId) -> Option<SocketAddr>) {
        while self.in_flight < MAX_DIALS_IN_FLIGHT {
            let (peer, from) = match self.urgent.pop_front() {
                Some(p) => (p, Priority::Urgent),
                None if self.background_in_flight >= MAX_BACKGROUND_IN_FLIGHT => return,
                None => match self.background.pop_front() {
                    Some(p) => (p, Priority::Background),
                    None => return,
                },
            };
            let Some(state) = self.dials.get_mut(&peer) else {
                continue;
            };
            if state.queued != Some(from) {
                continue; // promoted, or already handled
            }
            state.queued = None;
            let connected = self
                .links
                .get(&peer)
                .is_some_and(|l| l.conn.close_reason().is_none());
            if connected || self.pending.get(&peer).is_none_or(|q| q.is_empty()) {
                continue;
            }
            let Some(to) = addr(peer) else {
                self.dropped += self.pending.remove(&peer).map_or(0, |q| q.len() as u64);
                self.lost.insert(peer);
                continue;
            };
            state.in_progress = true;
            state.background = from == Priority::Background;
            state.retry_at = None;
            self.in_flight += 1;
            if state.background {
                self.background_in_flight += 1;
            }
            let name = super::identity::server_name_for(peer);
            self.spawn_dial(to, name, None, move |error| LinkInput::DialFailed {
                peer,
                error,
            });
        }
    }

    /// Dials in a task (not counted against the limit: joins use this directly); the
    /// outcome comes back as [`LinkInput::Connected`] (tagged with `join`) or as what
    /// `on_error` makes of the failure.
    pub fn spawn_dial(
        &self,
        addr: SocketAddr,
        server_name: String,
        join: Option<u64>,
        on_error: impl FnOnce(DialError) -> LinkInput + Send + 'static,
    ) {
        let endpoint = self.endpoint.clone();
        let config = self.client_config.clone();
        let ctx = self.ctx.clone();
        tokio::spawn(async move {
            let input = match link::dial(endpoint, config, addr, server_name, &ctx).await {
                Ok((peer, conn)) => LinkInput::Connected {
                    peer,
                    conn,
                    dialed: true,
                    join,
                },
                Err(error) => on_error(error),
            };
            let _ = ctx.to_driver.send(input);
        });
    }

    /// A dial of ours, or the peer's, produced an admitted connection.
    pub fn connected(&mut self, peer: NodeId, conn: quinn::Connection, dialed: bool) {
        let mut measure_only = false;
        if let Some(d) = self.dials.get_mut(&peer) {
            if dialed && d.in_progress {
                d.in_progress = false;
                self.in_flight -= 1;
                if std::mem::take(&mut d.background) {
                    self.background_in_flight -= 1;
                    measure_only = true;
                }
            }
            d.failures = 0;
            d.retry_at = None;
        }
        let idle_after = if measure_only {
            self.idle.measure
        } else {
            self.idle.link
        };
        self.adopt(peer, conn, dialed, idle_after);
    }

    /// A dial failed: back off, drop what waited (the protocols resend what matters).
    pub fn dial_failed(&mut self, peer: NodeId) {
        let d = self.dials.entry(peer).or_default();
        if d.in_progress {
            d.in_progress = false;
            self.in_flight -= 1;
            if std::mem::take(&mut d.background) {
                self.background_in_flight -= 1;
            }
        }
        d.failures += 1;
        let backoff = MIN_BACKOFF
            .saturating_mul(1 << d.failures.min(8))
            .min(MAX_BACKOFF);
        d.retry_at = Some(Instant::now() + backoff);
        if let Some(q) = self.pending.remove(&peer) {
            self.dropped += q.len() as u64;
            self.lost.insert(peer);
        }
    }

    /// Retries dials whose backoff has passed and that still have packets waiting.
    pub fn retry_due(&mut self, addr: impl Fn(NodeId) -> Option<SocketAddr>) {
        let now = Instant::now();
        let due: Vec<NodeId> = self
            .dials
            .iter()
            .filter(|(_, d)| !d.in_progress && d.retry_at.is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for peer in due {
            if let Some(d) = self.dials.get_mut(&peer) {
                d.retry_at = None;
            }
            if self.pending.get(&peer).is_some_and(|q| !q.is_empty()) {
                self.request_dial(peer, Priority::Urgent);
            }
        }
        self.pump(addr);
    }

    /// Connection `conn` to `peer` closed: forget it if it is the one in use.
    pub fn closed(&mut self, peer: NodeId, conn: usize) -> bool {
        if self
            .links
            .get(&peer)
            .is_some_and(|l| l.conn.stable_id() == conn)
        {
            let link = self.links.remove(&peer).expect("looked up");
            // Frames still queued or in flight on it are gone with it; unless the peer
            // closed it for idleness and it carried nothing since we last looked (then
            // nothing was in flight: the peer saw nothing for its idle limit either).
            if !link.quiet_close_by_idle_peer() {
                self.lost.insert(peer);
            }
            return true;
        }
        false
    }

    /// The peers frames may have been lost to since the last call (the core sends them its
    /// state again, see [`crate::proto::Input::LinkLost`]).
    pub fn take_lost(&mut self) -> BTreeSet<NodeId> {
        std::mem::take(&mut self.lost)
    }

    /// The member is gone: close its connection, drop what waited for it.
    pub fn forget(&mut self, peer: NodeId, close: Option<&'static [u8]>) {
        if let Some(link) = self.links.remove(&peer)
            && let Some(why) = close
        {
            link.conn.close(super::auth::CLOSE_LEAVING.into(), why);
        }
        self.pending.remove(&peer);
        self.lost.remove(&peer);
    }

    /// Closes connections that carried no stream data for their idle limit.
    pub fn close_idle(&mut self) {
        let now = Instant::now();
        let mut idle = Vec::new();
        for (peer, link) in self.links.iter_mut() {
            let s = link.conn.stats();
            let seen = s.frame_tx.stream + s.frame_rx.stream;
            if seen != link.frames_seen {
                link.frames_seen = seen;
                link.active_at = now;
            } else if now.duration_since(link.active_at) >= link.idle_after
                && self.pending.get(peer).is_none_or(|q| q.is_empty())
            {
                idle.push(*peer);
            }
        }
        for peer in idle {
            if let Some(link) = self.links.remove(&peer) {
                debug!(peer = %peer, "closing an idle connection");
                link.conn.close(super::auth::CLOSE_IDLE.into(), b"idle");
                self.idle_closed += 1;
            }
        }
    }

    /// Takes every connection out of the table (dropping the writers' queues lets each
    /// writer finish its stream once flushed).
    pub fn take_all(&mut self) -> Vec<quinn::Connection> {
        self.pending.clear();
        self.links.drain().map(|(_, l)| l.conn).collect()
    }

    /// Installs an admitted connection, resolving a simultaneous dial from both sides.
    fn adopt(
        &mut self,
        peer: NodeId,
        conn: quinn::Connection,
        dialed: bool,
        mut idle_after: Duration,
    ) {
        let opened_by = if dialed { self.me } else { peer };
        let preferred = self.me.min(peer);
        if let Some(existing) = self.links.get(&peer) {
            let existing_alive = existing.conn.close_reason().is_none();
            // The same side opening a second connection has given up the first (e.g. it
            // restarted): the new one wins. Otherwise both dialed at once: the connection
            // opened by the smaller id wins, on both sides.
            let keep_existing = existing.opened_by != opened_by
                && (existing.opened_by == preferred || opened_by != preferred);
            if existing_alive && keep_existing {
                // Keep the existing one; the peer applies the same rule. Let it drain.
                let extra = conn.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    extra.close(super::auth::CLOSE_DUPLICATE.into(), b"duplicate connection");
                });
                // Still read from it until then, so nothing the peer sent on it is lost.
                let _ = link::start(peer, conn, &self.ctx);
                return;
            }
            let old = existing.conn.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                old.close(super::auth::CLOSE_DUPLICATE.into(), b"duplicate connection");
            });
        }
        let writer = link::start(peer, conn.clone(), &self.ctx);
        if let Some(queue) = self.pending.remove(&peer) {
            let now_us = self.start.elapsed().as_micros() as u64;
            for out in queue {
                if matches!(out, Outgoing::Frame(_)) {
                    idle_after = self.idle.link; // protocol traffic waited for it
                }
                let Some(frame) = out.into_frame(now_us) else {
                    continue;
                };
                if writer.try_send(frame).is_err() {
                    self.dropped += 1;
                    self.lost.insert(peer);
                }
            }
        }
        self.links.insert(
            peer,
            Link {
                conn,
                writer,
                opened_by,
                frames_seen: 0,
                active_at: Instant::now(),
                idle_after,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::identity::Identity;
    use crate::net::token::JoinToken;
    use crate::proto::Config;
    use std::sync::Arc;
    use tokio::sync::mpsc;

    /// A node's links on a loopback UDP endpoint that accepts connections, and what its
    /// connection tasks report (the driver's inbox).
    fn links_on_loopback(
        token: &Arc<JoinToken>,
    ) -> (Links, mpsc::UnboundedReceiver<LinkInput>, SocketAddr) {
        let identity = Identity::generate().expect("identity");
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let socket = quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket).expect("wrap");
        let server = identity.server_config().expect("server config");
        let endpoint = crate::net::endpoint_on(socket, Some(server)).expect("endpoint");
        let addr = endpoint.local_addr().expect("address");
        let (to_driver, inbox) = mpsc::unbounded_channel();
        let ctx = LinkContext {
            me: identity.id(),
            token: token.clone(),
            to_driver,
            stats: Arc::default(),
        };
        tokio::spawn(link::accept_loop(endpoint.clone(), ctx.clone()));
        let client = identity.client_config().expect("client config");
        let idle = IdleLimits::for_config(&Config::wan());
        let links = Links::new(ctx.me, Instant::now(), endpoint, client, ctx, idle);
        (links, inbox, addr)
    }

    /// The next report of a connection task, within 10 s.
    async fn next(inbox: &mut mpsc::UnboundedReceiver<LinkInput>) -> LinkInput {
        tokio::time::timeout(Duration::from_secs(10), inbox.recv())
            .await
            .expect("a report within 10 s")
            .expect("tasks alive")
    }

    /// `a` sends `b` a frame while unconnected: `a` dials, both take the connection,
    /// and `b` reads the frame.
    async fn connect(
        (a, a_inbox): (&mut Links, &mut mpsc::UnboundedReceiver<LinkInput>),
        (b, b_inbox): (&mut Links, &mut mpsc::UnboundedReceiver<LinkInput>),
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
        a.close_idle();
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
        let wan = IdleLimits::for_config(&Config::wan());
        assert_eq!(wan.link, LINK_IDLE);
        assert_eq!(wan.measure, MEASURE_IDLE);
        assert_eq!(IdleLimits::for_config(&Config::lan()), wan);
        // A tree link gets a serial every 20 s on this clock: it must outlive several.
        let slow = IdleLimits::for_config(&Config::wan().dilated(20));
        assert_eq!(slow.link, Config::wan().serial_period * 20 * 4);
        assert_eq!(slow.measure, MEASURE_IDLE);
    }
}
