//! Room in the relay table, per origin.
//!
//! Every operation a node takes part in holds an entry until a while after its deadline
//! (duplicates and late answers are recognised meanwhile). The table is bounded twice:
//! [`MAX_RELAYS_PER_ORIGIN`] entries per root and [`MAX_RELAYS`] in all. A root that
//! reached its share makes room by dropping its own oldest finished entry (one whose
//! deadline passed first, else any answered one): a root that starts operations faster
//! than they are forgotten recycles its own entries and never takes the others' room.
//! Only when a root's oldest entries are all still running is its next operation refused,
//! and the refusal is answered at once (an empty part: nothing reached), so the sender
//! reports the subtree missing right away instead of waiting out its budget. At the total
//! bound, the root holding the most entries gives one up.

use super::{Collectives, Own, Phase};
use crate::proto::{NodeId, OpId, Time};
use std::collections::VecDeque;

/// Most entries of one root in the relay table.
pub(super) const MAX_RELAYS_PER_ORIGIN: usize = 4_096;
/// Most entries in all.
pub(super) const MAX_RELAYS: usize = 20_000;
/// How many of a root's oldest entries are looked at for one to drop.
const SCAN: usize = 16;

/// The two bounds: per root, in all.
#[cfg(test)]
pub(in crate::proto::collective) fn limits() -> (usize, usize) {
    (MAX_RELAYS_PER_ORIGIN, MAX_RELAYS)
}

/// One root's entries, oldest first (ids of entries already forgotten are skipped lazily).
#[derive(Default)]
pub(super) struct OriginSlots {
    held: usize,
    order: VecDeque<OpId>,
}

impl Collectives {
    /// Makes room for a new entry of `op` if the bounds allow; false: refuse it.
    pub(super) fn admit(&mut self, now: Time, op: OpId) -> bool {
        let held = self.by_origin.get(&op.root).map_or(0, |s| s.held);
        if held >= MAX_RELAYS_PER_ORIGIN && !self.drop_finished(now, op.root) {
            return self.refuse();
        }
        if self.relays.len() >= MAX_RELAYS {
            let biggest = self
                .by_origin
                .iter()
                .max_by_key(|(_, s)| s.held)
                .map(|(root, _)| *root);
            if !biggest.is_some_and(|root| self.drop_finished(now, root)) {
                return self.refuse();
            }
        }
        true
    }

    fn refuse(&mut self) -> bool {
        self.refused_floods += 1;
        false
    }

    /// Counts a new entry (called when it is inserted).
    pub(super) fn count_entry(&mut self, op: OpId) {
        let slots = self.by_origin.entry(op.root).or_default();
        slots.held += 1;
        slots.order.push_back(op);
        // Ids forgotten behind a long-running entry are not at the front: compact now and
        // then, so the queue stays within twice what the root holds.
        if slots.order.len() > 2 * slots.held + SCAN {
            let relays = &self.relays;
            slots.order.retain(|o| *o == op || relays.contains_key(o));
        }
    }

    /// Removes an entry and uncounts it.
    pub(super) fn remove_entry(&mut self, op: &OpId) {
        if self.relays.remove(op).is_none() {
            return;
        }
        if let Some(slots) = self.by_origin.get_mut(&op.root) {
            slots.held -= 1;
            if slots.held == 0 {
                self.by_origin.remove(&op.root);
            }
        }
    }

    /// Drops `root`'s oldest finished entry among its [`SCAN`] oldest: past its deadline
    /// if there is one, else answered. False if all of them still run.
    fn drop_finished(&mut self, now: Time, root: NodeId) -> bool {
        let Some(slots) = self.by_origin.get_mut(&root) else {
            return false;
        };
        let relays = &self.relays;
        // Ids forgotten since are skipped; the queue stays about as long as `held`.
        while slots
            .order
            .front()
            .is_some_and(|op| !relays.contains_key(op))
        {
            slots.order.pop_front();
        }
        let finished = |op: &OpId, past: bool| {
            relays.get(op).is_some_and(|r| {
                r.phase == Phase::Done && r.own != Own::Pending && (!past || r.deadline <= now)
            })
        };
        let scan = slots.order.len().min(SCAN);
        let pick = (0..scan)
            .find(|&i| finished(&slots.order[i], true))
            .or_else(|| (0..scan).find(|&i| finished(&slots.order[i], false)));
        let Some(i) = pick else {
            return false;
        };
        let op = slots.order.remove(i).expect("within the scan");
        self.remove_entry(&op);
        true
    }

    /// Operations refused for want of room since the start.
    pub fn refused_operations(&self) -> u64 {
        self.refused_floods
    }
}
