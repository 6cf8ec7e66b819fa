//! The event queue: ordered by (time, insertion order), so equal times pop in FIFO order.

use crate::proto::{DownReason, Packet, Time};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::scenario::Action;

/// Something that happens at a point of virtual time.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A packet (tree or membership message) arrives at `to`.
    Deliver {
        from: usize,
        to: usize,
        packet: Packet,
    },
    /// A message `len` bytes long, out of its sender's NIC, reaches the shared link between
    /// the two nodes' clusters at `at` (to the nanosecond; the entry is queued at the next
    /// µs, so the link sees its arrivals in time order).
    Link {
        from: usize,
        to: usize,
        packet: Packet,
        len: usize,
        at: std::time::Duration,
    },
    /// Datagram `seq` of the packet train in slot `train`, out of its sender's NIC,
    /// reaches the shared link between the two clusters at `at` (as [`Pending::Link`]).
    TrainLink {
        train: usize,
        seq: u16,
        at: std::time::Duration,
    },
    /// The asker of the packet train in slot `train` is told what arrived.
    TrainArrived { train: usize },
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
    /// Node `node` is told a message to `peer` was lost.
    Lost { node: usize, peer: usize },
    /// Node `node`'s join has had its time: if no member admitted it yet, it tries another
    /// (nodes with their own membership).
    JoinCheck { node: usize },
}

impl Pending {
    /// Whether this comes from outside the cores (scenario or membership service).
    pub(crate) fn is_external(&self) -> bool {
        // A join check is not: it does nothing once the node is admitted, and until then
        // the node's absence from the trees keeps the run from converging anyway.
        matches!(self, Pending::Member { .. } | Pending::Action(_))
    }
}

/// Time-ordered queue of pending happenings; ties break by insertion order.
///
/// A radix heap on the time (µs): nothing is ever scheduled before the time of the last
/// entry taken out (the simulator only schedules at or after its clock), which lets entries
/// sit in 65 buckets by the highest bit in which their time differs from that time, and be
/// moved down a bucket at a time, instead of a binary heap's ~log2(n) scattered moves per
/// entry. Each bucket keeps its entries in insertion order, so equal times pop FIFO. An entry
/// scheduled before that time anyway (a peek moves it ahead of the simulator's clock) goes to
/// a small binary heap that pops first.
pub(crate) struct EventQueue {
    /// Time of the entries of `buckets[0]` (at or below every other bucket's entries).
    last: u64,
    /// Payload slots of the entries at exactly `last`, in insertion order.
    at_last: VecDeque<u32>,
    /// `buckets[b - 1]`: (time, slot) of entries whose time differs from `last` first in bit
    /// `b - 1` (counting from the least significant), in insertion order.
    buckets: [Vec<(u64, u32)>; 64],
    /// Entries scheduled before `last`: (time, insertion order, slot).
    early: BinaryHeap<Reverse<(u64, u64, u32)>>,
    slots: Vec<Option<Pending>>,
    free: Vec<u32>,
    seq: u64,
    len: usize,
    external: usize,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            last: 0,
            at_last: VecDeque::new(),
            buckets: std::array::from_fn(|_| Vec::new()),
            early: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            seq: 0,
            len: 0,
            external: 0,
        }
    }
}

impl EventQueue {
    /// Adds `what` at `at`.
    pub(crate) fn push(&mut self, at: Time, what: Pending) {
        if what.is_external() {
            self.external += 1;
        }
        self.seq += 1;
        self.len += 1;
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
        let t = at.as_micros();
        if t < self.last {
            self.early.push(Reverse((t, self.seq, slot)));
        } else {
            self.place(t, slot);
        }
    }

    /// Puts an entry at `t >= self.last` into its bucket.
    fn place(&mut self, t: u64, slot: u32) {
        let diff = t ^ self.last;
        if diff == 0 {
            self.at_last.push_back(slot);
        } else {
            self.buckets[63 - diff.leading_zeros() as usize].push((t, slot));
        }
    }

    /// Makes `at_last` hold the earliest entries of the buckets (if there are any): moves
    /// `last` up to the smallest time of the lowest non-empty bucket and spreads that
    /// bucket over the lower ones (all empty), in order.
    fn settle(&mut self) {
        if !self.at_last.is_empty() {
            return;
        }
        let Some(b) = self.buckets.iter().position(|v| !v.is_empty()) else {
            return;
        };
        let mut moving = std::mem::take(&mut self.buckets[b]);
        self.last = moving.iter().map(|&(t, _)| t).min().expect("non-empty");
        for &(t, slot) in &moving {
            self.place(t, slot);
        }
        moving.clear();
        self.buckets[b] = moving;
    }

    /// Time of the earliest entry.
    pub(crate) fn peek_time(&mut self) -> Option<Time> {
        self.settle();
        let early = self.early.peek().map(|Reverse((t, _, _))| *t);
        let later = (!self.at_last.is_empty()).then_some(self.last);
        early.or(later).map(Time::from_micros)
    }

    /// The earliest entry and its time.
    pub(crate) fn peek(&mut self) -> Option<(Time, &Pending)> {
        self.settle();
        let (t, slot) = match self.early.peek() {
            Some(Reverse((t, _, slot))) => (*t, *slot),
            None => (self.last, *self.at_last.front()?),
        };
        let what = self.slots[slot as usize]
            .as_ref()
            .expect("a queued slot holds its payload");
        Some((Time::from_micros(t), what))
    }

    /// Removes and returns the earliest entry.
    pub(crate) fn pop(&mut self) -> Option<(Time, Pending)> {
        self.settle();
        let (t, slot) = match self.early.pop() {
            Some(Reverse((t, _, slot))) => (t, slot),
            None => (self.last, self.at_last.pop_front()?),
        };
        self.len -= 1;
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
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pops in (time, insertion order), like a binary heap on that pair, whatever the mix of
    /// pushes, peeks and pops (pushes never before the last popped time, as in the simulator,
    /// but possibly before a peeked one).
    #[test]
    fn pops_in_time_then_insertion_order() {
        let mut q = EventQueue::default();
        let mut model: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
        let (mut x, mut seq, mut clock) = (7u64, 0u64, 0u64);
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let r = rand();
            match r % 8 {
                0..=3 => {
                    let at = clock + [0, 1, 3, 250, 70_000, 1 << 40][(r >> 8) as usize % 6];
                    seq += 1;
                    model.push(Reverse((at, seq)));
                    let what = Pending::Timer {
                        node: seq as usize,
                        deadline: Time::from_micros(at),
                    };
                    q.push(Time::from_micros(at), what);
                }
                4 => {
                    let want = model.peek().map(|Reverse((t, _))| Time::from_micros(*t));
                    assert_eq!(q.peek_time(), want);
                }
                _ => {
                    let want = model.pop();
                    let got = q.pop();
                    match (want, got) {
                        (None, None) => {}
                        (Some(Reverse((t, s))), Some((at, Pending::Timer { node, .. }))) => {
                            assert_eq!((at.as_micros(), node as u64), (t, s));
                            clock = t;
                        }
                        (w, g) => panic!("model {w:?}, queue {:?}", g.map(|(t, _)| t)),
                    }
                }
            }
            assert_eq!(q.len(), model.len());
        }
    }
}
