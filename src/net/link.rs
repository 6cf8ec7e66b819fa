//! Connection tasks: accepting and dialing (with admission), and per connection one writer
//! and one reader task. They only move bytes; every decision is the driver's
//! ([`super::driver`]), which they talk to through [`LinkInput`]s.

use super::auth::{Admitted, AuthError, CLOSE_PROTOCOL, authenticate};
use super::frame::{FrameError, append_frame, read_frame};
use super::guard::{CONTROL_READ_BURST, CONTROL_READ_RATE, Guard, ReadBudget};
use super::token::{JoinToken, Role};
use super::token_ring::TokenRing;
use crate::proto::packet_kind::PacketKind;
use crate::proto::{DataHeader, NodeId, Packet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::{debug, warn};

/// How long the TLS handshake plus the token exchange may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections that may be in the handshake or the token exchange at once; beyond it new
/// ones are refused, so peers that never prove anything cannot pile up. One address may
/// hold at most [`super::guard::MAX_PENDING_PER_ADDRESS`] of them, and past half of them
/// a client must first validate its address (QUIC retry).
pub const MAX_PENDING_HANDSHAKES: usize = 128;
/// Frames queued for one connection's writer before new ones are dropped.
pub const WRITER_QUEUE: usize = 4096;
/// What the connection tasks may have queued for the driver. A reader that finds it full
/// waits, so it stops reading its stream and QUIC's flow control slows the peer down: a
/// fast peer cannot grow the node's memory, it only waits for the driver.
pub const INBOX: usize = 1024;

/// Why a dial did not produce an admitted connection.
#[derive(Debug, thiserror::Error)]
#[error("{addr}: {failure}")]
pub struct DialError {
    /// The address dialed.
    pub addr: SocketAddr,
    /// What went wrong.
    #[source]
    pub failure: DialFailure,
}

/// The step of a dial that failed.
#[derive(Debug, thiserror::Error)]
pub enum DialFailure {
    /// The dial could not start (a bad address or a closed endpoint).
    #[error("cannot dial: {0}")]
    Connect(#[from] quinn::ConnectError),
    /// The QUIC handshake failed.
    #[error("handshake failed: {0}")]
    Handshake(#[from] quinn::ConnectionError),
    /// Nothing answered the handshake in time.
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
    /// The join-token exchange failed.
    #[error(transparent)]
    Admission(#[from] AuthError),
    /// The peer broke the protocol too often lately and is kept out for this long.
    #[error("peer kept out for another {0:.0?} after repeated protocol violations")]
    KeptOut(Duration),
}

impl DialError {
    fn new(addr: SocketAddr, failure: impl Into<DialFailure>) -> Self {
        DialError {
            addr,
            failure: failure.into(),
        }
    }

    /// The peer refused our token proof: retrying with the same token cannot succeed.
    pub fn token_rejected(&self) -> bool {
        matches!(self.failure, DialFailure::Admission(AuthError::Rejected))
    }
}

/// What connection tasks tell the driver.
#[derive(Debug)]
pub enum LinkInput {
    /// An admitted connection to `peer`. `dialed` is true when this node opened it;
    /// `join` carries the join request it answers, if any; `behind` when the peer holds
    /// an older join token (it is sent ours).
    Connected {
        peer: NodeId,
        conn: quinn::Connection,
        dialed: bool,
        join: Option<u64>,
        behind: bool,
    },
    /// A dial to `peer` failed (handshake, timeout or admission).
    DialFailed { peer: NodeId, error: DialError },
    /// A join through an address failed.
    JoinFailed { request: u64, error: DialError },
    /// A decoded packet from `peer`, when its frame was read off the connection, and the
    /// frame's length in bytes.
    Received {
        peer: NodeId,
        packet: Packet,
        at: std::time::Instant,
        len: usize,
    },
    /// A data-plane receiver finished: the payload of `op` is here and checked (`ok`), or
    /// its stream failed.
    /// `rate`: from whom, how many bytes, over how long (a passive bandwidth figure).
    StreamDone {
        op: crate::proto::OpId,
        ok: bool,
        rate: Option<(NodeId, u64, Duration)>,
    },
    /// A packet train from `peer` arrived (see [`super::train`]).
    Train {
        peer: NodeId,
        train: super::train::Arrived,
    },
    /// A peer opened a data-plane stream: the header came; the payload follows on `recv`.
    DataStream {
        peer: NodeId,
        header: DataHeader,
        recv: quinn::RecvStream,
    },
    /// Connection `conn` to `peer` closed.
    Closed {
        peer: NodeId,
        conn: usize,
        reason: String,
    },
}

/// Counters shared by all connection tasks of a node.
#[derive(Debug, Default)]
pub struct LinkStats {
    /// Connections refused because the peer failed the token proof.
    pub auth_failures: AtomicU64,
    /// Inbound connections refused for any reason: too many handshakes pending, a
    /// handshake that failed or timed out, a failed token proof, a peer kept out.
    pub refused_connections: AtomicU64,
    /// Times a peer was kept out for too many malformed frames or protocol violations.
    pub peers_kept_out: AtomicU64,
    /// Frames that did not decode (dropped, connection kept).
    pub frames_rejected: AtomicU64,
    /// Connections closed for a protocol violation (oversized or truncated frame).
    pub protocol_errors: AtomicU64,
    /// Frames received and decoded.
    pub frames_in: AtomicU64,
    /// Frames written.
    pub frames_out: AtomicU64,
    /// Bytes received (frames, prefix included).
    pub bytes_in: AtomicU64,
    /// Bytes written (frames, prefix included).
    pub bytes_out: AtomicU64,
    /// Frames and bytes by kind, received and handed to connections.
    pub by_kind: KindCounters,
    /// Admitted connections installed, dialed or accepted (each a QUIC and TLS handshake
    /// and a token proof).
    pub links_opened: AtomicU64,
}

/// Frames and bytes per [`PacketKind`], each way. Received frames are counted when they
/// decode; sent ones when the driver hands them to a connection (a frame dropped later
/// by a full queue or a closing connection still counts).
#[derive(Debug, Default)]
pub struct KindCounters {
    frames_in: [AtomicU64; KINDS],
    bytes_in: [AtomicU64; KINDS],
    frames_out: [AtomicU64; KINDS],
    bytes_out: [AtomicU64; KINDS],
}

const KINDS: usize = PacketKind::ALL.len();

impl KindCounters {
    /// Counts a received frame of `bytes` bytes.
    pub fn received(&self, kind: PacketKind, bytes: usize) {
        self.frames_in[kind.index()].fetch_add(1, Ordering::Relaxed);
        self.bytes_in[kind.index()].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts a frame of `bytes` bytes handed to a connection.
    pub fn sent(&self, kind: PacketKind, bytes: usize) {
        self.frames_out[kind.index()].fetch_add(1, Ordering::Relaxed);
        self.bytes_out[kind.index()].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The counts so far, one entry per kind that carried anything.
    pub fn snapshot(&self) -> Vec<super::view::KindTraffic> {
        let get = |a: &[AtomicU64; KINDS], i: usize| a[i].load(Ordering::Relaxed);
        PacketKind::ALL
            .iter()
            .map(|k| {
                let i = k.index();
                super::view::KindTraffic {
                    kind: k.as_str().to_string(),
                    frames_in: get(&self.frames_in, i),
                    bytes_in: get(&self.bytes_in, i),
                    frames_out: get(&self.frames_out, i),
                    bytes_out: get(&self.bytes_out, i),
                }
            })
            .filter(|t| t.frames_in + t.frames_out > 0)
            .collect()
    }
}

/// Everything a connection task needs.
#[derive(Clone)]
pub struct LinkContext {
    /// This node.
    pub me: NodeId,
    /// The overlay's join tokens.
    pub ring: Arc<TokenRing>,
    /// The members as the driver last wrote them: who may prove an older token.
    pub members: super::view::MemberView,
    /// Where results go (bounded: see [`INBOX`]).
    pub to_driver: mpsc::Sender<LinkInput>,
    /// Shared counters.
    pub stats: Arc<LinkStats>,
    /// Where point-to-point transfers of large collectives arrive.
    pub mailbox: Arc<super::bulk::Mailbox>,
    /// Log gates and strikes (see [`super::guard`]).
    pub guard: Arc<Guard>,
}

pub use super::accept::accept_loop;

/// Dials `addr` expecting `peer` (or anyone, for a join) and runs admission.
pub async fn dial(
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    addr: SocketAddr,
    server_name: String,
    ctx: &LinkContext,
) -> Result<(Admitted, quinn::Connection), DialError> {
    let connecting = endpoint
        .connect_with(config, addr, &server_name)
        .map_err(|e| DialError::new(addr, e))?;
    let conn = match tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => return Err(DialError::new(addr, e)),
        Err(_) => {
            return Err(DialError::new(
                addr,
                DialFailure::NoAnswer(HANDSHAKE_TIMEOUT),
            ));
        }
    };
    let is_member = |p: &NodeId| ctx.members.is_known_member(p);
    match authenticate(
        &conn,
        &ctx.ring,
        Role::Dialer,
        HANDSHAKE_TIMEOUT,
        &is_member,
    )
    .await
    {
        Ok(admitted) => match ctx.guard.strikes.kept_out(&admitted.peer, Instant::now()) {
            Some(left) => {
                conn.close(CLOSE_PROTOCOL.into(), b"kept out after protocol violations");
                Err(DialError::new(addr, DialFailure::KeptOut(left)))
            }
            None => Ok((admitted, conn)),
        },
        Err(e) => {
            if matches!(e, AuthError::BadProof { .. }) {
                ctx.stats.auth_failures.fetch_add(1, Ordering::Relaxed);
            }
            Err(DialError::new(addr, e))
        }
    }
}

/// Starts the writer and reader tasks of an admitted connection; returns the writer's queue.
pub fn start(peer: NodeId, conn: quinn::Connection, ctx: &LinkContext) -> mpsc::Sender<Vec<u8>> {
    let (tx, rx) = mpsc::channel::<Vec<u8>>(WRITER_QUEUE);
    crate::net::spawn_in_span(writer(conn.clone(), rx, ctx.stats.clone()));
    crate::net::spawn_in_span(super::train::receive(
        peer,
        conn.clone(),
        ctx.to_driver.clone(),
    ));
    crate::net::spawn_in_span(reader(peer, conn, ctx.clone()));
    tx
}

/// Frames already queued are written together up to this many bytes: one write (and one
/// wake-up of the connection) instead of two per frame, and fuller packets.
const WRITE_BATCH: usize = 64 * 1024;

/// Writes encoded frames on one long-lived unidirectional stream, in order.
async fn writer(conn: quinn::Connection, mut rx: mpsc::Receiver<Vec<u8>>, stats: Arc<LinkStats>) {
    let Ok(mut send) = conn.open_uni().await else {
        return;
    };
    let mut batch = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.clear();
        let mut next = Some(first);
        let mut frames = 0u64;
        while let Some(frame) = next.take() {
            match append_frame(&mut batch, &frame) {
                Ok(()) => frames += 1,
                // Never produced by our encoder; dropped rather than ending the link.
                Err(e) => warn!(error = %e, "dropped an unsendable frame"),
            }
            if batch.len() < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if let Err(e) = send.write_all(&batch).await {
            debug!(error = %e, "writer stopped");
            return;
        }
        stats.frames_out.fetch_add(frames, Ordering::Relaxed);
        stats
            .bytes_out
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
    }
    // The driver dropped the queue: finish the stream so the peer reads everything sent.
    let _ = send.finish();
    let _ = send.stopped().await;
}

/// Reads every unidirectional stream the peer opens and forwards decoded packets.
async fn reader(peer: NodeId, conn: quinn::Connection, ctx: LinkContext) {
    let id = conn.stable_id();
    // One budget for all the connection's control streams: more streams buy no more.
    let budget = Arc::new(ReadBudget::new(CONTROL_READ_RATE, CONTROL_READ_BURST));
    let reason = loop {
        match conn.accept_uni().await {
            Ok(recv) => {
                let stream = read_stream(peer, conn.clone(), recv, ctx.clone(), budget.clone());
                crate::net::spawn_in_span(stream);
            }
            Err(e) => break e.to_string(),
        }
    };
    let closed = LinkInput::Closed {
        peer,
        conn: id,
        reason,
    };
    let _ = ctx.to_driver.send(closed).await;
}

async fn read_stream(
    peer: NodeId,
    conn: quinn::Connection,
    mut recv: quinn::RecvStream,
    ctx: LinkContext,
    budget: Arc<ReadBudget>,
) {
    let mut first = true;
    loop {
        match read_frame(&mut recv).await {
            Ok(None) => return,
            Ok(Some(bytes)) => {
                ctx.stats
                    .bytes_in
                    .fetch_add(bytes.len() as u64 + 4, Ordering::Relaxed);
                let was_first = std::mem::replace(&mut first, false);
                let at = Instant::now();
                // Paid before the next read (a data-plane header is let through: its
                // stream is read elsewhere, at the rate the payload's plan sets).
                let owed = budget.spend(bytes.len() + 4, at);
                match Packet::decode(&bytes) {
                    Ok(Packet::Data(header)) if was_first => {
                        ctx.stats.by_kind.received(PacketKind::Data, bytes.len());
                        // A data-plane stream: the rest is raw payload, read by the driver's
                        // receiver.
                        let stream = LinkInput::DataStream { peer, header, recv };
                        let _ = ctx.to_driver.send(stream).await;
                        return;
                    }
                    Ok(Packet::Bulk(header)) if was_first => {
                        ctx.stats.by_kind.received(PacketKind::Bulk, bytes.len());
                        // A transfer of a large collective: read and posted right here.
                        super::bulk::receive(&ctx.mailbox, peer, header, recv).await;
                        return;
                    }
                    Ok(Packet::Data(_) | Packet::Bulk(_)) => {
                        ctx.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                        if let Some(more) = ctx.guard.frames.allow(peer, at) {
                            warn!(%peer, more, "dropped a data header in the middle of a stream");
                        }
                        if strike_out(peer, &conn, &ctx) {
                            return;
                        }
                    }
                    Ok(Packet::Token(update)) => {
                        ctx.stats.frames_in.fetch_add(1, Ordering::Relaxed);
                        ctx.stats
                            .by_kind
                            .received(PacketKind::Admission, bytes.len());
                        let token = JoinToken::from_bytes(update.token);
                        if ctx.ring.adopt(update.generation, token) {
                            tracing::info!(
                                %peer,
                                generation = update.generation,
                                "the overlay's join token was rotated: new joins need the new one"
                            );
                        }
                    }
                    Ok(packet) => {
                        ctx.stats.frames_in.fetch_add(1, Ordering::Relaxed);
                        let len = bytes.len();
                        ctx.stats.by_kind.received(packet.kind(), len);
                        if ctx
                            .to_driver
                            .send(LinkInput::Received {
                                peer,
                                packet,
                                at,
                                len,
                            })
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(e) => {
                        ctx.stats.frames_rejected.fetch_add(1, Ordering::Relaxed);
                        if let Some(more) = ctx.guard.frames.allow(peer, at) {
                            warn!(%peer, error = %e, more, "dropped a malformed frame");
                        }
                        if strike_out(peer, &conn, &ctx) {
                            return;
                        }
                    }
                }
                if !owed.is_zero() {
                    tokio::time::sleep(owed).await;
                }
            }
            Err(e @ (FrameError::TooLarge { .. } | FrameError::Truncated)) => {
                ctx.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                if let Some(more) = ctx.guard.frames.allow(peer, Instant::now()) {
                    warn!(%peer, error = %e, more, "closing the connection: protocol violation");
                }
                if !strike_out(peer, &conn, &ctx) {
                    conn.close(CLOSE_PROTOCOL.into(), e.to_string().as_bytes());
                }
                return;
            }
            Err(e) => {
                debug!(peer = %peer, error = %e, "stream ended");
                return;
            }
        }
    }
}

/// Counts a strike against `peer`; on one too many, closes its connection and keeps it
/// out for [`super::guard::KEEP_OUT`] (returns true: the caller stops reading).
fn strike_out(peer: NodeId, conn: &quinn::Connection, ctx: &LinkContext) -> bool {
    if !ctx.guard.strikes.strike(peer, Instant::now()) {
        return false;
    }
    ctx.stats.peers_kept_out.fetch_add(1, Ordering::Relaxed);
    warn!(
        %peer,
        strikes = super::guard::MAX_STRIKES,
        keep_out = ?super::guard::KEEP_OUT,
        "closing the connection and keeping the peer out: too many bad frames"
    );
    conn.close(CLOSE_PROTOCOL.into(), b"too many bad frames");
    true
}
