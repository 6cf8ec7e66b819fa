//! RTT estimation: a min filter over a window of recent samples.
//!
//! Queueing only ever adds delay, so the minimum of recent samples is a robust estimate of
//! the path's propagation delay; the window lets it follow real route changes.

use std::collections::VecDeque;

/// Filtered RTT estimate to one peer, in microseconds.
#[derive(Clone, Debug, Default)]
pub struct RttEstimator {
    samples: VecDeque<u32>,
    hint_us: Option<u32>,
    /// The minimum of `samples` (kept up to date by `push`; read on every tree judgement).
    min_us: Option<u32>,
}

impl RttEstimator {
    /// Records one measured sample; keeps the last `window` samples.
    pub fn push(&mut self, rtt_us: u32, window: usize) {
        let rtt_us = rtt_us.max(1);
        let dropped = if self.samples.len() >= window.max(1) {
            self.samples.pop_front()
        } else {
            None
        };
        self.samples.push_back(rtt_us);
        self.min_us = match (self.min_us, dropped) {
            (Some(m), Some(d)) if d == m && rtt_us > m => self.samples.iter().copied().min(),
            (Some(m), _) => Some(m.min(rtt_us)),
            (None, _) => Some(rtt_us),
        };
    }

    /// Records a sample taken while the path may be queued behind this node's own bulk
    /// transfer: it enters the window only if it lowers the estimate (or is the first), so
    /// a long transfer cannot push the unloaded samples out and raise the estimate.
    pub fn push_loaded(&mut self, rtt_us: u32, window: usize) {
        if self.min_us.is_none_or(|m| rtt_us.max(1) <= m) {
            self.push(rtt_us, window);
        }
    }

    /// Records the peer's own estimate of the (symmetric) RTT, used until we measure.
    pub fn set_hint(&mut self, rtt_us: u32) {
        self.hint_us = Some(rtt_us.max(1));
    }

    /// How many of our own samples are in the window.
    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    /// Whether any sample of our own was taken.
    pub fn measured(&self) -> bool {
        !self.samples.is_empty()
    }

    /// The current estimate: min of the window, else the peer's hint.
    pub fn rtt_us(&self) -> Option<u32> {
        self.min_us.or(self.hint_us)
    }

    /// One-way latency estimate (RTT / 2), at least 1 µs so every tree hop has positive
    /// length (the loop-freedom argument needs that).
    pub fn lat_us(&self) -> Option<u32> {
        self.rtt_us().map(|r| (r / 2).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_filter_ignores_queueing_spikes_and_follows_the_window() {
        let mut e = RttEstimator::default();
        assert_eq!(e.lat_us(), None);
        e.set_hint(900);
        assert_eq!(e.rtt_us(), Some(900));
        for s in [1000, 5000, 1200, 1000] {
            e.push(s, 3);
        }
        assert!(e.measured());
        assert_eq!(e.rtt_us(), Some(1000));
        e.push(3000, 3);
        e.push(3000, 3);
        e.push(3000, 3);
        assert_eq!(e.rtt_us(), Some(3000), "old samples leave the window");
        assert_eq!(e.lat_us(), Some(1500));
        e.push(0, 3);
        assert_eq!(e.lat_us(), Some(1), "latency is never zero");
    }

    #[test]
    fn samples_taken_under_load_lower_the_estimate_but_never_raise_it() {
        let mut loaded = RttEstimator::default();
        let mut unflagged = RttEstimator::default();
        for e in [&mut loaded, &mut unflagged] {
            for _ in 0..8 {
                e.push(10_000, 8);
            }
        }
        // A long transfer: every sample sees its queue (50 ms on top of the path).
        for _ in 0..100 {
            loaded.push_loaded(60_000, 8);
            unflagged.push(60_000, 8);
        }
        assert_eq!(loaded.rtt_us(), Some(10_000), "the path, not the queue");
        assert_eq!(unflagged.rtt_us(), Some(60_000), "what the flag prevents");
        loaded.push_loaded(9_000, 8);
        assert_eq!(
            loaded.rtt_us(),
            Some(9_000),
            "a lower sample is a better path"
        );
        let mut fresh = RttEstimator::default();
        fresh.push_loaded(60_000, 8);
        assert_eq!(fresh.rtt_us(), Some(60_000), "a first sample beats none");
    }
}
