//! Anti-entropy: the digest of the live records, and the full record set sent where
//! digests differ.

use super::Gossip;
use crate::proto::id::NodeId;
use crate::proto::message::{GossipMessage, Liveness, MemberRecord};
use crate::proto::rng::SplitMix64;

impl Gossip {
    /// The anti-entropy digest of the live records (alive or suspect) and our own: an
    /// order-free sum of one hash per record over everything a record's merge looks at.
    /// Tombstones are left out (they expire at different times on different nodes).
    pub(super) fn digest(&self) -> GossipMessage {
        let live = self
            .members
            .values()
            .map(|e| &e.record)
            .filter(|r| matches!(r.state, Liveness::Alive | Liveness::Suspect));
        let (mut hash, mut count) = (record_hash(&self.me), 1u32);
        for r in live {
            hash = hash.wrapping_add(record_hash(r));
            count += 1;
        }
        GossipMessage::Digest { hash, live: count }
    }

    /// Sends every record this node knows; `reply` asks for the peer's in return.
    pub(super) fn send_sync(&mut self, to: NodeId, reply: bool) {
        let members = self.records();
        self.send(to, GossipMessage::Sync { members, reply });
    }
}

/// A record's hash for [`Gossip::digest`]: FNV-1a over its fields, then one step of
/// [`SplitMix64`] (so that the sum over records mixes well). Deterministic across
/// processes.
fn record_hash(r: &MemberRecord) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(&r.id.0);
    eat(&r.incarnation.to_le_bytes());
    eat(&r.boot.to_le_bytes());
    eat(&[r.state as u8]);
    eat(r.addr.to_string().as_bytes());
    eat(r.name.as_bytes());
    for g in &r.groups {
        eat(&(g.len() as u32).to_le_bytes());
        eat(g.as_bytes());
    }
    SplitMix64::new(h).next_u64()
}
