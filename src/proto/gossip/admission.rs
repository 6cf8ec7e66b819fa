//! Joins admitted at the rate this node can serve them.
//!
//! A join is answered with every record this node knows: at a thousand members a quarter
//! of a megabyte, which a join storm through one seed would make it send to every
//! newcomer at once. Full answers are paid from a budget of records: past
//! [`GossipConfig::join_rate`] records a second (after a burst of
//! [`GossipConfig::join_burst`]; the rate divided by 1 + the local health, so a node short
//! of CPU serves fewer), about 5 MB/s by default, so 20 full answers a second at a
//! thousand members and all of a storm of a few hundred, a join is answered lightly: the joiner's record spreads as for
//! any join, and the answer carries this node's record and [`LIGHT_JOIN_RECORDS`] random
//! live ones, with `reply` set. That tells the joiner to pull the rest from one of those
//! members (a digest, answered with every record where the tables differ), so the load
//! of a storm spreads over the members that joined before it. The answer is an ordinary
//! `Sync`: a joiner of an older version takes it as a full one and fills in by
//! anti-entropy, one period later.
//!
//! [`GossipConfig::join_rate`]: super::GossipConfig::join_rate
//! [`GossipConfig::join_burst`]: super::GossipConfig::join_burst

use super::Gossip;
use crate::proto::id::NodeId;
use crate::proto::message::{GossipMessage, MemberRecord};
use crate::proto::time::Time;
use std::sync::Arc;

/// Live records (besides its own) a node sends in a light answer to a join.
pub const LIGHT_JOIN_RECORDS: usize = 8;

/// Records this node may still send in full answers to joins now, and when that was
/// worked out.
#[derive(Clone, Copy, Debug)]
pub(super) struct JoinBudget {
    tokens: f64,
    at: Time,
}

impl JoinBudget {
    /// A full bucket at `now`.
    pub(super) fn new(burst: u32, now: Time) -> Self {
        JoinBudget {
            tokens: burst as f64,
            at: now,
        }
    }
}

impl Gossip {
    /// `joiner` asked to join: its record spreads, and it gets every record, or a light
    /// answer once full answers run past the budget (see the module docs).
    pub(super) fn answer_join(&mut self, now: Time, joiner: MemberRecord) {
        let from = joiner.id;
        self.spread(now, vec![Arc::new(joiner)], Some(from));
        // Tables this small cost no more in full than lightly.
        let live = self.live_members().count();
        let small = live <= LIGHT_JOIN_RECORDS + 1;
        if small || self.take_join_budget(now, live as f64 + 1.0) {
            return self.send_sync(from, false);
        }
        let mut members = vec![self.me.clone()];
        for id in self.pick_random(LIGHT_JOIN_RECORDS, &[from]) {
            members.extend(self.members.get(&id).map(|e| e.record.clone()));
        }
        self.light_joins += 1;
        self.send(
            from,
            GossipMessage::Sync {
                members,
                reply: true,
            },
        );
    }

    /// A light answer to our join came from `via`: the rest of the table is pulled from
    /// another member it named, with a digest (from `via` itself when it named nobody).
    pub(super) fn pull_rest_of_table(&mut self, via: NodeId) {
        match self.pick_random(1, &[via]).pop() {
            Some(peer) => {
                let digest = self.digest();
                self.send(peer, digest);
            }
            None => self.send_sync(via, false),
        }
    }

    /// Joins answered lightly so far (see the module docs).
    pub fn light_joins(&self) -> u64 {
        self.light_joins
    }

    /// Pays `cost` records for a full answer, if the budget has them.
    fn take_join_budget(&mut self, now: Time, cost: f64) -> bool {
        let rate = self.config.join_rate / (1 + self.health) as f64;
        let burst = self.config.join_burst as f64;
        let b = &mut self.join_budget;
        let elapsed = now.saturating_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate).min(burst);
        b.at = now;
        if b.tokens >= cost {
            b.tokens -= cost;
            true
        } else {
            false
        }
    }
}
