//! The connection table of one node: which peer has an admitted connection, what waits for
//! a dial, and when a connection is closed again. Owned by the driver ([`super::driver`]).
//!
//! Why it is bounded: every member is measured once and gossip probes every member in
//! turn, so without closing, every node ends up connected to every other, and a large
//! overlay started at once spends its CPU on handshakes. So:
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
//! - but a link to a member that carried protocol traffic is kept about as long as
//!   membership takes to probe every member once (up to [`MOST_MEMBER_IDLE`]): closed
//!   sooner, every membership probe of an overlay past twenty members would pay a
//!   handshake at both ends (about one a second per node), while an open idle link costs
//!   nothing (links send no keep-alives: membership notices dead peers).
//!
//! An RTT probe that waited for a dial is re-stamped when it finally goes out: the wait is
//! not round-trip time, and a measurement that included the handshake would make a near
//! peer look far.

use super::link::{self, LinkContext};
use super::view::{LinkCounters, QuicCounters};
use crate::proto::{NodeId, Packet};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tracing::debug;

mod dial;
mod idle;
mod saturation;
mod wire;

pub use idle::{IdleLimits, LINK_IDLE, MEASURE_IDLE, MOST_MEMBER_IDLE};

/// Packets kept for a peer while it is being dialed.
const PENDING_PER_PEER: usize = 1024;
/// First retry delay after a failed dial; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Dials (handshake plus token exchange) this node runs at once.
pub const MAX_DIALS_IN_FLIGHT: usize = 8;
/// Of those, dials for one-off measurements.
pub const MAX_BACKGROUND_IN_FLIGHT: usize = 2;
/// A frame waiting for its connection.
#[derive(Debug)]
// Transmits dominate and are moved once; boxing them would cost an allocation each.
#[allow(clippy::large_enum_variant)]
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
    /// Whether it only ever carried measurements (closed after [`IdleLimits::measure`]
    /// without stream data, else after [`IdleLimits::limit`]).
    measure_only: bool,
    /// QUIC's counters when last read for a saturated window.
    path: saturation::PathWindow,
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
    /// Dialed for the connection itself, with no frame waiting ([`Links::want`]).
    wanted: bool,
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
    /// How connections came and went.
    pub counters: LinkCounters,
    /// When idle connections are closed.
    idle: IdleLimits,
    /// What QUIC put on the wire for connections no longer in the table.
    retired: QuicCounters,
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
            counters: LinkCounters::default(),
            idle,
            retired: QuicCounters::default(),
        }
    }

    /// What QUIC put on the wire for this node's peer connections since start, closed
    /// ones included.
    pub fn quic_counters(&self) -> QuicCounters {
        let mut total = self.retired;
        for link in self.links.values() {
            total += wire::counters(&link.conn);
        }
        total
    }

    /// Takes `peer`'s connection out of the table, keeping its counters.
    fn unlink(&mut self, peer: &NodeId) -> Option<Link> {
        let link = self.links.remove(peer)?;
        self.retired += wire::counters(&link.conn);
        Some(link)
    }

    /// Open connections.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// True without connections.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The peers with an open connection.
    pub fn peers(&self) -> Vec<NodeId> {
        self.links.keys().copied().collect()
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
                    link.measure_only = false;
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
            self.unlink(&to);
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

    /// Connection `conn` to `peer` closed: forget it if it is the one in use.
    pub fn closed(&mut self, peer: NodeId, conn: usize) -> bool {
        if self
            .links
            .get(&peer)
            .is_some_and(|l| l.conn.stable_id() == conn)
        {
            let link = self.unlink(&peer).expect("looked up");
            // Frames still queued or in flight on it are gone with it; unless the peer
            // closed it for idleness and it carried nothing since we last looked (then
            // nothing was in flight: the peer saw nothing for its idle limit either).
            if link.quiet_close_by_idle_peer() {
                self.counters.closed_idle_by_peer += 1;
            } else {
                self.counters.closed_otherwise += 1;
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
        if let Some(link) = self.unlink(&peer)
            && let Some(why) = close
        {
            link.conn.close(super::auth::CLOSE_LEAVING.into(), why);
        }
        self.pending.remove(&peer);
        self.lost.remove(&peer);
    }

    /// `peer` sent `bytes` of messages nobody asked for: past
    /// [`super::guard::MAX_UNSOLICITED_BYTES`] in a window it is closed with
    /// [`super::auth::CLOSE_PROTOCOL`] and kept out (neither accepted nor dialed) for
    /// [`super::guard::KEEP_OUT`], and so are peers from its address that are no members.
    pub fn unsolicited(&mut self, peer: NodeId, bytes: u64) {
        let from = self.links.get(&peer).map(|l| l.conn.remote_address().ip());
        let strikes = &self.ctx.guard.strikes;
        if !strikes.unsolicited(peer, from, bytes, Instant::now()) {
            return;
        }
        (self.ctx.stats.peers_kept_out).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(
            %peer,
            limit = super::guard::MAX_UNSOLICITED_BYTES,
            keep_out = ?super::guard::KEEP_OUT,
            "closing the connection and keeping the peer out: too many messages nobody \
             asked for"
        );
        if let Some(link) = self.unlink(&peer) {
            let why = b"too many messages nobody asked for";
            link.conn.close(super::auth::CLOSE_PROTOCOL.into(), why);
        }
        self.pending.remove(&peer);
    }

    /// Closes connections that carried no stream data for their idle limit, with
    /// `members` live members ([`IdleLimits::limit`]).
    pub fn close_idle(&mut self, members: usize) {
        let now = Instant::now();
        let mut idle = Vec::new();
        for (peer, link) in self.links.iter_mut() {
            let s = link.conn.stats();
            let seen = s.frame_tx.stream + s.frame_rx.stream;
            if seen != link.frames_seen {
                link.frames_seen = seen;
                link.active_at = now;
            } else if now.duration_since(link.active_at)
                >= self.idle.limit(link.measure_only, members)
                && self.pending.get(peer).is_none_or(|q| q.is_empty())
            {
                idle.push(*peer);
            }
        }
        for peer in idle {
            if let Some(link) = self.unlink(&peer) {
                debug!(peer = %peer, "closing an idle connection");
                link.conn.close(super::auth::CLOSE_IDLE.into(), b"idle");
                self.counters.closed_idle += 1;
                self.counters.closed_idle_measure += u64::from(link.measure_only);
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
        mut measure_only: bool,
    ) {
        let opened_by = if dialed { self.me } else { peer };
        let preferred = self.me.min(peer);
        (self.ctx.stats.links_opened).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if dialed {
            self.counters.dialed += 1;
        } else {
            self.counters.accepted += 1;
        }
        if let Some(existing) = self.links.get(&peer) {
            let existing_alive = existing.conn.close_reason().is_none();
            self.counters.duplicates += u64::from(existing_alive);
            // The same side opening a second connection has given up the first (e.g. it
            // restarted): the new one wins. Otherwise both dialed at once: the connection
            // opened by the smaller id wins, on both sides.
            let keep_existing = existing.opened_by != opened_by
                && (existing.opened_by == preferred || opened_by != preferred);
            if existing_alive && keep_existing {
                // Keep the existing one; the peer applies the same rule. Let it drain.
                let extra = conn.clone();
                crate::net::spawn_in_span(async move {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    extra.close(super::auth::CLOSE_DUPLICATE.into(), b"duplicate connection");
                });
                // Still read from it until then, so nothing the peer sent on it is lost.
                let _ = link::start(peer, conn, &self.ctx);
                return;
            }
            let old = existing.conn.clone();
            crate::net::spawn_in_span(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                old.close(super::auth::CLOSE_DUPLICATE.into(), b"duplicate connection");
            });
        }
        let writer = link::start(peer, conn.clone(), &self.ctx);
        if let Some(queue) = self.pending.remove(&peer) {
            let now_us = self.start.elapsed().as_micros() as u64;
            for out in queue {
                if matches!(out, Outgoing::Frame(_)) {
                    measure_only = false; // protocol traffic waited for it
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
        let path = saturation::PathWindow::start(&conn, Instant::now());
        let replaced = self.links.insert(
            peer,
            Link {
                path,
                conn,
                writer,
                opened_by,
                frames_seen: 0,
                active_at: Instant::now(),
                measure_only,
            },
        );
        if let Some(old) = replaced {
            self.retired += wire::counters(&old.conn);
        }
    }
}

#[cfg(test)]
mod tests;
