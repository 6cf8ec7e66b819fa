//! RTT estimation: a min filter over a window of recent samples.
//!
//! Queueing only ever adds delay, so the minimum of recent samples is a robust estimate of
//! the path's propagation delay; the window lets it follow real route changes.
//!
//! With [`RttEstimator::set_hold`] (`Config::rtt_hold`, off by default), the estimate the
//! protocol sees follows the minimum down at once, but up only once the minimum has risen
//! past a band above it (a fiftieth plus 20 µs, [`band_us`]). A min
//! filter creeps up by a few microseconds each time its oldest minimum leaves the window;
//! passed on, that creep changed a node's distance in every tree through the peer, and
//! each change went out in adverts and pushes (most of what a settled node sent). A lower
//! sample is a better view of the path and is taken whatever its size: a first sample
//! inflated by load must not stay. Every node still advertises exactly the distances it
//! uses, so near ties are broken the same way by everyone.
//!
//! The estimator also counts how long its estimate has held still
//! ([`RttEstimator::steady`]): such a peer is probed less often (`Config::probe_backoff`).

use std::collections::VecDeque;

/// Filtered RTT estimate to one peer, in microseconds.
#[derive(Clone, Debug, Default)]
pub struct RttEstimator {
    samples: VecDeque<u32>,
    hint_us: Option<u32>,
    /// The minimum of `samples` (kept up to date by `push`).
    min_us: Option<u32>,
    /// The estimate the protocol sees: `min_us` when it last left the band around it.
    shown_us: Option<u32>,
    /// Samples pushed since `shown_us` last changed.
    steady: u32,
    /// Whether `shown_us` holds still while the minimum creeps up inside its band.
    hold: bool,
}

/// How far the minimum may rise above the estimate shown before the estimate follows: a
/// fiftieth plus 20 µs.
pub fn band_us(estimate_us: u32) -> u32 {
    estimate_us / 50 + 20
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
        let min = self.min_us.unwrap_or(rtt_us);
        match self.shown_us {
            Some(s) if min == s || (self.hold && min > s && min - s <= band_us(s)) => {
                self.steady = self.steady.saturating_add(1)
            }
            _ => {
                self.shown_us = Some(min);
                self.steady = 0;
            }
        }
    }

    /// Whether the estimate holds still while the minimum creeps up inside its band
    /// ([`band_us`]); without, it is the minimum itself.
    pub fn set_hold(&mut self, hold: bool) {
        self.hold = hold;
    }

    /// Samples pushed since the estimate last moved: a peer whose estimate holds still
    /// needs fewer probes. Samples above the estimate count: queueing does not move a min
    /// filter.
    pub fn steady(&self) -> u32 {
        self.steady
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

    /// The current estimate: min of the window as last shown (see [`band_us`]), else the
    /// peer's hint.
    pub fn rtt_us(&self) -> Option<u32> {
        self.shown_us.or(self.hint_us)
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

    #[test]
    fn the_estimate_follows_the_minimum_down_at_once_and_up_only_past_its_band() {
        let mut e = RttEstimator::default();
        e.set_hold(true);
        for s in [10_000, 10_150, 30_000] {
            e.push(s, 64);
        }
        assert_eq!(e.steady(), 2, "queueing spikes leave it still");
        e.push(9_900, 64);
        assert_eq!(e.rtt_us(), Some(9_900), "any lower sample is taken");
        assert_eq!(e.steady(), 0);
        e.push(9_900, 64);
        assert_eq!(e.steady(), 1);
        // The minimum creeping up as old samples leave the window: held inside the band.
        let mut c = RttEstimator::default();
        let mut exact = RttEstimator::default();
        c.set_hold(true);
        for s in [10_000, 10_100, 10_200] {
            c.push(s, 1);
            exact.push(s, 1);
        }
        assert_eq!(
            exact.rtt_us(),
            Some(10_200),
            "without hold, the minimum itself"
        );
        assert_eq!(exact.steady(), 0);
        assert_eq!(
            c.rtt_us(),
            Some(10_000),
            "200 µs is inside 10 ms's band (220 µs)"
        );
        c.push(10_300, 1);
        assert_eq!(c.rtt_us(), Some(10_300), "300 µs is a change");
        // The window moving on to higher samples is a change too.
        let mut w = RttEstimator::default();
        for _ in 0..4 {
            w.push(1_000, 4);
        }
        for _ in 0..4 {
            w.push(2_000, 4);
        }
        assert_eq!(w.rtt_us(), Some(2_000));
        assert_eq!(w.steady(), 0);
        // Inside a cluster the band is mostly the 20 µs.
        let mut lan = RttEstimator::default();
        lan.set_hold(true);
        for s in [100, 115, 120] {
            lan.push(s, 1);
        }
        assert_eq!(lan.rtt_us(), Some(100));
        lan.push(125, 1);
        assert_eq!(lan.rtt_us(), Some(125));
    }
}
