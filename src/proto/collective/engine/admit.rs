//! Room in the relay table, per origin and per sender.
//!
//! Every operation a node takes part in holds an entry until a while after its deadline
//! (duplicates and late answers are recognised meanwhile). The table is bounded three
//! times: [`MAX_RELAYS_PER_ORIGIN`] entries per root as sent by one peer,
//! [`MAX_RELAYS_PER_SENDER`] per peer it came from, and [`MAX_RELAYS`] in all.
//!
//! Why both keys: the root named in an operation is the sender's word, the sender is not
//! (connections are authenticated). A share per claimed root alone let one member
//! claim a few roots and fill the table, or claim another member's root and take its
//! share at this node; keyed by (root, sender), a forged root only fills the forger's
//! own shares, and the per-sender bound keeps a forger's shares together under a fifth
//! of the table, whatever roots it names. A parent relaying the operations of many
//! roots stays far under it: its entries are recycled as they finish.
//!
//! A share at its bound makes room by dropping its own oldest finished entry (one whose
//! deadline passed first, else any answered one): a root that starts operations faster
//! than they are forgotten recycles its own entries and never takes the others' room.
//! Only when the oldest entries are all still running is the next operation refused,
//! and the refusal is answered at once (an empty part: nothing reached), so the sender
//! reports the subtree missing right away instead of waiting out its budget. At the total
//! bound, the share holding the most entries gives one up.

use super::{Collectives, Own, Phase};
use crate::proto::collective::UNSOLICITED_MIN_BYTES;
use crate::proto::message::DownBody;
use crate::proto::{Event, NodeId, OpId, Time};
use std::collections::VecDeque;

/// Most entries of one root, as sent by one peer, in the relay table.
pub(super) const MAX_RELAYS_PER_ORIGIN: usize = 4_096;
/// Most entries sent by one peer (this node's own operations aside).
pub(super) const MAX_RELAYS_PER_SENDER: usize = 4_096;
/// Most entries in all.
pub(super) const MAX_RELAYS: usize = 20_000;
/// How many of a share's oldest entries are looked at for one to drop.
const SCAN: usize = 16;

/// A share of the table: a root's operations as sent by one peer.
type Share = (NodeId, NodeId);

/// The bounds: per root and sender, per sender, in all.
#[cfg(test)]
pub(in crate::proto::collective) fn limits() -> (usize, usize, usize) {
    (MAX_RELAYS_PER_ORIGIN, MAX_RELAYS_PER_SENDER, MAX_RELAYS)
}

/// One share's entries, oldest first (ids of entries already forgotten are skipped
/// lazily).
#[derive(Default)]
pub(super) struct OriginSlots {
    held: usize,
    order: VecDeque<OpId>,
}

impl Collectives {
    /// Makes room for a new entry of `op`, sent by `from`, if the bounds allow; false:
    /// refuse it.
    pub(super) fn admit(&mut self, now: Time, op: OpId, from: NodeId) -> bool {
        let share = (op.root, from);
        let held = self.by_origin.get(&share).map_or(0, |s| s.held);
        if held >= MAX_RELAYS_PER_ORIGIN && !self.drop_finished(now, share) {
            return self.refuse();
        }
        let sent = self.by_sender.get(&from).copied().unwrap_or(0);
        if from != self.me && sent >= MAX_RELAYS_PER_SENDER {
            // The sender's biggest share gives one up.
            let biggest = (self.by_origin.iter())
                .filter(|((_, s), _)| *s == from)
                .max_by_key(|(_, slots)| slots.held)
                .map(|(share, _)| *share);
            if !biggest.is_some_and(|share| self.drop_finished(now, share)) {
                return self.refuse();
            }
        }
        if self.relays.len() >= MAX_RELAYS {
            let biggest = (self.by_origin.iter())
                .max_by_key(|(_, s)| s.held)
                .map(|(share, _)| *share);
            if !biggest.is_some_and(|share| self.drop_finished(now, share)) {
                return self.refuse();
            }
        }
        true
    }

    /// Whether this node takes part in `op`, or did less than a minute past its deadline:
    /// it holds its entry, or (the root) the operation is still running, its entry given
    /// up to make room.
    pub(super) fn knows(&self, op: OpId) -> bool {
        self.relays.contains_key(&op) || (op.root == self.me && self.origins.contains_key(&op))
    }

    /// A `Down` naming this node as root of `op`, which holds no entry for it, is dropped:
    /// ours with its entry given up, or not ours (forged, or from a run before a restart),
    /// which is held against the sender.
    pub(super) fn drop_own_down(&mut self, from: NodeId, op: OpId, body: &DownBody) {
        if !self.knows(op) {
            self.unsolicited(from, wire_len(body));
        }
    }

    /// A message from `from` for an operation with no entry here was dropped: reported, so
    /// the driver can hold a flood of them against the sender.
    pub(super) fn unsolicited(&mut self, from: NodeId, bytes: u64) {
        let bytes = bytes.max(UNSOLICITED_MIN_BYTES);
        self.events.push_back(Event::Unsolicited { from, bytes });
    }

    fn refuse(&mut self) -> bool {
        self.refused_floods += 1;
        false
    }

    /// Counts a new entry of `op` sent by `from` (called when it is inserted).
    pub(super) fn count_entry(&mut self, op: OpId, from: NodeId) {
        *self.by_sender.entry(from).or_default() += 1;
        let slots = self.by_origin.entry((op.root, from)).or_default();
        slots.held += 1;
        slots.order.push_back(op);
        // Ids forgotten behind a long-running entry are not at the front: compact now and
        // then, so the queue stays within twice what the share holds.
        if slots.order.len() > 2 * slots.held + SCAN {
            let relays = &self.relays;
            slots.order.retain(|o| *o == op || relays.contains_key(o));
        }
    }

    /// Removes an entry and uncounts it.
    pub(super) fn remove_entry(&mut self, op: &OpId) {
        let Some(relay) = self.relays.remove(op) else {
            return;
        };
        let from = relay.from;
        if let Some(sent) = self.by_sender.get_mut(&from) {
            *sent -= 1;
            if *sent == 0 {
                self.by_sender.remove(&from);
            }
        }
        let share = (op.root, from);
        if let Some(slots) = self.by_origin.get_mut(&share) {
            slots.held -= 1;
            if slots.held == 0 {
                self.by_origin.remove(&share);
            }
        }
    }

    /// Drops the oldest finished entry of `share` among its [`SCAN`] oldest: past its
    /// deadline if there is one, else answered. False if all of them still run.
    fn drop_finished(&mut self, now: Time, share: Share) -> bool {
        let Some(slots) = self.by_origin.get_mut(&share) else {
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

/// The encoded size of what a message carried, as held against a sender of unsolicited
/// ones (worked out only for those).
pub(super) fn wire_len<T: serde::Serialize>(value: &T) -> u64 {
    postcard::experimental::serialized_size(value).map_or(0, |n| n as u64)
}
