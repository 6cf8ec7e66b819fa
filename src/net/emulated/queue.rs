//! The bounded delay queue of one socket: datagrams held until due, in order per
//! destination, after passing the sender's NIC and the link.

use super::pipe::Pipe;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Bounds of a socket's delay queue; a datagram that would exceed either is dropped and
/// counted, as a router with a full buffer would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Most datagrams held at once.
    pub datagrams: usize,
    /// Most payload bytes held at once.
    pub bytes: usize,
}

impl Default for QueueLimits {
    /// 64 Ki datagrams and 64 MiB: more than a few seconds of a busy QUIC connection at
    /// 100 ms latency, small enough that a runaway sender cannot exhaust memory.
    fn default() -> Self {
        QueueLimits {
            datagrams: 64 * 1024,
            bytes: 64 * 1024 * 1024,
        }
    }
}

/// A datagram waiting in a delay queue.
#[derive(Debug)]
pub(super) struct Datagram {
    pub(super) due: Instant,
    /// Insertion order: breaks ties between equal due times so they leave FIFO.
    seq: u64,
    pub(super) dest: SocketAddr,
    pub(super) bytes: Box<[u8]>,
}

// Reversed on (due, seq) so that `BinaryHeap`, a max-heap, pops the earliest datagram.
impl Ord for Datagram {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .due
            .cmp(&self.due)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Datagram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Datagram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Datagram {}

/// Destinations remembered for ordering before the table is pruned of past due times.
const LAST_DUE_PRUNE: usize = 1024;

/// The bounded delay queue of one socket: a min-heap on (due time, insertion order).
#[derive(Debug)]
pub(super) struct DelayQueue {
    heap: BinaryHeap<Datagram>,
    pub(super) bytes: usize,
    next_seq: u64,
    /// Latest due time per destination: a datagram never becomes due before an earlier one
    /// to the same destination, even if that destination's latency changed in between.
    last_due: HashMap<SocketAddr, Instant>,
    prune_at: usize,
    limits: QueueLimits,
    /// Datagrams dropped: this queue full, or (bandwidth emulation) a full NIC or link.
    pub(super) dropped: u64,
    /// The sender's NIC, when bandwidth is emulated; under the queue's lock because every
    /// datagram passes both.
    pub(super) nic: Option<Pipe>,
}

impl DelayQueue {
    pub(super) fn new(limits: QueueLimits) -> Self {
        DelayQueue {
            heap: BinaryHeap::new(),
            bytes: 0,
            next_seq: 0,
            last_due: HashMap::new(),
            prune_at: LAST_DUE_PRUNE,
            limits,
            dropped: 0,
            nic: None,
        }
    }

    /// Passes a datagram of `len` bytes, handed over at `now`, through the sender's NIC and
    /// then `link`: when it has left the last pipe, or `None` if a pipe dropped it (counted).
    pub(super) fn serialize(
        &mut self,
        now: Instant,
        len: usize,
        link: Option<&Mutex<Pipe>>,
    ) -> Option<Instant> {
        let mut at = now;
        if let Some(nic) = &mut self.nic {
            at = nic.send(at, len).or_else(|| {
                self.dropped += 1;
                None
            })?;
        }
        if let Some(link) = link {
            // Same reasoning as `LatencyMap::read`: a pipe is consistent after every call.
            let mut link = link.lock().unwrap_or_else(PoisonError::into_inner);
            at = link.send(at, len).or_else(|| {
                self.dropped += 1;
                None
            })?;
        }
        Some(at)
    }

    /// Queues `bytes` for `dest`, due `delay` after `now`; returns the due time, or `None`
    /// if the datagram was dropped because the queue is full.
    pub(super) fn push(
        &mut self,
        now: Instant,
        delay: Duration,
        dest: SocketAddr,
        bytes: &[u8],
    ) -> Option<Instant> {
        let full = self.heap.len() >= self.limits.datagrams
            || self.bytes.saturating_add(bytes.len()) > self.limits.bytes;
        // An unrepresentable due time (absurd latency) is treated like a full queue: the
        // datagram would never arrive anyway.
        let (false, Some(mut due)) = (full, now.checked_add(delay)) else {
            self.dropped += 1;
            return None;
        };
        let last = self.last_due.entry(dest).or_insert(due);
        if *last > due {
            due = *last;
        } else {
            *last = due;
        }
        if self.last_due.len() > self.prune_at {
            // Entries already due cannot delay anything queued from now on.
            self.last_due.retain(|_, d| *d > now);
            self.prune_at = (2 * self.last_due.len()).max(LAST_DUE_PRUNE);
        }
        self.heap.push(Datagram {
            due,
            seq: self.next_seq,
            dest,
            bytes: bytes.into(),
        });
        self.next_seq += 1;
        self.bytes += bytes.len();
        Some(due)
    }

    /// Removes and returns the earliest datagram if it is due at `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Datagram> {
        if self.heap.peek()?.due > now {
            return None;
        }
        let d = self.heap.pop()?;
        self.bytes -= d.bytes.len();
        Some(d)
    }

    /// Due time of the earliest datagram.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|d| d.due)
    }

    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }
}
