//! Records only their owner can vouch for.
//!
//! A member's record says which incarnations it issued, where it listens, its name and
//! groups, and whether it left. Anyone may *suspect* or declare a member dead, but only at
//! an incarnation the member itself issued: every record carries the owner's signature of
//! its [`statement`] (`MemberRecord::proof`), and a record whose proof does not verify is
//! refused. So a token holder can no longer declare another member dead at an incarnation
//! it cannot refute (one near `u64::MAX`), announce its departure, or move its address:
//! the owner refutes any suspicion by signing the next incarnation, which nobody else can.
//!
//! The scheme is injected ([`RecordAuth`]): the network driver signs with the node's
//! Ed25519 key, whose hash is its id (`crate::net::record_auth`); the simulator, whose ids
//! come from seeds and whose nodes are all honest, uses [`TrustAll`].

use crate::proto::id::NodeId;
use crate::proto::message::{Liveness, MemberRecord};

/// Signs this node's statements and checks those of others.
pub trait RecordAuth: Send + Sync {
    /// This node's proof of `statement` (carried in `MemberRecord::proof`).
    fn sign(&self, statement: &[u8]) -> Vec<u8>;
    /// Whether `proof` is `id`'s proof of `statement`.
    fn verify(&self, id: &NodeId, statement: &[u8], proof: &[u8]) -> bool;
}

/// No proofs: signs with nothing and accepts everything. For the simulator and tests,
/// where ids do not come from keys and every node is honest; never for real peers.
#[derive(Clone, Copy, Debug, Default)]
pub struct TrustAll;

impl RecordAuth for TrustAll {
    fn sign(&self, _statement: &[u8]) -> Vec<u8> {
        Vec::new()
    }

    fn verify(&self, _id: &NodeId, _statement: &[u8], _proof: &[u8]) -> bool {
        true
    }
}

/// Domain separation: these bytes are signed for nothing else.
const TAG: &[u8] = b"phoenix-overlay member record v1\0";

/// What the owner of `r` signs: everything in the record but its state, and whether it
/// left. A suspect or dead record carries the owner's proof of the live record at that
/// incarnation (others may change its state to those, never its fields); a departed
/// record carries the owner's proof of its departure.
pub fn statement(r: &MemberRecord) -> Vec<u8> {
    let addr = r.addr.to_string();
    let mut out = Vec::with_capacity(TAG.len() + 64 + addr.len() + r.name.len());
    out.extend_from_slice(TAG);
    out.extend_from_slice(&r.id.0);
    out.extend_from_slice(&r.incarnation.to_le_bytes());
    out.extend_from_slice(&r.boot.to_le_bytes());
    out.push(u8::from(r.state == Liveness::Left));
    for field in [addr.as_bytes(), r.name.as_bytes()] {
        out.extend_from_slice(&(field.len() as u32).to_le_bytes());
        out.extend_from_slice(field);
    }
    out.extend_from_slice(&(r.groups.len() as u32).to_le_bytes());
    for g in &r.groups {
        out.extend_from_slice(&(g.len() as u32).to_le_bytes());
        out.extend_from_slice(g.as_bytes());
    }
    out
}

/// Whether `r` carries its owner's proof.
pub fn vouched(auth: &dyn RecordAuth, r: &MemberRecord) -> bool {
    auth.verify(&r.id, &statement(r), &r.proof)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> MemberRecord {
        MemberRecord {
            id: NodeId::from_seed(1, 1),
            name: "a".into(),
            addr: "127.0.0.1:7400".parse().unwrap(),
            incarnation: 5,
            boot: 3,
            state: Liveness::Alive,
            groups: vec!["g".into()],
            proof: Vec::new(),
        }
    }

    #[test]
    fn the_state_is_signed_only_as_departed_or_not() {
        let alive = record();
        let mut suspect = alive.clone();
        suspect.state = Liveness::Suspect;
        let mut dead = alive.clone();
        dead.state = Liveness::Dead;
        let mut left = alive.clone();
        left.state = Liveness::Left;
        assert_eq!(statement(&alive), statement(&suspect));
        assert_eq!(statement(&alive), statement(&dead));
        assert_ne!(statement(&alive), statement(&left));
    }

    #[test]
    fn every_field_but_the_state_is_signed() {
        let base = statement(&record());
        let changes: [fn(&mut MemberRecord); 6] = [
            |r| r.incarnation += 1,
            |r| r.boot += 1,
            |r| r.addr = "127.0.0.1:7401".parse().unwrap(),
            |r| r.name = "b".into(),
            |r| r.groups.push("h".into()),
            |r| r.id = NodeId::from_seed(1, 2),
        ];
        for change in changes {
            let mut r = record();
            change(&mut r);
            assert_ne!(statement(&r), base);
        }
        // Field boundaries are unambiguous: moving a byte from the name to a group shows.
        let mut a = record();
        a.name = "ab".into();
        a.groups = vec!["c".into()];
        let mut b = record();
        b.name = "a".into();
        b.groups = vec!["bc".into()];
        assert_ne!(statement(&a), statement(&b));
    }
}
