//! One emulated bandwidth pipe (a NIC or a shared link) in the socket's real time.
//!
//! The arithmetic is the simulator's ([`crate::topology::timeline`]): a FIFO pipe of fixed
//! rate with a tail-drop buffer, answered at once when a datagram leaves, so the socket's
//! single delay queue releases it then (one number per pipe, no task per packet). Here it
//! only turns the socket's `Instant`s into durations since the pipe was made, and back.

pub use crate::topology::timeline::{BUFFER_TIME, MIN_BUFFER, buffer_bytes};

use crate::topology::timeline::Timeline;
use tokio::time::Instant;

/// A FIFO pipe of fixed rate with a tail-drop buffer, on the socket's clock.
#[derive(Clone, Debug)]
pub struct Pipe {
    line: Timeline,
    /// The instant the pipe's durations count from.
    epoch: Instant,
}

impl Pipe {
    /// A pipe of `mbit` Mbit/s holding up to `buffer` waiting bytes; `None` unless the rate
    /// is a finite number above zero (see [`Timeline::new`]).
    pub fn new(mbit: f64, buffer: usize) -> Option<Pipe> {
        Timeline::new(mbit, buffer).map(Pipe::on_clock)
    }

    /// A pipe of `mbit` Mbit/s with the default buffer ([`buffer_bytes`]).
    pub fn with_rate(mbit: f64) -> Option<Pipe> {
        Timeline::with_rate(mbit).map(Pipe::on_clock)
    }

    fn on_clock(line: Timeline) -> Pipe {
        Pipe {
            line,
            epoch: Instant::now(),
        }
    }

    /// A datagram of `len` bytes arrives at `at`: returns when its last bit leaves the pipe,
    /// or `None` if the buffer cannot take it (see [`Timeline::send`]). An instant before
    /// the pipe was made counts as the moment it was made.
    pub fn send(&mut self, at: Instant, len: usize) -> Option<Instant> {
        let since = at.saturating_duration_since(self.epoch);
        let done = self.line.send(since, len)?;
        self.epoch.checked_add(done)
    }

    /// Datagrams dropped so far because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.line.dropped()
    }

    /// The buffer size in bytes.
    pub fn buffer(&self) -> usize {
        self.line.buffer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    #[test]
    fn a_busy_pipe_moves_bytes_at_its_rate() {
        // 10 Mbit/s, a buffer large enough for everything: 1 MB takes 0.8 s.
        let mut pipe = Pipe::new(10.0, 10 << 20).unwrap();
        let t0 = Instant::now();
        let mut last = t0;
        for _ in 0..1000 {
            last = pipe.send(t0, 1000).unwrap();
        }
        assert!((secs(last - t0) - 0.8).abs() < 1e-6, "{:?}", last - t0);
        assert_eq!(pipe.dropped(), 0);
    }

    /// Whether `d` is `want` to within a microsecond (float rounding of the rate).
    fn near(d: Duration, want: Duration) -> bool {
        (secs(d) - secs(want)).abs() < 1e-6
    }

    #[test]
    fn an_idle_pipe_costs_only_the_serialization_time() {
        let mut pipe = Pipe::with_rate(8.0).unwrap(); // 1 byte per µs
        let t0 = Instant::now();
        let a = pipe.send(t0, 1000).unwrap();
        assert!(near(a - t0, Duration::from_millis(1)), "{:?}", a - t0);
        // Arriving after the pipe went idle: no queueing.
        let t1 = t0 + Duration::from_secs(1);
        let b = pipe.send(t1, 500).unwrap();
        assert!(near(b - t1, Duration::from_micros(500)), "{:?}", b - t1);
        // Arriving while busy: waits for the one ahead.
        let t2 = t1 + Duration::from_micros(100);
        let c = pipe.send(t2, 500).unwrap();
        assert!(near(c - t1, Duration::from_micros(1000)), "{:?}", c - t1);
    }

    #[test]
    fn a_full_buffer_drops_the_tail_and_drains_at_the_rate() {
        // 8 Mbit/s (1 byte/µs) with 10.5 kB of buffer, which counts the datagram being sent:
        // of a burst of 100 datagrams of 1 kB at one instant, ten fit.
        let mut pipe = Pipe::new(8.0, 10_500).unwrap();
        let t0 = Instant::now();
        let accepted = (0..100).filter(|_| pipe.send(t0, 1000).is_some()).count();
        assert_eq!((accepted, pipe.dropped()), (10, 90));
        // 5 ms later five have left: room for five more, not six.
        let t1 = t0 + Duration::from_millis(5);
        let more = (0..6).filter(|_| pipe.send(t1, 1000).is_some()).count();
        assert_eq!((more, pipe.dropped()), (5, 91));
    }

    #[test]
    fn bad_rates_make_no_pipe_and_buffers_have_a_floor() {
        for mbit in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Pipe::new(mbit, 1000).is_none(), "{mbit}");
        }
        assert_eq!(buffer_bytes(1.0), MIN_BUFFER);
        // 400 Mbit/s for 50 ms: 2.5 MB.
        assert_eq!(buffer_bytes(400.0), 2_500_000);
        let mut pipe = Pipe::new(1.0, 10).unwrap();
        // Larger than the buffer, but the pipe is idle: taken.
        assert!(pipe.send(Instant::now(), 1500).is_some());
    }
}
