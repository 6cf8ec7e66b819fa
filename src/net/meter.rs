//! How long a send takes to leave this node, measured where datagrams leave: at the socket.
//!
//! The in-cluster plan ([`crate::proto::collective`]) decides how many nodes an entry sends
//! to itself from the cost of one send. A configured cost is right on one machine and wrong
//! on another (or on a loaded one, where a send waits for the CPU as much as it uses it), and
//! too low a cost is the expensive mistake: the entry keeps sending while its first
//! recipients could have helped. So the driver measures it: when it hands a burst of an
//! operation's messages to its connections, [`SendMeter`] logs what the socket sends from
//! then on, and the burst's span (until as many bytes and datagrams as three quarters of the
//! burst hold have left) divided by those sends is one sample for the core
//! ([`crate::proto::Input::SendCost`]).
//!
//! Unrelated traffic leaving meanwhile (acknowledgements, probes) makes a sample read a
//! little low; QUIC's own overhead likewise. What would make one read high is left out: the
//! driver's yield between an operation's wide-area sends and its in-cluster ones (only the
//! sends after it are a burst), messages larger than a datagram (they wait for congestion
//! control, and the plan's sends are small), and a burst whose sends are held up (three
//! quarters of it is enough; the core takes the median of several bursts). The log exists
//! only while a burst is measured, and is bounded.

use crate::proto::NodeId;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use std::collections::HashSet;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Entries the log keeps at most; a burst that needs more is not measured.
const LOG_LIMIT: usize = 4096;

/// Sends left by the socket since the log started: (when, bytes, datagrams) per `try_send`.
#[derive(Default)]
struct Log {
    started: Option<Instant>,
    entries: Vec<(Instant, usize, usize)>,
}

/// The log of datagrams leaving one node's socket while a burst is measured.
#[derive(Default)]
pub struct SendMeter {
    log: Mutex<Log>,
    /// Whether a log runs: every send of the socket looks here first, and takes the lock
    /// only while one does.
    logging: AtomicBool,
}

impl fmt::Debug for SendMeter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendMeter").finish_non_exhaustive()
    }
}

impl SendMeter {
    /// A meter that logs nothing until [`SendMeter::start`].
    pub fn new() -> Arc<SendMeter> {
        Arc::new(SendMeter::default())
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        // A panic while holding the lock leaves only a log behind: keep using it.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts logging at `at` (dropping any earlier log).
    pub fn start(&self, at: Instant) {
        let mut log = self.log();
        log.started = Some(at);
        log.entries.clear();
        self.logging.store(true, Ordering::Release);
    }

    /// Stops logging.
    pub fn stop(&self) {
        Self::end(&mut self.log(), &self.logging);
    }

    fn end(log: &mut Log, logging: &AtomicBool) {
        log.started = None;
        log.entries.clear();
        logging.store(false, Ordering::Release);
    }

    /// Whether a log is running.
    pub fn is_logging(&self) -> bool {
        self.logging.load(Ordering::Acquire)
    }

    /// Records `bytes` in `datagrams` handed to the network now.
    pub fn record(&self, bytes: usize, datagrams: usize) {
        if !self.is_logging() {
            return;
        }
        let mut log = self.log();
        if log.started.is_none() {
            return;
        }
        if log.entries.len() >= LOG_LIMIT {
            return Self::end(&mut log, &self.logging);
        }
        log.entries.push((Instant::now(), bytes, datagrams));
    }

    /// When, since the log started, at least `bytes` in at least `datagrams` had left; then
    /// the log stops. `None` while that has not happened yet (or no log runs).
    pub fn reached(&self, bytes: usize, datagrams: usize) -> Option<Duration> {
        let mut log = self.log();
        let started = log.started?;
        let (mut b, mut d) = (0, 0);
        let at = log.entries.iter().find_map(|&(at, bytes_out, dgrams)| {
            b += bytes_out;
            d += dgrams;
            (b >= bytes && d >= datagrams).then_some(at)
        })?;
        Self::end(&mut log, &self.logging);
        Some(at.saturating_duration_since(started))
    }
}

/// A burst is measured only when it goes to at least this many peers: a shorter one is
/// mostly the start-up of the first send, and the plan's choice hardly depends on it.
const MIN_BURST_PEERS: usize = 4;

/// A burst counts as left once this share of it has: a send now and then waits for its
/// connection (flow or congestion control, a retransmission) for a round trip or more,
/// which is no cost of sending, and would make one sample read a hundred times too high.
const SHARE_MEASURED: (usize, usize) = (3, 4);

/// How often the driver looks whether a measured burst has left, at least (it looks at
/// every input too). The sample does not depend on it: the log has the times.
const CHECK_EVERY: Duration = Duration::from_millis(50);

/// Only messages up to this size (the smallest datagram QUIC sends) are measured: larger
/// ones leave as congestion control allows, which says nothing about a send's cost.
const MAX_MEASURED_MESSAGE: usize = 1200;

/// A burst that has not left after this long is not measured (a stall, or a dead link).
const GIVE_UP: Duration = Duration::from_secs(1);

/// The messages of operations one input made the driver send.
struct Burst {
    started: Instant,
    sends: u32,
    bytes: usize,
    peers: HashSet<NodeId>,
    /// Every message went straight to a connection (none waits for a dial).
    written: bool,
}

/// A burst handed over, waiting to leave the socket.
struct Leaving {
    sends: u32,
    bytes: usize,
    datagrams: usize,
    give_up: Instant,
    next_check: Instant,
}

/// Turns the bursts the driver sends into samples of the cost of one send: one burst is
/// measured at a time; the others are not.
pub struct BurstPace {
    meter: Arc<SendMeter>,
    burst: Option<Burst>,
    leaving: Option<Leaving>,
}

impl BurstPace {
    /// Samples through `meter` (the one on this node's socket).
    pub fn new(meter: Arc<SendMeter>) -> BurstPace {
        BurstPace {
            meter,
            burst: None,
            leaving: None,
        }
    }

    /// A message of an operation is about to be handed over: a burst starts with the first
    /// (the log must run before its datagrams can leave).
    pub fn sending(&mut self) {
        if self.leaving.is_some() || self.burst.is_some() {
            return;
        }
        let now = Instant::now();
        self.meter.start(now);
        self.burst = Some(Burst {
            started: now,
            sends: 0,
            bytes: 0,
            peers: HashSet::new(),
            written: true,
        });
    }

    /// That message, of `bytes`, was handed to `to`'s connection (`written`) or queued
    /// while it is dialed.
    pub fn sent(&mut self, to: NodeId, bytes: usize, written: bool) {
        let Some(burst) = self.burst.as_mut() else {
            return;
        };
        burst.sends += 1;
        burst.bytes += bytes;
        burst.peers.insert(to);
        burst.written &= written;
    }

    /// The sends so far are not measured (the driver is about to yield between them and
    /// the rest); the next send starts a burst.
    pub fn drop_burst(&mut self) {
        if self.burst.take().is_some() {
            self.meter.stop();
        }
    }

    /// The input's sends are all handed over: a long enough burst of small messages is
    /// measured.
    pub fn end_burst(&mut self) {
        let Some(b) = self.burst.take() else {
            return;
        };
        let small = b.bytes <= MAX_MEASURED_MESSAGE * b.sends as usize;
        if !b.written || !small || b.peers.len() < MIN_BURST_PEERS || !self.meter.is_logging() {
            return self.meter.stop();
        }
        let (num, den) = SHARE_MEASURED;
        self.leaving = Some(Leaving {
            sends: (b.sends as usize * num).div_ceil(den) as u32,
            bytes: b.bytes * num / den,
            datagrams: (b.peers.len() * num).div_ceil(den),
            give_up: b.started + GIVE_UP,
            next_check: Instant::now() + CHECK_EVERY,
        });
    }

    /// When [`BurstPace::poll`] wants to be called next, while a burst is leaving.
    pub fn next_check(&self) -> Option<Instant> {
        self.leaving.as_ref().map(|l| l.next_check)
    }

    /// The cost of one send, once the burst measured has left.
    pub fn poll(&mut self, now: Instant) -> Option<Duration> {
        let l = self.leaving.as_mut()?;
        if let Some(span) = self.meter.reached(l.bytes, l.datagrams) {
            tracing::debug!(
                sends = l.sends,
                bytes = l.bytes,
                datagrams = l.datagrams,
                span_us = span.as_micros() as u64,
                "a measured burst has left"
            );
            let sends = l.sends.max(1);
            self.leaving = None;
            return Some(span / sends);
        }
        if now >= l.give_up {
            self.leaving = None;
            self.meter.stop();
            return None;
        }
        l.next_check = now + CHECK_EVERY;
        None
    }
}

/// A UDP socket (real or emulated) whose sends are recorded by a [`SendMeter`].
pub struct MeteredSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    meter: Arc<SendMeter>,
}

impl MeteredSocket {
    /// Wraps `inner`; its sends are recorded by `meter`.
    pub fn new(inner: Arc<dyn AsyncUdpSocket>, meter: Arc<SendMeter>) -> Arc<MeteredSocket> {
        Arc::new(MeteredSocket { inner, meter })
    }
}

impl fmt::Debug for MeteredSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MeteredSocket")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl AsyncUdpSocket for MeteredSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)?;
        let bytes = transmit.contents.len();
        let datagrams = match transmit.segment_size {
            Some(s) if s > 0 => bytes.div_ceil(s),
            _ => 1,
        };
        self.meter.record(bytes, datagrams);
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One message handed over, as the driver does it.
    fn send(pace: &mut BurstPace, to: NodeId, bytes: usize, written: bool) {
        pace.sending();
        pace.sent(to, bytes, written);
    }

    /// One message of `bytes` to each of `peers` peers, all written.
    fn burst(pace: &mut BurstPace, peers: u64, bytes: usize) {
        for i in 0..peers {
            send(pace, NodeId::from_seed(3, i), bytes, true);
        }
    }

    #[test]
    fn a_burst_is_reached_when_both_its_bytes_and_its_datagrams_have_left() {
        let meter = SendMeter::new();
        meter.record(1000, 1); // before the log: not counted
        let start = Instant::now();
        meter.start(start);
        meter.record(1500, 1);
        assert_eq!(meter.reached(2000, 2), None);
        std::thread::sleep(Duration::from_millis(2));
        meter.record(100, 1);
        // 1600 bytes in 2 datagrams: the datagrams are there, the bytes are not.
        assert_eq!(meter.reached(2000, 2), None);
        meter.record(600, 1);
        let span = meter.reached(2000, 2).expect("reached");
        assert!(span >= Duration::from_millis(2), "{span:?}");
        // Reaching stops the log.
        assert!(!meter.is_logging());
        assert_eq!(meter.reached(1, 1), None);
    }

    #[test]
    fn a_burst_to_enough_peers_gives_its_span_per_send() {
        let meter = SendMeter::new();
        let mut pace = BurstPace::new(meter.clone());
        let peers: Vec<NodeId> = (0..5).map(|i| NodeId::from_seed(3, i)).collect();
        // Too few peers: not measured.
        send(&mut pace, peers[0], 1000, true);
        send(&mut pace, peers[1], 1000, true);
        pace.end_burst();
        assert_eq!(pace.next_check(), None);
        assert!(!meter.is_logging());
        // One queued for a dial: not measured either.
        for (i, p) in peers.iter().enumerate() {
            send(&mut pace, *p, 1000, i != 2);
        }
        pace.end_burst();
        assert_eq!(pace.next_check(), None);
        // Six sends to five peers.
        for p in &peers {
            send(&mut pace, *p, 1000, true);
        }
        send(&mut pace, peers[0], 1000, true);
        pace.end_burst();
        assert!(pace.next_check().is_some());
        // A burst while one is leaving is not measured, and does not disturb it.
        send(&mut pace, peers[1], 1000, true);
        pace.end_burst();
        // Measured until three quarters have left: 4500 bytes in 4 datagrams, of 5 sends.
        for _ in 0..3 {
            meter.record(1400, 1);
        }
        assert_eq!(pace.poll(Instant::now()), None, "3 of 4 datagrams out");
        meter.record(100, 1);
        assert_eq!(pace.poll(Instant::now()), None, "4300 of 4500 bytes out");
        std::thread::sleep(Duration::from_millis(5));
        meter.record(1000, 1);
        let per_send = pace.poll(Instant::now()).expect("left");
        assert!(per_send >= Duration::from_millis(1), "{per_send:?}");
        assert_eq!(pace.next_check(), None);
    }

    #[test]
    fn large_messages_and_dropped_bursts_are_not_measured() {
        let meter = SendMeter::new();
        let mut pace = BurstPace::new(meter.clone());
        burst(&mut pace, 4, 4000);
        pace.end_burst();
        assert_eq!(pace.next_check(), None, "larger than a datagram");
        burst(&mut pace, 4, 1000);
        pace.drop_burst();
        assert!(!meter.is_logging());
        // The sends after a drop are a burst of their own: too short here.
        burst(&mut pace, 2, 1000);
        pace.end_burst();
        assert_eq!(pace.next_check(), None);
    }

    #[test]
    fn a_burst_that_does_not_leave_is_given_up() {
        let meter = SendMeter::new();
        let mut pace = BurstPace::new(meter.clone());
        burst(&mut pace, 4, 500);
        pace.end_burst();
        assert_eq!(pace.poll(Instant::now() + GIVE_UP), None);
        assert_eq!(pace.next_check(), None);
        assert!(!meter.is_logging());
    }

    #[test]
    fn the_log_is_bounded() {
        let meter = SendMeter::new();
        meter.start(Instant::now());
        for _ in 0..=LOG_LIMIT {
            meter.record(1, 1);
        }
        assert!(!meter.is_logging());
        assert_eq!(meter.reached(1, 1), None);
    }
}
