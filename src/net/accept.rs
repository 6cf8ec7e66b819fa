//! Accepting connections: admission (TLS handshake, then the join-token proof) under the
//! limits that keep anyone who can reach the port from crowding out the members.
//!
//! - At most [`MAX_PENDING_HANDSHAKES`] connections are pending at once, at most
//!   [`MAX_PENDING_PER_ADDRESS`](super::guard::MAX_PENDING_PER_ADDRESS) of them from one
//!   address; a connection over the per-address share is refused.
//! - Past half of the slots, a client must first prove it receives at its address (QUIC
//!   retry: one round trip, no state kept), so spoofed sources cannot hold slots.
//! - With every slot taken, the connection that has waited longest for its token proof
//!   *after* completing TLS gives way to the newest: a flood of connections that finish
//!   TLS and then never prove anything cannot keep an honest newcomer out, who sends its
//!   proof one round trip after TLS. Connections still in the TLS handshake are never
//!   made to give way (a join storm of honest nodes on loaded machines is slow there, and
//!   evicting them would let none finish); they are bounded by the timeout, the
//!   per-address share and address validation.
//!
//! Refusals are counted (`refused_connections`) and logged at most once per address and
//! interval ([`super::guard::LogGate`]).

use super::auth::{Admitted, AuthError, CLOSE_PROTOCOL, authenticate};
use super::link::{HANDSHAKE_TIMEOUT, LinkContext, LinkInput, MAX_PENDING_HANDSHAKES};
use crate::proto::NodeId;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tracing::{debug, warn};

/// Connections past TLS waiting for their token proof, oldest first.
type Evictable = Arc<Mutex<VecDeque<oneshot::Sender<()>>>>;

/// How long a new connection waits for the slot the oldest pending one gives up.
const EVICTION_WAIT: Duration = Duration::from_millis(50);

/// Accepts connections until the endpoint closes; each is admitted in its own task.
pub async fn accept_loop(endpoint: quinn::Endpoint, ctx: LinkContext) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    // One sender per connection waiting for its token proof, oldest first: a message
    // makes it give up. Filled by the connection tasks once TLS is done.
    let evictable: Evictable = Arc::default();
    while let Some(incoming) = endpoint.accept().await {
        let remote = incoming.remote_address();
        if slots.available_permits() < MAX_PENDING_HANDSHAKES / 2
            && !incoming.remote_address_validated()
            && incoming.may_retry()
        {
            if let Err(e) = incoming.retry() {
                e.into_incoming().ignore();
            }
            continue;
        }
        let refuse = |incoming: quinn::Incoming, why: &'static str| {
            ctx.stats
                .refused_connections
                .fetch_add(1, Ordering::Relaxed);
            if let Some(more) = ctx.guard.refused.allow(remote.ip(), Instant::now()) {
                warn!(%remote, more, "{why}: refused");
            }
            incoming.refuse();
        };
        let Some(slot) = ctx.guard.pending.enter(remote.ip()) else {
            refuse(incoming, "too many pending handshakes from this address");
            continue;
        };
        {
            // Entries of connections already decided are dropped here: live ones are at
            // most the slots, so the queue stays within twice that.
            let mut queue = evictable.lock().expect("evictable lock");
            if queue.len() > MAX_PENDING_HANDSHAKES {
                queue.retain(|e| !e.is_closed());
            }
        }
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                let oldest = {
                    let mut queue = evictable.lock().expect("evictable lock");
                    queue.retain(|e| !e.is_closed());
                    queue.pop_front()
                };
                // Nothing waits for a proof (every slot is in TLS): refuse at once rather
                // than stall the loop.
                match oldest.map(|o| o.send(())) {
                    Some(Ok(())) => {
                        tokio::time::timeout(EVICTION_WAIT, slots.clone().acquire_owned())
                            .await
                            .ok()
                            .and_then(Result::ok)
                    }
                    _ => None,
                }
            }
        };
        let Some(permit) = permit else {
            refuse(incoming, "too many pending handshakes");
            continue;
        };
        let (ctx, evictable) = (ctx.clone(), evictable.clone());
        crate::net::spawn_in_span(async move {
            let held = (permit, slot);
            let admitted = admit(incoming, &ctx, &evictable).await;
            drop(held); // admission is decided
            if let Some((admitted, conn)) = admitted {
                let connected = LinkInput::Connected {
                    peer: admitted.peer,
                    conn,
                    dialed: false,
                    join: None,
                    behind: admitted.behind,
                };
                let _ = ctx.to_driver.send(connected).await;
            }
        });
    }
}

/// The handshake and the token proof of one inbound connection: the admitted peer, or
/// `None` (counted and, rate-limited, logged).
async fn admit(
    incoming: quinn::Incoming,
    ctx: &LinkContext,
    evictable: &Evictable,
) -> Option<(Admitted, quinn::Connection)> {
    let remote = incoming.remote_address();
    let refused = || {
        ctx.stats
            .refused_connections
            .fetch_add(1, Ordering::Relaxed)
    };
    let conn = match tokio::time::timeout(HANDSHAKE_TIMEOUT, incoming).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => {
            refused();
            debug!(%remote, error = %e, "inbound handshake failed");
            return None;
        }
        Err(_) => {
            refused();
            debug!(%remote, "inbound handshake timed out");
            return None;
        }
    };
    let (evict, evicted) = oneshot::channel();
    evictable.lock().expect("evictable lock").push_back(evict);
    let acceptor = super::token::Role::Acceptor;
    let is_member = |p: &NodeId| ctx.members.is_known_member(p);
    let proof = tokio::select! {
        proof = authenticate(&conn, &ctx.ring, acceptor, HANDSHAKE_TIMEOUT, &is_member) => proof,
        _ = evicted => {
            refused();
            conn.close(CLOSE_PROTOCOL.into(), b"no token proof in time");
            debug!(%remote, "a connection waiting for its token proof gave way to a newer one");
            return None;
        }
    };
    match proof {
        Ok(a) if a.peer == ctx.me => {
            conn.close(CLOSE_PROTOCOL.into(), b"connected to itself");
            None
        }
        Ok(a) if kept_out(ctx, &a.peer, remote.ip()) => {
            refused();
            conn.close(CLOSE_PROTOCOL.into(), b"kept out after protocol violations");
            None
        }
        Ok(a) => Some((a, conn)),
        Err(e) => {
            if matches!(e, AuthError::BadProof { .. }) {
                ctx.stats.auth_failures.fetch_add(1, Ordering::Relaxed);
            }
            refused();
            // Anyone who can reach the port gets here: one line per address and interval,
            // saying how many were held back, so the log cannot be filled.
            if let Some(more) = ctx.guard.refused.allow(remote.ip(), Instant::now()) {
                warn!(%remote, error = %e, more, "refused an inbound connection");
            }
            None
        }
    }
}

/// Whether `peer` is kept out: itself, or as no member from an address kept out.
fn kept_out(ctx: &LinkContext, peer: &NodeId, ip: std::net::IpAddr) -> bool {
    let (strikes, now) = (&ctx.guard.strikes, Instant::now());
    strikes.kept_out(peer, now).is_some()
        || (strikes.address_kept_out(ip, now) && !ctx.members.is_known_member(peer))
}
