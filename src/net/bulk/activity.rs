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
//! of which gets only its share of the path. A transfer that starts less than [`GAP`]
//! after the peer's last one ended continues the period: a pipelined collective sends
//! its segments back to back, and one 256 KiB segment alone often spans less than
//! [`MIN_SPAN`], so it would measure nothing.

use crate::proto::NodeId;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Rates kept until the driver takes them (the oldest go first).
pub const MAX_RATES: usize = 64;
/// Shortest busy period reported: bytes that waited in QUIC's receive window before the
/// header was read arrive at once, and over a short period they would make the rate.
pub const MIN_SPAN: Duration = Duration::from_millis(50);
/// Longest pause between two transfers from one peer that still makes one busy period;
/// the pause counts in the span, so the rate errs low, never high.
pub const GAP: Duration = Duration::from_millis(20);

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
    /// When the last transfer ended, while none is open.
    idle_since: Option<Instant>,
}

impl Inner {
    /// Ends `peer`'s period, idle since `end`, and keeps its rate if it spans long enough.
    fn close(&mut self, peer: NodeId, end: Instant) {
        let Some(p) = self.periods.remove(&peer) else {
            return;
        };
        let span = end.saturating_duration_since(p.start);
        if p.bytes > 0 && span >= MIN_SPAN {
            if self.rates.len() == MAX_RATES {
                self.rates.pop_front();
            }
            self.rates.push_back((peer, p.bytes, span));
        }
    }

    /// Ends every period idle for longer than [`GAP`] at `now`.
    fn close_idle(&mut self, now: Instant) {
        let mut idle: Vec<(Instant, NodeId)> = self
            .periods
            .iter()
            .filter_map(|(peer, p)| Some((p.idle_since?, *peer)))
            .filter(|(t, _)| now.saturating_duration_since(*t) > GAP)
            .collect();
        // The oldest first, so that a full queue drops the oldest.
        idle.sort_unstable();
        for (end, peer) in idle {
            self.close(peer, end);
        }
    }
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
        inner.close_idle(now);
        let p = inner.periods.entry(peer).or_insert(Period {
            open: 0,
            start: now,
            bytes: 0,
            idle_since: None,
        });
        p.open += 1;
        p.idle_since = None;
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

    /// The busy periods that ended since the last call: (peer, bytes, span). A period
    /// ends once its peer's transfers have paused for longer than [`GAP`].
    pub fn take_rates(&self) -> Vec<(NodeId, u64, Duration)> {
        self.take_rates_at(Instant::now())
    }

    fn take_rates_at(&self, now: Instant) -> Vec<(NodeId, u64, Duration)> {
        let mut inner = self.lock();
        inner.close_idle(now);
        inner.rates.drain(..).collect()
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
        if p.open == 0 {
            p.idle_since = Some(now);
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
        assert!(a.take_rates().is_empty(), "p may send again within GAP");
        let later = Instant::now() + GAP * 2;
        let rates = a.take_rates_at(later);
        assert_eq!(rates.len(), 1);
        assert_eq!((rates[0].0, rates[0].1), (p, 4000));
        // q's transfer failed: no bytes, no rate, and nothing is moving any more; a
        // period shorter than MIN_SPAN is not reported.
        other.arrived(0);
        drop(other);
        assert!(a.take_rates_at(Instant::now() + GAP * 2).is_empty());
        let mut short = a.receiving(q);
        short.arrived(1 << 20);
        drop(short);
        assert!(a.take_rates_at(Instant::now() + GAP * 2).is_empty());
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
        let rates = a.take_rates_at(Instant::now() + GAP * 2);
        assert_eq!(rates.len(), MAX_RATES);
        assert_eq!(rates[0].1, 11, "the oldest were dropped");
    }

    #[test]
    fn transfers_back_to_back_make_one_period_and_a_pause_ends_it() {
        let a = Activity::default();
        let p = NodeId::from_bytes([5; 16]);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Three segments one after the other, 30 ms each, 5 ms apart: one period of
        // 100 ms, though none of them alone spans MIN_SPAN.
        for i in 0..3u32 {
            let start = t0 + ms(35) * i;
            // Ended by hand at a chosen instant, not by the guard's drop.
            std::mem::forget(a.receiving_at(p, start));
            a.received(p, 1000, start + ms(30));
        }
        assert!(
            a.take_rates_at(t0 + ms(100) + GAP).is_empty(),
            "not over yet"
        );
        let rates = a.take_rates_at(t0 + ms(101) + GAP);
        assert_eq!(rates, vec![(p, 3000, ms(100))]);
        // A pause longer than GAP starts a new period, which alone is too short.
        let start = t0 + ms(200);
        std::mem::forget(a.receiving_at(p, start));
        a.received(p, 1000, start + ms(30));
        assert!(a.take_rates_at(start + ms(31) + GAP).is_empty());
    }
}
