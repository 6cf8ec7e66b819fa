//! Whether transfers of large collectives are moving, and the rate each peer's transfers
//! reached here.
//!
//! The driver reads both once per wake-up (`Driver::feed_reports`): while a transfer
//! moves (and for a moment after), the node neither asks for packet trains nor sends
//! them, as for a striped broadcast's streams (a train on a link the collective keeps
//! full measures the queue, not the link), and QUIC's path statistics are read for
//! saturated paths. What arrived becomes `Input::TransferRate`: a passive measurement.
//!
//! A peer's rate is taken over a *busy period*, from the first of its transfers to start
//! while none was open to the last one ending, not per transfer: a collective keeps
//! several transfers from one peer in flight at once (`WINDOW` in the API's comm), each
//! of which gets only its share of the path.

use crate::proto::NodeId;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Rates kept until the driver takes them (the oldest go first).
pub const MAX_RATES: usize = 64;
/// Shortest busy period reported: bytes that waited in QUIC's receive window before the
/// header was read arrive at once, and over a short period they would make the rate.
pub const MIN_SPAN: Duration = Duration::from_millis(50);

#[derive(Default)]
struct Inner {
    /// Transfers in flight, either way.
    moving: usize,
    /// When the last one ended.
    last_end: Option<Instant>,
    /// Each peer's busy period: transfers open, since when, bytes that arrived whole.
    periods: HashMap<NodeId, Period>,
    /// Finished periods: who, bytes, span.
    rates: VecDeque<(NodeId, u64, Duration)>,
}

struct Period {
    open: usize,
    start: Instant,
    bytes: u64,
}

/// Transfers in flight and the rates of those that arrived; shared by a node's
/// connection tasks, its API handles and its driver.
#[derive(Default)]
pub struct Activity {
    inner: Mutex<Inner>,
}

/// A transfer this node sends; counted as moving until dropped.
pub struct Sending<'a>(&'a Activity);

/// A transfer this node receives from a peer; counted as moving until dropped.
pub struct Receiving<'a> {
    activity: &'a Activity,
    peer: NodeId,
    bytes: u64,
}

impl Activity {
    /// A transfer to a peer starts.
    pub fn sending(&self) -> Sending<'_> {
        self.lock().moving += 1;
        Sending(self)
    }

    /// A transfer from `peer` starts (its header arrived; its bytes follow at once).
    pub fn receiving(&self, peer: NodeId) -> Receiving<'_> {
        self.receiving_at(peer, Instant::now())
    }

    fn receiving_at(&self, peer: NodeId, now: Instant) -> Receiving<'_> {
        let mut inner = self.lock();
        inner.moving += 1;
        let p = inner.periods.entry(peer).or_insert(Period {
            open: 0,
            start: now,
            bytes: 0,
        });
        p.open += 1;
        Receiving {
            activity: self,
            peer,
            bytes: 0,
        }
    }

    /// Whether a transfer is in flight or ended less than `hold` ago.
    pub fn moving(&self, hold: Duration) -> bool {
        let inner = self.lock();
        inner.moving > 0 || inner.last_end.is_some_and(|t| t.elapsed() < hold)
    }

    /// The busy periods that ended since the last call: (peer, bytes, span).
    pub fn take_rates(&self) -> Vec<(NodeId, u64, Duration)> {
        self.lock().rates.drain(..).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("not poisoned")
    }

    fn ended(&self, now: Instant) -> std::sync::MutexGuard<'_, Inner> {
        let mut inner = self.lock();
        inner.moving = inner.moving.saturating_sub(1);
        inner.last_end = Some(now);
        inner
    }

    fn received(&self, peer: NodeId, bytes: u64, now: Instant) {
        let mut inner = self.ended(now);
        let Some(p) = inner.periods.get_mut(&peer) else {
            return;
        };
        p.open -= 1;
        p.bytes += bytes;
        if p.open > 0 {
            return;
        }
        let span = now.duration_since(p.start);
        let bytes = p.bytes;
        inner.periods.remove(&peer);
        if bytes > 0 && span >= MIN_SPAN {
            if inner.rates.len() == MAX_RATES {
                inner.rates.pop_front();
            }
            inner.rates.push_back((peer, bytes, span));
        }
    }
}

impl Receiving<'_> {
    /// All `bytes` of the transfer arrived (a transfer that fails counts no bytes, and
    /// its time still counts in the period: the path was busy).
    pub fn arrived(&mut self, bytes: u64) {
        self.bytes = bytes;
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        drop(self.0.ended(Instant::now()));
    }
}

impl Drop for Receiving<'_> {
    fn drop(&mut self) {
        self.activity
            .received(self.peer, self.bytes, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_transfers_from_one_peer_make_one_period_and_moving_holds_briefly() {
        let a = Activity::default();
        let p = NodeId::from_bytes([3; 16]);
        let q = NodeId::from_bytes([4; 16]);
        let t0 = Instant::now() - MIN_SPAN;
        let mut first = a.receiving_at(p, t0);
        let mut second = a.receiving_at(p, t0 + Duration::from_millis(5));
        let mut other = a.receiving_at(q, t0);
        assert!(a.moving(Duration::ZERO));
        first.arrived(1000);
        drop(first);
        assert!(a.take_rates().is_empty(), "a transfer from p is still open");
        second.arrived(3000);
        drop(second);
        let rates = a.take_rates();
        assert_eq!(rates.len(), 1);
        assert_eq!((rates[0].0, rates[0].1), (p, 4000));
        // q's transfer failed: no bytes, no rate, and nothing is moving any more; a
        // period shorter than MIN_SPAN is not reported.
        other.arrived(0);
        drop(other);
        assert!(a.take_rates().is_empty());
        let mut short = a.receiving(q);
        short.arrived(1 << 20);
        drop(short);
        assert!(a.take_rates().is_empty());
        assert!(!a.moving(Duration::ZERO));
        assert!(
            a.moving(Duration::from_secs(60)),
            "held after the last one ended"
        );
        // A send counts as moving too.
        let s = a.sending();
        assert!(a.moving(Duration::ZERO));
        drop(s);
        assert!(!a.moving(Duration::ZERO));
    }

    #[test]
    fn rates_waiting_for_the_driver_are_bounded() {
        let a = Activity::default();
        for i in 0..(MAX_RATES + 10) {
            let p = NodeId::from_bytes([i as u8; 16]);
            let mut r = a.receiving_at(p, Instant::now() - MIN_SPAN);
            r.arrived(i as u64 + 1);
            drop(r);
        }
        let rates = a.take_rates();
        assert_eq!(rates.len(), MAX_RATES);
        assert_eq!(rates[0].1, 11, "the oldest were dropped");
    }
}
