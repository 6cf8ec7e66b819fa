//! The join token and the proof that a peer holds it.
//!
//! The first node of an overlay creates a token (32 random bytes, shown as `ovl1-` + hex).
//! The token itself never crosses the network: right after the QUIC handshake each side
//! sends `HMAC-SHA256(token, role || exporter)`, where `exporter` is keying material
//! exported from this very TLS session. A proof is therefore useless on any other
//! connection (no replay, no relay), and a peer without the token cannot produce one.

use crate::proto::id::parse_hex;
use ring::hmac;
use std::fmt;
use std::str::FromStr;

/// Prefix of the printed form; names the format version.
const PREFIX: &str = "ovl1-";
/// Label for TLS keying-material export (RFC 5705 / RFC 8446 §7.5).
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER-phoenix-overlay-join";
/// Length of a proof.
pub const PROOF_LEN: usize = 32;

/// Which side of a connection a proof is for; the two proofs of one session differ, so a
/// peer cannot echo ours back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The side that opened the connection.
    Dialer,
    /// The side that accepted it.
    Acceptor,
}

/// A secret that admits nodes into one overlay.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken([u8; 32]);

/// Why a string is not a join token.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Wrong prefix.
    #[error("a join token starts with \"{PREFIX}\"")]
    Prefix,
    /// Wrong length or a non-hex character.
    #[error("a join token is \"{PREFIX}\" followed by 64 hex digits")]
    Format,
}

impl JoinToken {
    /// A new random token.
    pub fn generate() -> JoinToken {
        let mut bytes = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .expect("the system random number generator failed");
        JoinToken(bytes)
    }

    /// The token's bytes (to send it, after a rotation, over an admitted connection).
    pub(crate) fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A token from its bytes.
    pub(crate) fn from_bytes(bytes: [u8; 32]) -> JoinToken {
        JoinToken(bytes)
    }

    /// This side's proof for a session with the given exported keying material.
    pub(crate) fn proof(&self, role: Role, exporter: &[u8]) -> [u8; PROOF_LEN] {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.0);
        let tag = hmac::sign(&key, &message(role, exporter));
        let mut out = [0u8; PROOF_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Checks a peer's proof in constant time.
    pub(crate) fn verify(&self, role: Role, exporter: &[u8], proof: &[u8]) -> bool {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.0);
        hmac::verify(&key, &message(role, exporter), proof).is_ok()
    }
}

fn message(role: Role, exporter: &[u8]) -> Vec<u8> {
    let mut m = match role {
        Role::Dialer => b"dialer:".to_vec(),
        Role::Acceptor => b"acceptor:".to_vec(),
    };
    m.extend_from_slice(exporter);
    m
}

impl fmt::Display for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PREFIX)?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Never prints the secret.
impl fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JoinToken(..)")
    }
}

impl FromStr for JoinToken {
    type Err = TokenError;

    fn from_str(s: &str) -> Result<JoinToken, TokenError> {
        let hex = s.trim().strip_prefix(PREFIX).ok_or(TokenError::Prefix)?;
        parse_hex(hex).map(JoinToken).ok_or(TokenError::Format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_print_and_parse_and_proofs_bind_role_and_session() {
        let t = JoinToken::generate();
        let parsed: JoinToken = t.to_string().parse().unwrap();
        assert_eq!(parsed, t);
        assert!(!format!("{t:?}").contains(&t.to_string()[5..]));
        assert_eq!("x".parse::<JoinToken>(), Err(TokenError::Prefix));
        assert_eq!("ovl1-zz".parse::<JoinToken>(), Err(TokenError::Format));
        let bad = format!("ovl1-{}", "g".repeat(64));
        assert_eq!(bad.parse::<JoinToken>(), Err(TokenError::Format));

        let session = [7u8; 32];
        let p = t.proof(Role::Dialer, &session);
        assert!(t.verify(Role::Dialer, &session, &p));
        assert!(!t.verify(Role::Acceptor, &session, &p), "roles differ");
        assert!(!t.verify(Role::Dialer, &[8u8; 32], &p), "sessions differ");
        let other = JoinToken::generate();
        assert!(!other.verify(Role::Dialer, &session, &p), "tokens differ");
        assert!(!t.verify(Role::Dialer, &session, &p[..31]));
    }
}
