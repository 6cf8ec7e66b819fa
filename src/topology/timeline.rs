//! What one bandwidth pipe of a topology (a node's NIC, or the shared directed link between
//! two clusters) does to a datagram, as pure arithmetic on time.
//!
//! A pipe serializes datagrams first come, first served at a fixed rate, and holds the ones
//! waiting in a finite buffer; a datagram that does not fit is dropped (tail drop), as a
//! router with a full buffer would. A FIFO pipe of fixed rate is fully described by the
//! time its last accepted datagram finishes, so [`Timeline::send`] answers at once when a
//! datagram leaves: no queue, no timer, no clock. Time is a [`Duration`] since any epoch
//! the caller picks (the simulator's virtual zero, or an `Instant` taken once), so the same
//! numbers serve virtual and real time.

use std::time::Duration;

/// How much a pipe's buffer holds, in time at its own rate.
///
/// 50 ms, about one round trip of a continental path: the usual rule of thumb sizes a
/// router buffer to one bandwidth-delay product, which keeps a loss-based sender's link
/// busy while it backs off.
pub const BUFFER_TIME: Duration = Duration::from_millis(50);

/// The smallest buffer of any pipe: on a slow link 50 ms is only a few datagrams, too few
/// for a sender's slow-start burst to get going at all.
pub const MIN_BUFFER: usize = 64 * 1024;

/// The buffer of a pipe of `mbit` Mbit/s: [`BUFFER_TIME`] at that rate, at least
/// [`MIN_BUFFER`] bytes.
pub fn buffer_bytes(mbit: f64) -> usize {
    let bytes = mbit * 1e6 / 8.0 * BUFFER_TIME.as_secs_f64();
    // `as` saturates, so an absurd rate gives a huge buffer rather than a wrapped one.
    (bytes as usize).max(MIN_BUFFER)
}

/// A FIFO pipe of fixed rate with a tail-drop buffer.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// Serialization time of one byte, in seconds.
    secs_per_byte: f64,
    /// Most bytes that may wait to be serialized; an arrival that would exceed it is dropped.
    buffer: usize,
    /// When the last bit of the last accepted datagram leaves.
    busy_until: Option<Duration>,
    /// Datagrams dropped so far.
    dropped: u64,
}

impl Timeline {
    /// A pipe of `mbit` Mbit/s holding up to `buffer` waiting bytes; `None` unless the rate
    /// is a finite number above zero (the topology loader checks that, but a pipe must not
    /// divide by zero whatever it is given).
    pub fn new(mbit: f64, buffer: usize) -> Option<Timeline> {
        (mbit.is_finite() && mbit > 0.0).then(|| Timeline {
            secs_per_byte: 8.0 / (mbit * 1e6),
            buffer,
            busy_until: None,
            dropped: 0,
        })
    }

    /// A pipe of `mbit` Mbit/s with the default buffer ([`buffer_bytes`]).
    pub fn with_rate(mbit: f64) -> Option<Timeline> {
        Timeline::new(mbit, buffer_bytes(mbit))
    }

    /// A datagram of `len` bytes arrives at `at`: returns when its last bit leaves the pipe,
    /// or `None` if the buffer cannot take it (the datagram is dropped and counted).
    ///
    /// Arrivals must come in time order for the answer to be exact; an arrival earlier than
    /// an accepted one is served after it (first come, first served in call order).
    pub fn send(&mut self, at: Duration, len: usize) -> Option<Duration> {
        let start = match self.busy_until {
            Some(busy) if busy > at => busy,
            _ => at,
        };
        // Bytes still to be serialized when this datagram arrives.
        let waiting = (start - at).as_secs_f64() / self.secs_per_byte;
        // An idle pipe takes any datagram, so one larger than the buffer is not lost forever.
        if waiting > 0.0 && waiting + len as f64 > self.buffer as f64 {
            self.dropped += 1;
            return None;
        }
        let done = start.checked_add(Duration::from_secs_f64(len as f64 * self.secs_per_byte))?;
        self.busy_until = Some(done);
        Some(done)
    }

    /// Datagrams dropped so far because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The buffer size in bytes.
    pub fn buffer(&self) -> usize {
        self.buffer
    }

    /// When the last accepted datagram's last bit leaves (`None` before the first).
    pub fn busy_until(&self) -> Option<Duration> {
        self.busy_until
    }
}

#[cfg(test)]
mod tests {
    use super::{MIN_BUFFER, Timeline, buffer_bytes};
    use std::time::Duration;

    /// Whether `d` is `want` to within a microsecond (float rounding of the rate).
    fn near(d: Duration, want: Duration) -> bool {
        (d.as_secs_f64() - want.as_secs_f64()).abs() < 1e-6
    }

    #[test]
    fn a_busy_pipe_moves_bytes_at_its_rate() {
        // 10 Mbit/s, a buffer large enough for everything: 1 MB takes 0.8 s.
        let mut pipe = Timeline::new(10.0, 10 << 20).unwrap();
        let t0 = Duration::from_secs(3);
        let mut last = t0;
        for _ in 0..1000 {
            last = pipe.send(t0, 1000).unwrap();
        }
        assert!(
            near(last - t0, Duration::from_millis(800)),
            "{:?}",
            last - t0
        );
        assert_eq!(pipe.dropped(), 0);
    }

    #[test]
    fn an_idle_pipe_costs_only_the_serialization_time() {
        let mut pipe = Timeline::with_rate(8.0).unwrap(); // 1 byte per µs
        let t0 = Duration::ZERO;
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
        assert_eq!(pipe.busy_until(), Some(c));
    }

    #[test]
    fn a_full_buffer_drops_the_tail_and_drains_at_the_rate() {
        // 8 Mbit/s (1 byte/µs) with 10.5 kB of buffer, which counts the datagram being sent:
        // of a burst of 100 datagrams of 1 kB at one instant, ten fit.
        let mut pipe = Timeline::new(8.0, 10_500).unwrap();
        let t0 = Duration::ZERO;
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
            assert!(Timeline::new(mbit, 1000).is_none(), "{mbit}");
        }
        assert_eq!(buffer_bytes(1.0), MIN_BUFFER);
        // 400 Mbit/s for 50 ms: 2.5 MB.
        assert_eq!(buffer_bytes(400.0), 2_500_000);
        let mut pipe = Timeline::new(1.0, 10).unwrap();
        assert_eq!(pipe.buffer(), 10);
        // Larger than the buffer, but the pipe is idle: taken.
        assert!(pipe.send(Duration::ZERO, 1500).is_some());
    }
}
