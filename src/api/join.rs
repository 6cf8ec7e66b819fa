//! Joining through a list of addresses: each tried in turn, rounds repeated with jittered,
//! capped exponential backoff until one admits the node or the deadline passes.
//!
//! A closed port is told apart from a silent host: a datagram to a closed port draws an
//! ICMP port-unreachable, which Linux reports on a connected UDP socket at once, so a
//! mistyped address fails in about a second instead of waiting out the dial timeout.

use super::{Node, NodeError};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tracing::{Span, info, warn};

/// Rounds in which every address was refused before the join gives up (a node that is
/// being restarted gets that long to come back).
const REFUSED_ROUNDS: u32 = 3;
/// Backoff between rounds: first and largest pause.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(4);
/// How long a restarting node tries its remembered peers before it goes on alone.
const RESTART_WAIT: Duration = Duration::from_secs(20);

/// Joins through the first of `addrs` that admits the node. A restarting node (its
/// addresses come from the data directory) continues alone when none answers.
pub(super) async fn join_any(
    node: &Node,
    addrs: &[SocketAddr],
    deadline: Instant,
    restarting: bool,
    span: &Span,
) -> Result<(), NodeError> {
    if addrs.is_empty() {
        return if restarting {
            Ok(())
        } else {
            Err(NodeError::NoJoinAddress)
        };
    }
    // A restarting node whose old peers all stay silent goes on alone after a while,
    // however long a fresh join would keep trying.
    let deadline = if restarting {
        deadline.min(Instant::now() + RESTART_WAIT)
    } else {
        deadline
    };
    let mut last_error = None;
    let mut refused_rounds = 0;
    let mut pause = BACKOFF_FIRST;
    let mut round = 0u64;
    loop {
        round += 1;
        // Rounds 1, 2, 4, 8...: a join that waits for hours says so now and then, not
        // every few seconds.
        let say = round.is_power_of_two();
        let mut all_refused = true;
        for &addr in addrs {
            let attempt = tokio::select! {
                r = node.join(addr) => r,
                true = port_closed(addr) => Err(NodeError::JoinRefused { addr }),
            };
            match attempt {
                Ok(via) => {
                    info!(parent: span, via = %via, %addr, "joined the overlay");
                    return Ok(());
                }
                // A wrong token will not get better by retrying.
                Err(e @ NodeError::TokenRejected { .. }) => return Err(e),
                Err(e @ (NodeError::Join(_) | NodeError::JoinTimeout { .. })) => {
                    all_refused = false;
                    if say {
                        warn!(parent: span, %addr, error = %e, round, "join attempt failed; trying again");
                    }
                    last_error = Some(e);
                }
                Err(e @ NodeError::JoinRefused { .. }) => {
                    warn!(parent: span, %addr, error = %e, "join attempt failed");
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        refused_rounds += u32::from(all_refused);
        if Instant::now() >= deadline || refused_rounds >= REFUSED_ROUNDS {
            if restarting {
                warn!(parent: span, "no known member answered: continuing alone");
                return Ok(());
            }
            return Err(last_error.unwrap_or(NodeError::NoJoinAddress));
        }
        let jittered = pause.mul_f64(0.5 + jitter());
        tokio::time::sleep(jittered.min(deadline.saturating_duration_since(Instant::now()))).await;
        pause = (pause * 2).min(BACKOFF_MAX);
    }
}

/// A factor in [0, 1) from the clock: enough to keep nodes started together apart.
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    f64::from(nanos % 1000) / 1000.0
}

/// Whether `addr`'s host says nothing listens on the port (false when it stays silent,
/// which is what a live QUIC endpoint does with a one-byte datagram).
async fn port_closed(addr: SocketAddr) -> bool {
    let any: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let Ok(socket) = tokio::net::UdpSocket::bind(any).await else {
        return false;
    };
    if socket.connect(addr).await.is_err() || socket.send(&[0]).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    match tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buf)).await {
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        _ => false,
    }
}
