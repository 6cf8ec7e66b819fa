//! Admission: after the QUIC handshake, both sides prove they hold the join token, bound
//! to this TLS session (see [`super::token`]). Nothing else is read from a connection, and
//! no overlay message reaches the core, before this succeeds. Each side proves every token
//! it holds (the current one, and the previous one after a rotation); which ones match
//! decides whether a member that missed a rotation is let in and sent the new token (see
//! [`super::token_ring`]).

use super::frame::{FrameError, read_frame, write_frame};
use super::identity::peer_id;
use super::token::{EXPORTER_LABEL, PROOF_LEN, Role};
use super::token_ring::{Match, TokenRing};
use crate::proto::NodeId;
use std::time::Duration;

/// QUIC application error code: the join-token proof was wrong or missing.
pub const CLOSE_AUTH_FAILED: u32 = 0x4f01;
/// QUIC application error code: a frame broke the protocol (oversized, truncated stream).
pub const CLOSE_PROTOCOL: u32 = 0x4f02;
/// QUIC application error code: a duplicate connection was replaced.
pub const CLOSE_DUPLICATE: u32 = 0x4f03;
/// QUIC application error code: the node is leaving.
pub const CLOSE_LEAVING: u32 = 0x4f04;
/// QUIC application error code: the token exchange did not finish in time (an overloaded
/// or silent peer; distinct from [`CLOSE_AUTH_FAILED`] so it is not reported as a wrong token).
pub const CLOSE_TIMEOUT: u32 = 0x4f05;
/// QUIC application error code: the connection carried nothing for a while; the next
/// packet dials again.
pub const CLOSE_IDLE: u32 = 0x4f06;

/// Why a connection was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The peer's proof did not verify: it does not hold our token.
    #[error("peer {} failed the join-token proof", peer.short())]
    BadProof { peer: NodeId },
    /// The peer refused our proof (we do not hold its overlay's token).
    #[error("rejected by the peer: wrong join token for this overlay")]
    Rejected,
    /// The peer's certificate could not be turned into an id.
    #[error("peer presented no usable certificate")]
    NoIdentity,
    /// The exchange did not finish in time.
    #[error("join-token exchange timed out")]
    Timeout,
    /// The connection failed during the exchange.
    #[error("connection failed during the join-token exchange: {0}")]
    Connection(#[from] quinn::ConnectionError),
    /// A proof frame could not be read or written.
    #[error("join-token exchange: {0}")]
    Frame(#[from] FrameError),
    /// The TLS session gave no keying material to bind the proof to.
    #[error("the TLS session cannot export keying material for the token proof")]
    KeyingMaterial,
}

/// A peer that passed admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Its id (from its certificate).
    pub peer: NodeId,
    /// It holds an older token than ours: send it the current one.
    pub behind: bool,
}

/// Runs the proof exchange on a fresh connection; returns the admitted peer. A peer that
/// proves only our previous token is admitted if `is_member` says it is a member.
/// On failure the acceptor closes the connection with [`CLOSE_AUTH_FAILED`].
pub async fn authenticate(
    conn: &quinn::Connection,
    ring: &TokenRing,
    role: Role,
    timeout: Duration,
    is_member: &(dyn Fn(&NodeId) -> bool + Sync),
) -> Result<Admitted, AuthError> {
    match tokio::time::timeout(timeout, exchange(conn, ring, role, is_member)).await {
        Ok(result) => result,
        Err(_) => {
            conn.close(CLOSE_TIMEOUT.into(), b"join-token exchange timed out");
            Err(AuthError::Timeout)
        }
    }
}

/// Runs the proof exchange holding just `token` (no rotation, no members): what a tool or
/// a test peer outside a node needs. Returns the peer's id.
pub async fn authenticate_with_token(
    conn: &quinn::Connection,
    token: &super::token::JoinToken,
    role: Role,
    timeout: Duration,
) -> Result<NodeId, AuthError> {
    let ring = TokenRing::new(token.clone(), 0, None, None);
    let admitted = authenticate(conn, &ring, role, timeout, &|_| false).await?;
    Ok(admitted.peer)
}

async fn exchange(
    conn: &quinn::Connection,
    ring: &TokenRing,
    role: Role,
    is_member: &(dyn Fn(&NodeId) -> bool + Sync),
) -> Result<Admitted, AuthError> {
    let peer = peer_id(conn).ok_or(AuthError::NoIdentity)?;
    let mut exporter = [0u8; 32];
    conn.export_keying_material(&mut exporter, EXPORTER_LABEL, b"")
        .map_err(|_| AuthError::KeyingMaterial)?;
    let ours = ring.proofs(role, &exporter);
    let theirs_role = match role {
        Role::Dialer => Role::Acceptor,
        Role::Acceptor => Role::Dialer,
    };
    let admitted = |proofs: &[u8]| match ring.verify(theirs_role, &exporter, proofs) {
        Some(Match::Current) => Some(Admitted {
            peer,
            behind: false,
        }),
        Some(Match::Behind) if is_member(&peer) => Some(Admitted { peer, behind: true }),
        _ => None,
    };
    match role {
        Role::Dialer => {
            let (mut send, mut recv) = conn.open_bi().await.map_err(|e| map_closed(&e))?;
            write_frame(&mut send, &ours).await?;
            let proof = match read_frame(&mut recv).await {
                Ok(Some(p)) => p,
                Ok(None) => return Err(AuthError::Rejected),
                Err(_) => return Err(closed_reason(conn)),
            };
            let Some(admitted) = admitted(&proof) else {
                conn.close(CLOSE_AUTH_FAILED.into(), b"join token proof invalid");
                return Err(AuthError::BadProof { peer });
            };
            let _ = send.finish();
            Ok(admitted)
        }
        Role::Acceptor => {
            let (mut send, mut recv) = conn.accept_bi().await.map_err(|e| map_closed(&e))?;
            let proof = match read_frame(&mut recv).await {
                Ok(p) => p.unwrap_or_default(),
                // An oversized or cut-off proof is a bad proof, not a transport failure.
                Err(FrameError::TooLarge { .. } | FrameError::Truncated) => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            let checked = match proof.len() {
                PROOF_LEN | TWO_PROOFS => admitted(&proof),
                _ => None,
            };
            let Some(admitted) = checked else {
                conn.close(CLOSE_AUTH_FAILED.into(), b"join token proof invalid");
                return Err(AuthError::BadProof { peer });
            };
            write_frame(&mut send, &ours).await?;
            let _ = send.finish();
            Ok(admitted)
        }
    }
}

/// The proofs of a node holding a current and a previous token.
const TWO_PROOFS: usize = 2 * PROOF_LEN;

fn map_closed(e: &quinn::ConnectionError) -> AuthError {
    match e {
        quinn::ConnectionError::ApplicationClosed(c)
            if c.error_code == quinn::VarInt::from_u32(CLOSE_AUTH_FAILED) =>
        {
            AuthError::Rejected
        }
        other => AuthError::Connection(other.clone()),
    }
}

fn closed_reason(conn: &quinn::Connection) -> AuthError {
    match conn.close_reason() {
        Some(e) => map_closed(&e),
        None => AuthError::Rejected,
    }
}
