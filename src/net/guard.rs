//! What keeps a remote party from filling the node's log or wearing it down with bad
//! frames: log lines about one source at most once per interval (with the count of the
//! lines held back), and peers that keep breaking the protocol kept out for a while.
//!
//! Both tables are bounded: a source that does not fit is counted with all the others
//! that did not fit, under one shared entry, so a flood of fresh addresses costs a fixed
//! amount of memory and one log line per interval.

use crate::proto::NodeId;
use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Control-plane bytes one connection may have read per second, over time: above it
/// the node reads that peer's streams more slowly, so QUIC flow control holds the peer
/// back and one member cannot take the node's CPU from the others. Data-plane streams
/// (large payloads) are not counted. Far above what the protocol sends: inline
/// broadcasts (at most 960 KiB each) still pass at about 35 per second per link.
pub const CONTROL_READ_RATE: f64 = 32.0 * 1024.0 * 1024.0;
/// What one connection may read at once above that rate.
pub const CONTROL_READ_BURST: f64 = 8.0 * 1024.0 * 1024.0;

/// Connections one remote address may have in handshake or token proof at once: one
/// machine cannot take every admission slot (`net::link::MAX_PENDING_HANDSHAKES`) from the
/// others. An honest node dials a peer once at a time.
pub const MAX_PENDING_PER_ADDRESS: usize = 16;

/// How often a line about one source may be logged.
pub const LOG_INTERVAL: Duration = Duration::from_secs(60);
/// Sources remembered at once by a log gate.
pub const MAX_LOG_SOURCES: usize = 4096;
/// Malformed frames or protocol violations a peer may cause within [`STRIKE_WINDOW`]
/// before its connection is closed and it is kept out.
pub const MAX_STRIKES: u32 = 16;
/// The window strikes are counted over.
pub const STRIKE_WINDOW: Duration = Duration::from_secs(60);
/// How long a peer that ran out of strikes is kept out (neither accepted nor dialed).
pub const KEEP_OUT: Duration = Duration::from_secs(60);
/// Bytes of messages nobody asked for ([`crate::proto::Event::Unsolicited`]: from a peer
/// that is no member, or for operations this node has no record of) a peer may send
/// within [`STRIKE_WINDOW`] before it is closed and kept out like a peer out of strikes.
/// An honest peer sends a few at most (an answer over a minute late, its last messages
/// after it was declared dead); a token holder sending them as fast as it can is out
/// after 8 MiB instead of taking 12% of the node's CPU and slowing the others'
/// collectives through the node by 4x.
pub const MAX_UNSOLICITED_BYTES: u64 = 8 * 1024 * 1024;

/// At most one log line per source and [`LOG_INTERVAL`].
///
/// ```
/// use overlay::net::guard::LogGate;
/// use std::time::{Duration, Instant};
/// let gate = LogGate::new(Duration::from_secs(60), 16);
/// let t = Instant::now();
/// assert_eq!(gate.allow("10.0.0.1", t), Some(0)); // logged
/// assert_eq!(gate.allow("10.0.0.1", t), None); // held back
/// assert_eq!(gate.allow("10.0.0.1", t + Duration::from_secs(61)), Some(1)); // "1 more"
/// ```
#[derive(Debug)]
pub struct LogGate<K> {
    interval: Duration,
    max_sources: usize,
    inner: Mutex<Windows<K>>,
}

#[derive(Debug)]
struct Windows<K> {
    by_source: HashMap<K, Window>,
    /// Every source that did not fit in `by_source`.
    overflow: Option<Window>,
}

#[derive(Clone, Copy, Debug)]
struct Window {
    logged_at: Instant,
    held_back: u64,
}

impl Window {
    /// Whether a line may be logged at `now`, and how many were held back before it.
    fn pass(&mut self, now: Instant, interval: Duration) -> Option<u64> {
        if now.saturating_duration_since(self.logged_at) >= interval {
            let held = std::mem::take(&mut self.held_back);
            self.logged_at = now;
            Some(held)
        } else {
            self.held_back += 1;
            None
        }
    }
}

impl<K: Hash + Eq + Copy> LogGate<K> {
    /// A gate letting one line per source through every `interval`, remembering at most
    /// `max_sources` sources.
    pub fn new(interval: Duration, max_sources: usize) -> Self {
        LogGate {
            interval,
            max_sources,
            inner: Mutex::new(Windows {
                by_source: HashMap::new(),
                overflow: None,
            }),
        }
    }

    /// `Some(n)` if a line about `source` may be logged now (`n` lines about it were held
    /// back since the last one), `None` if it is held back.
    pub fn allow(&self, source: K, now: Instant) -> Option<u64> {
        let mut w = self.inner.lock().expect("not poisoned");
        if let Some(win) = w.by_source.get_mut(&source) {
            return win.pass(now, self.interval);
        }
        if w.by_source.len() >= self.max_sources {
            let interval = self.interval;
            w.by_source
                .retain(|_, win| now.saturating_duration_since(win.logged_at) < interval);
        }
        let fresh = Window {
            logged_at: now,
            held_back: 0,
        };
        if w.by_source.len() < self.max_sources {
            w.by_source.insert(source, fresh);
            return Some(0);
        }
        match &mut w.overflow {
            Some(win) => win.pass(now, self.interval),
            none => {
                *none = Some(fresh);
                Some(0)
            }
        }
    }
}

/// The gates and strikes of one node, shared by its connection tasks.
#[derive(Debug)]
pub struct Guard {
    /// Lines about refused inbound connections, per remote IP address.
    pub refused: LogGate<std::net::IpAddr>,
    /// Lines about bad frames, per admitted peer.
    pub frames: LogGate<NodeId>,
    /// Strikes against admitted peers.
    pub strikes: Strikes,
    /// Connections not admitted yet, per remote address.
    pub pending: Arc<Pending>,
}

impl Default for Guard {
    fn default() -> Self {
        Guard {
            refused: LogGate::new(LOG_INTERVAL, MAX_LOG_SOURCES),
            frames: LogGate::new(LOG_INTERVAL, MAX_LOG_SOURCES),
            strikes: Strikes::default(),
            pending: Arc::default(),
        }
    }
}

/// Inbound connections in handshake or token proof, per remote IP address, at most
/// [`MAX_PENDING_PER_ADDRESS`] each. Entries live only while a connection is pending, and
/// the node admits at most `MAX_PENDING_HANDSHAKES` at once, so the table stays small.
///
/// ```
/// use overlay::net::guard::{MAX_PENDING_PER_ADDRESS, Pending};
/// use std::sync::Arc;
/// let pending = Arc::new(Pending::default());
/// let ip = "10.0.0.1".parse().unwrap();
/// let slots: Vec<_> = (0..MAX_PENDING_PER_ADDRESS).map(|_| pending.enter(ip).unwrap()).collect();
/// assert!(pending.enter(ip).is_none()); // this address is at its share
/// assert!(pending.enter("10.0.0.2".parse().unwrap()).is_some()); // another is not
/// drop(slots);
/// assert!(pending.enter(ip).is_some());
/// ```
#[derive(Debug, Default)]
pub struct Pending {
    by_ip: Mutex<HashMap<IpAddr, usize>>,
}

impl Pending {
    /// A slot for a connection from `ip`, held until dropped; `None` when `ip` holds its
    /// share already.
    pub fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<PendingSlot> {
        let mut by_ip = self.by_ip.lock().expect("pending lock");
        let n = by_ip.entry(ip).or_default();
        if *n >= MAX_PENDING_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(PendingSlot {
            pending: self.clone(),
            ip,
        })
    }
}

/// One pending connection's place in [`Pending`].
#[derive(Debug)]
pub struct PendingSlot {
    pending: Arc<Pending>,
    ip: IpAddr,
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        let mut by_ip = self.pending.by_ip.lock().expect("pending lock");
        if let Some(n) = by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                by_ip.remove(&self.ip);
            }
        }
    }
}

/// A token bucket of bytes one connection's readers spend: a reader that overdraws it
/// waits out its debt before reading on.
#[derive(Debug)]
pub struct ReadBudget {
    rate: f64,
    burst: f64,
    /// Bytes left (negative: owed) and when last refilled.
    state: Mutex<(f64, Instant)>,
}

impl ReadBudget {
    /// A full bucket of `burst` bytes refilled at `rate` bytes per second.
    pub fn new(rate: f64, burst: f64) -> Self {
        ReadBudget {
            rate,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Spends `bytes` at `now`; how long the reader must wait before reading on.
    pub fn spend(&self, bytes: usize, now: Instant) -> Duration {
        let mut st = self.state.lock().expect("not poisoned");
        let refill = now.saturating_duration_since(st.1).as_secs_f64() * self.rate;
        st.0 = (st.0 + refill).min(self.burst) - bytes as f64;
        st.1 = now;
        if st.0 >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-st.0 / self.rate)
        }
    }
}

/// Strikes and unsolicited bytes per peer, and the peers kept out.
#[derive(Debug, Default)]
pub struct Strikes {
    inner: Mutex<StrikeTable>,
}

#[derive(Debug, Default)]
struct StrikeTable {
    /// Per peer: when its window started and the strikes in it.
    counts: HashMap<NodeId, (Instant, u64)>,
    /// Per peer: when its window started and the unsolicited bytes in it.
    unsolicited: HashMap<NodeId, (Instant, u64)>,
    /// Peers kept out, until when.
    kept_out: HashMap<NodeId, Instant>,
    /// Addresses of peers kept out for unsolicited messages, until when: peers from there
    /// that are no members are kept out too (a token holder cannot come back as a fresh
    /// identity at once).
    addresses: HashMap<IpAddr, Instant>,
}

impl Strikes {
    /// Counts one strike against `peer`; true when that was one too many: the caller
    /// closes the connection, and the peer is kept out for [`KEEP_OUT`].
    pub fn strike(&self, peer: NodeId, now: Instant) -> bool {
        let mut t = self.inner.lock().expect("not poisoned");
        let over = charge(&mut t.counts, peer, 1, MAX_STRIKES as u64, now);
        over && t.keep_out(peer, now)
    }

    /// Counts `bytes` of messages nobody asked for against `peer`; true when they pass
    /// [`MAX_UNSOLICITED_BYTES`] in the window: the caller closes the connection, and the
    /// peer is kept out for [`KEEP_OUT`], as is its address (`from`, when known) for peers
    /// that are no members ([`Strikes::address_kept_out`]). False for a peer kept out
    /// already (what it sent before it was closed is still being handled).
    pub fn unsolicited(
        &self,
        peer: NodeId,
        from: Option<IpAddr>,
        bytes: u64,
        now: Instant,
    ) -> bool {
        let mut t = self.inner.lock().expect("not poisoned");
        if t.kept_out.get(&peer).is_some_and(|until| *until > now) {
            return false;
        }
        if !charge(&mut t.unsolicited, peer, bytes, MAX_UNSOLICITED_BYTES, now) {
            return false;
        }
        if let Some(ip) = from {
            t.addresses.retain(|_, until| *until > now);
            if t.addresses.len() < MAX_LOG_SOURCES {
                t.addresses.insert(ip, now + KEEP_OUT);
            }
        }
        t.keep_out(peer, now)
    }

    /// Whether peers from `ip` that are no members are kept out: a peer from there was,
    /// for unsolicited messages, less than [`KEEP_OUT`] ago.
    pub fn address_kept_out(&self, ip: IpAddr, now: Instant) -> bool {
        let t = self.inner.lock().expect("not poisoned");
        t.addresses.get(&ip).is_some_and(|until| *until > now)
    }

    /// How much longer `peer` is kept out, if it is.
    pub fn kept_out(&self, peer: &NodeId, now: Instant) -> Option<Duration> {
        let t = self.inner.lock().expect("not poisoned");
        let until = *t.kept_out.get(peer)?;
        (until > now).then(|| until - now)
    }
}

impl StrikeTable {
    fn keep_out(&mut self, peer: NodeId, now: Instant) -> bool {
        self.counts.remove(&peer);
        self.unsolicited.remove(&peer);
        self.kept_out.retain(|_, until| *until > now);
        self.kept_out.insert(peer, now + KEEP_OUT);
        true
    }
}

/// Adds `amount` to `peer`'s window (a new one once [`STRIKE_WINDOW`] has passed); true
/// when the window's total passes `limit`. Windows of the past are dropped when the table
/// is full, so it holds at most about [`MAX_LOG_SOURCES`] peers.
fn charge(
    windows: &mut HashMap<NodeId, (Instant, u64)>,
    peer: NodeId,
    amount: u64,
    limit: u64,
    now: Instant,
) -> bool {
    if windows.len() >= MAX_LOG_SOURCES {
        windows.retain(|_, (since, _)| now.saturating_duration_since(*since) < STRIKE_WINDOW);
    }
    let entry = windows.entry(peer).or_insert((now, 0));
    if now.saturating_duration_since(entry.0) >= STRIKE_WINDOW {
        *entry = (now, 0);
    }
    entry.1 = entry.1.saturating_add(amount);
    entry.1 > limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_passes_one_line_per_interval_and_counts_the_rest() {
        let gate = LogGate::new(Duration::from_secs(10), 4);
        let t = Instant::now();
        assert_eq!(gate.allow(1u32, t), Some(0));
        for _ in 0..5 {
            assert_eq!(gate.allow(1, t + Duration::from_secs(1)), None);
        }
        assert_eq!(
            gate.allow(2, t),
            Some(0),
            "another source has its own window"
        );
        assert_eq!(gate.allow(1, t + Duration::from_secs(10)), Some(5));
    }

    #[test]
    fn a_flood_of_fresh_sources_shares_one_window_past_the_limit() {
        let gate = LogGate::new(Duration::from_secs(10), 4);
        let t = Instant::now();
        let passed = (0..10_000u32)
            .filter(|i| gate.allow(*i, t).is_some())
            .count();
        // Four remembered sources and one line for all the others.
        assert_eq!(passed, 5);
        let later = t + Duration::from_secs(10);
        // Past the interval the old entries make room again.
        assert_eq!(gate.allow(20_000, later), Some(0));
        assert!(gate.inner.lock().unwrap().by_source.len() <= 4);
    }

    #[test]
    fn a_read_budget_lets_a_burst_through_and_then_paces_to_its_rate() {
        let b = ReadBudget::new(1000.0, 500.0);
        let t = Instant::now();
        assert_eq!(b.spend(500, t), Duration::ZERO);
        // 1000 bytes owed at 1000 B/s: a second.
        assert_eq!(b.spend(1000, t), Duration::from_secs(1));
        // Half a second later half the debt is paid.
        let w = b.spend(0, t + Duration::from_millis(500));
        assert!((w.as_secs_f64() - 0.5).abs() < 1e-9, "{w:?}");
        // Long idle refills to the burst, no more.
        assert_eq!(b.spend(500, t + Duration::from_secs(100)), Duration::ZERO);
        assert!(b.spend(1, t + Duration::from_secs(100)) > Duration::ZERO);
    }

    #[test]
    fn a_peer_is_kept_out_after_too_many_strikes_and_let_in_later() {
        let s = Strikes::default();
        let (p, q) = (NodeId::from_bytes([1; 16]), NodeId::from_bytes([2; 16]));
        let t = Instant::now();
        for _ in 0..MAX_STRIKES {
            assert!(!s.strike(p, t));
        }
        assert!(!s.strike(q, t), "strikes are per peer");
        assert!(s.strike(p, t));
        assert!(s.kept_out(&p, t).is_some());
        assert!(s.kept_out(&q, t).is_none());
        assert!(s.kept_out(&p, t + KEEP_OUT).is_none());
        // Strikes spread out over windows never add up.
        for k in 0..3 * MAX_STRIKES {
            let at = t + STRIKE_WINDOW * (k / (MAX_STRIKES / 2)) + KEEP_OUT;
            assert!(!s.strike(q, at), "strike {k}");
        }
    }

    #[test]
    fn a_peer_sending_answers_nobody_asked_for_is_kept_out_past_its_allowance() {
        let s = Strikes::default();
        let (p, q) = (NodeId::from_bytes([1; 16]), NodeId::from_bytes([2; 16]));
        let t = Instant::now();
        let mib = 1024 * 1024;
        let (ip, other): (IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..MAX_UNSOLICITED_BYTES / mib {
            assert!(!s.unsolicited(p, Some(ip), mib, t));
        }
        assert!(!s.unsolicited(q, Some(other), mib, t), "counted per peer");
        assert!(!s.address_kept_out(ip, t));
        assert!(
            s.unsolicited(p, Some(ip), 1, t),
            "one byte past the allowance"
        );
        assert!(s.kept_out(&p, t).is_some());
        assert!(
            s.address_kept_out(ip, t),
            "non-members from its address too"
        );
        assert!(!s.address_kept_out(other, t));
        assert!(!s.address_kept_out(ip, t + KEEP_OUT));
        // What it sent before its connection closed is not held against it again.
        assert!(!s.unsolicited(p, Some(ip), MAX_UNSOLICITED_BYTES, t));
        // Late answers spread over windows never add up.
        let later = t + KEEP_OUT;
        for k in 0..4 {
            let at = later + STRIKE_WINDOW * k;
            let bytes = MAX_UNSOLICITED_BYTES - mib;
            assert!(!s.unsolicited(q, Some(other), bytes, at), "window {k}");
        }
    }
}
