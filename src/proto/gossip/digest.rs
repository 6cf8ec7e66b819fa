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
        let (sum, count) = self.live_sum;
        GossipMessage::Digest {
            hash: record_hash(&self.me).wrapping_add(sum),
            live: count.saturating_add(1),
        }
    }

    /// Keeps the digest's sum over the live records up to date as the record of one
    /// member goes from `old` to `new` (a sum over the table per period was a twentieth of
    /// the simulator's time at 500 nodes).
    pub(super) fn digest_replace(
        &mut self,
        old: Option<&MemberRecord>,
        new: Option<&MemberRecord>,
    ) {
        let live = |r: &&MemberRecord| matches!(r.state, Liveness::Alive | Liveness::Suspect);
        let (sum, count) = &mut self.live_sum;
        if let Some(r) = old.filter(live) {
            *sum = sum.wrapping_sub(record_hash(r));
            *count -= 1;
        }
        if let Some(r) = new.filter(live) {
            *sum = sum.wrapping_add(record_hash(r));
            *count += 1;
        }
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
