//! Timers as enum values with tokens: setting a timer again makes its earlier deadline
//! stale, and stale deadlines are skipped when they come up.

use super::time::Time;

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

/// How many [`Timer`] values there are.
const TIMERS: usize = 6;

impl Timer {
    fn slot(self) -> usize {
        match self {
            Timer::SerialTick => 0,
            Timer::AdvertFlush => 1,
            Timer::ProbeRound => 2,
            Timer::ProbeNext => 3,
            Timer::ExploreRotate => 4,
            Timer::Housekeeping => 5,
        }
    }

    const ALL: [Timer; TIMERS] = [
        Timer::SerialTick,
        Timer::AdvertFlush,
        Timer::ProbeRound,
        Timer::ProbeNext,
        Timer::ExploreRotate,
        Timer::Housekeeping,
    ];
}

/// A queue of timers; at most one live deadline per [`Timer`] value.
///
/// One slot per timer holds its live `(deadline, token)`; due timers come out in
/// `(deadline, token)` order, so two timers due at the same instant fire in the order they
/// were armed.
#[derive(Debug, Default)]
pub struct TimerQueue {
    live: [Option<(Time, u64)>; TIMERS],
    next_token: u64,
}

impl TimerQueue {
    /// Arms `timer` at `at`, replacing any earlier deadline of the same timer.
    pub fn set(&mut self, timer: Timer, at: Time) {
        self.next_token += 1;
        self.live[timer.slot()] = Some((at, self.next_token));
    }

    /// Arms `timer` at `at` unless it is already armed (earlier or later).
    pub fn set_if_idle(&mut self, timer: Timer, at: Time) {
        if !self.is_armed(timer) {
            self.set(timer, at);
        }
    }

    /// Whether `timer` is armed.
    pub fn is_armed(&self, timer: Timer) -> bool {
        self.live[timer.slot()].is_some()
    }

    /// When `timer` is due, if it is armed.
    pub fn deadline(&self, timer: Timer) -> Option<Time> {
        self.live[timer.slot()].map(|(at, _)| at)
    }

    /// The armed timer with the smallest `(deadline, token)`.
    fn first(&self) -> Option<(Time, u64, Timer)> {
        Timer::ALL
            .iter()
            .filter_map(|&t| self.live[t.slot()].map(|(at, token)| (at, token, t)))
            .min_by_key(|&(at, token, _)| (at, token))
    }

    /// Removes and returns the next live timer due at or before `now`.
    pub fn pop_due(&mut self, now: Time) -> Option<Timer> {
        let (at, _, timer) = self.first()?;
        if at > now {
            return None;
        }
        self.live[timer.slot()] = None;
        Some(timer)
    }

    /// The earliest live deadline.
    pub fn next_deadline(&self) -> Option<Time> {
        self.first().map(|(at, _, _)| at)
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
