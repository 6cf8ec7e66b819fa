//! Updates waiting to ride on probes and acks, each sent a bounded number of times.
//!
//! The queue holds member ids, not records: what rides is the record as the table holds
//! it when the message goes. A newer record of a member already queued replaces the
//! older one without a scan: each entry carries the generation it was queued at, and an
//! entry whose generation is no longer its member's latest is skipped when it comes up.
//! (A scan per update made a join storm of n members cost n² per node.)
//!
//! At most [`MAX_QUEUED`] members are queued; past it the oldest news goes first (as
//! memberlist prunes its broadcast queue). Probes carry a few records a second, so in a
//! join storm of thousands the queue would hold every member for an hour: a copy per
//! node of the whole membership, and news that rumors and anti-entropy carry anyway.

use crate::proto::id::{IdMap, NodeId};
use std::collections::VecDeque;

/// Most members queued at once.
pub(super) const MAX_QUEUED: usize = 256;

/// The ids of members whose records are news, in the order they go next.
#[derive(Debug, Default)]
pub(super) struct PiggybackQueue {
    /// Member, generation queued at, times sent.
    order: VecDeque<(NodeId, u64, usize)>,
    /// Each queued member's latest generation.
    latest: IdMap<NodeId, u64>,
    next_gen: u64,
}

impl PiggybackQueue {
    /// Queues `id`'s record as news, to be sent afresh (an older entry of it is dropped).
    pub(super) fn push(&mut self, id: NodeId) {
        self.next_gen += 1;
        self.latest.insert(id, self.next_gen);
        self.order.push_back((id, self.next_gen, 0));
        // Superseded entries are skipped as they come up; past twice the live ones they
        // are swept out at once, so the queue stays within twice the members queued.
        while self.latest.len() > MAX_QUEUED {
            let Some((id, queued_at, _)) = self.order.pop_front() else {
                break;
            };
            if self.latest.get(&id) == Some(&queued_at) {
                self.latest.remove(&id); // the oldest news still queued
            }
        }
        if self.order.len() > 2 * self.latest.len() + 16 {
            let latest = &self.latest;
            self.order.retain(|(id, g, _)| latest.get(id) == Some(g));
        }
    }

    /// Takes up to `count` ids whose records go on the next message, least sent first;
    /// each goes back in the queue until it has been sent `limit` times.
    pub(super) fn take(&mut self, count: usize, limit: usize) -> Vec<NodeId> {
        let mut out = Vec::new();
        let mut looked = 0;
        // Each live entry is looked at once at most: one taken goes to the back.
        let live = self.latest.len();
        while out.len() < count && looked < live {
            let Some((id, queued_at, sent)) = self.order.pop_front() else {
                break;
            };
            if self.latest.get(&id) != Some(&queued_at) {
                continue; // superseded by a newer entry of the same member
            }
            looked += 1;
            out.push(id);
            if sent + 1 < limit {
                self.order.push_back((id, queued_at, sent + 1));
            } else {
                self.latest.remove(&id);
            }
        }
        out
    }

    /// How many members are queued.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.latest.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> NodeId {
        let mut b = [0u8; 16];
        b[0] = n;
        NodeId(b)
    }

    #[test]
    fn a_newer_record_replaces_the_queued_one_and_is_sent_afresh() {
        let mut q = PiggybackQueue::default();
        q.push(id(1));
        q.push(id(2));
        assert_eq!(q.take(1, 3), vec![id(1)]); // id 1 sent once
        q.push(id(1)); // news again: goes to the back, its count reset
        assert_eq!(q.len(), 2);
        // Both go three times from here: id 1 as it was queued again, not counting the
        // time before.
        for _ in 0..3 {
            assert_eq!(q.take(5, 3), vec![id(2), id(1)]);
        }
        assert!(q.take(5, 3).is_empty());
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn superseded_entries_never_pile_up() {
        let mut q = PiggybackQueue::default();
        for round in 0..1000u32 {
            q.push(id((round % 3) as u8));
        }
        assert_eq!(q.len(), 3);
        assert!(q.order.len() <= 2 * 3 + 16 + 1);
        let mut taken = q.take(10, 1);
        taken.sort();
        assert_eq!(taken, vec![id(0), id(1), id(2)]);
    }

    #[test]
    fn past_the_bound_the_oldest_news_goes() {
        let mut q = PiggybackQueue::default();
        let many = |i: usize| {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&(i as u64).to_le_bytes());
            NodeId(b)
        };
        for i in 0..MAX_QUEUED + 10 {
            q.push(many(i));
        }
        assert_eq!(q.len(), MAX_QUEUED);
        assert!(q.order.len() <= 2 * MAX_QUEUED + 16 + 1);
        let next = q.take(1, 5);
        assert_eq!(next, vec![many(10)], "the first ten were dropped");
    }
}
