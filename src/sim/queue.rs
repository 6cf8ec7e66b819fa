//! The event queue: a min-heap on (time, insertion order), so equal times pop in FIFO order.

use crate::proto::{DownReason, Message, Time};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::scenario::Action;

/// Something that happens at a point of virtual time.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A message arrives at `to`.
    Deliver {
        from: usize,
        to: usize,
        msg: Message,
    },
    /// The deadline `deadline` of node `node` may be due (stale if re-armed since).
    Timer { node: usize, deadline: Time },
    /// Node `to` learns that `subject` joined (`down: None`) or went away.
    Member {
        to: usize,
        subject: usize,
        down: Option<DownReason>,
    },
    /// A scheduled scenario action.
    Action(Action),
}

impl Pending {
    /// Whether this comes from outside the cores (scenario or membership service).
    pub(crate) fn is_external(&self) -> bool {
        matches!(self, Pending::Member { .. } | Pending::Action(_))
    }
}

/// Heap key: (time µs, insertion order, slot of the payload). Small, so heap moves are cheap;
/// the payloads stay put in a slab.
type Key = Reverse<(u64, u64, u32)>;

/// Time-ordered queue of pending happenings; ties break by insertion order.
#[derive(Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Key>,
    slots: Vec<Option<Pending>>,
    free: Vec<u32>,
    seq: u64,
    external: usize,
}

impl EventQueue {
    /// Adds `what` at `at`.
    pub(crate) fn push(&mut self, at: Time, what: Pending) {
        if what.is_external() {
            self.external += 1;
        }
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(what);
                i
            }
            None => {
                self.slots.push(Some(what));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 pending events")
            }
        };
        self.heap.push(Reverse((at.as_micros(), self.seq, slot)));
    }

    /// Time of the earliest entry.
    pub(crate) fn peek_time(&self) -> Option<Time> {
        self.heap
            .peek()
            .map(|Reverse((t, _, _))| Time::from_micros(*t))
    }

    /// Removes and returns the earliest entry.
    pub(crate) fn pop(&mut self) -> Option<(Time, Pending)> {
        let Reverse((t, _, slot)) = self.heap.pop()?;
        let what = self.slots[slot as usize]
            .take()
            .expect("a queued slot holds its payload");
        self.free.push(slot);
        if what.is_external() {
            self.external -= 1;
        }
        Some((Time::from_micros(t), what))
    }

    /// How many scenario actions and membership notices are still queued.
    pub(crate) fn external(&self) -> usize {
        self.external
    }

    /// Number of queued entries (stale timer entries included).
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}
