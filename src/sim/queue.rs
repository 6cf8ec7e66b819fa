//! The event queue: a min-heap on (time, insertion order), so equal times pop in FIFO order.

use crate::proto::{DownReason, Message, Time};
use std::cmp::Ordering;
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

struct Entry {
    at: Time,
    seq: u64,
    what: Pending,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Time-ordered queue of pending happenings; ties break by insertion order.
#[derive(Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Entry>,
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
        self.heap.push(Entry {
            at,
            seq: self.seq,
            what,
        });
    }

    /// Time of the earliest entry.
    pub(crate) fn peek_time(&self) -> Option<Time> {
        self.heap.peek().map(|e| e.at)
    }

    /// Removes and returns the earliest entry.
    pub(crate) fn pop(&mut self) -> Option<(Time, Pending)> {
        let e = self.heap.pop()?;
        if e.what.is_external() {
            self.external -= 1;
        }
        Some((e.at, e.what))
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
