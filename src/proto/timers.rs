//! Timers as enum values with tokens: setting a timer again makes its earlier deadline
//! stale, and stale deadlines are skipped when they come up.

use super::time::Time;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Everything the core can wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timer {
    /// This node, as a root, increments its serial.
    SerialTick,
    /// Flush batched adverts and requests.
    AdvertFlush,
    /// Start a round of RTT probes of the watched peers.
    ProbeRound,
    /// Send the next probe of the round (probes are paced, not sent in one burst).
    ProbeNext,
    /// Replace one explorer by a random member.
    ExploreRotate,
    /// Expire stale state; detect trees whose serial stopped arriving.
    Housekeeping,
}

/// A queue of timers; at most one live deadline per [`Timer`] value.
#[derive(Debug, Default)]
pub struct TimerQueue {
    heap: BinaryHeap<Reverse<(Time, u64, Timer)>>,
    live: HashMap<Timer, u64>,
    next_token: u64,
}

impl TimerQueue {
    /// Arms `timer` at `at`, replacing any earlier deadline of the same timer.
    pub fn set(&mut self, timer: Timer, at: Time) {
        self.next_token += 1;
        self.live.insert(timer, self.next_token);
        self.heap.push(Reverse((at, self.next_token, timer)));
    }

    /// Arms `timer` at `at` unless it is already armed (earlier or later).
    pub fn set_if_idle(&mut self, timer: Timer, at: Time) {
        if !self.live.contains_key(&timer) {
            self.set(timer, at);
        }
    }

    /// Whether `timer` is armed.
    pub fn is_armed(&self, timer: Timer) -> bool {
        self.live.contains_key(&timer)
    }

    /// Removes and returns the next live timer due at or before `now`.
    pub fn pop_due(&mut self, now: Time) -> Option<Timer> {
        while let Some(Reverse((at, token, timer))) = self.heap.peek().copied() {
            if self.live.get(&timer) != Some(&token) {
                self.heap.pop(); // stale
                continue;
            }
            if at > now {
                return None;
            }
            self.heap.pop();
            self.live.remove(&timer);
            return Some(timer);
        }
        None
    }

    /// The earliest live deadline. (A scan: the queue holds a handful of timers.)
    pub fn next_deadline(&self) -> Option<Time> {
        self.heap
            .iter()
            .filter(|Reverse((_, token, timer))| self.live.get(timer) == Some(token))
            .map(|Reverse((at, _, _))| *at)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rearming_makes_the_old_deadline_stale() {
        let mut q = TimerQueue::default();
        q.set(Timer::ProbeRound, Time(10));
        q.set(Timer::ProbeRound, Time(30));
        q.set(Timer::AdvertFlush, Time(20));
        assert_eq!(q.next_deadline(), Some(Time(20)));
        assert_eq!(q.pop_due(Time(15)), None, "the stale 10 is skipped");
        assert_eq!(q.pop_due(Time(25)), Some(Timer::AdvertFlush));
        assert_eq!(q.pop_due(Time(25)), None);
        q.set_if_idle(Timer::ProbeRound, Time(5));
        assert_eq!(q.pop_due(Time(30)), Some(Timer::ProbeRound));
        assert_eq!(q.next_deadline(), None);
    }
}
