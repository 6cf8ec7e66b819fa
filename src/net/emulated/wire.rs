//! The wire of an emulated network: one OS thread that sends every socket's delayed
//! datagrams at their due times.
//!
//! A thread, not a tokio task, because tokio's timers have a resolution of one millisecond:
//! a task would round every delay up to the next tick, turning a 0.1 ms LAN into one of
//! about 1.2 ms and skewing whatever is measured over it. A parked thread wakes within tens
//! of microseconds (its timer slack is set to the minimum). One thread for the whole network
//! rather than one per socket: under load many datagrams fall due together and leave in one
//! wake-up, instead of costing a context switch each.
//!
//! Each socket keeps its own delay queue (limits, bandwidth pipes, per-destination order).
//! The wire only holds *tokens*: "socket S has something due at t". A token is pushed when a
//! datagram becomes the head of its socket's queue, and again after the wire has sent what
//! was due and more is queued; a token that finds nothing due is dropped. So every non-empty
//! queue always has a token no later than its head.

use super::Shared;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Stack of the wire thread: it only moves datagrams from queues to sockets.
const WIRE_STACK: usize = 256 * 1024;

/// Datagrams taken from one socket's queue per visit, so a burst does not hold its lock
/// against `try_send`.
const SEND_BATCH: usize = 64;

/// How often a send that finds the socket's buffer full is retried before the datagram
/// counts as lost (which QUIC recovers from).
const SEND_RETRIES: u32 = 100;

/// "This socket has a datagram due at `due`."
struct Token {
    due: Instant,
    /// Insertion order: equal due times are served first come, first served.
    seq: u64,
    socket: Arc<Shared>,
}

impl PartialEq for Token {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for Token {}

impl PartialOrd for Token {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Token {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

#[derive(Default)]
struct Tokens {
    heap: BinaryHeap<Reverse<Token>>,
    next_seq: u64,
}

struct WireState {
    tokens: Mutex<Tokens>,
    /// Set when the network is dropped: the thread sends what is queued, then ends.
    closed: AtomicBool,
    /// How late the wire sends: what the emulation adds on top of the topology's latency.
    lateness: Lateness,
}

/// How late the wire thread sent datagrams against their due times. A thread that is not
/// scheduled in time (the machine busy) delays every datagram due meanwhile; benchmarks
/// print this so such a stall is not mistaken for the protocol's doing.
#[derive(Default)]
struct Lateness {
    sent: AtomicU64,
    over_1ms: AtomicU64,
    over_5ms: AtomicU64,
    max_us: AtomicU64,
}

/// How late the wire sent datagrams over a period (see
/// [`super::LatencyMap::take_wire_lateness`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireLateness {
    /// Datagrams sent.
    pub sent: u64,
    /// Of those, sent more than 1 ms after their due time.
    pub over_1ms: u64,
    /// Of those, sent more than 5 ms after their due time.
    pub over_5ms: u64,
    /// The latest send, µs after its due time.
    pub max_us: u64,
}

impl WireLateness {
    /// Adds `other`'s period to this one.
    pub fn merge(&mut self, other: WireLateness) {
        self.sent += other.sent;
        self.over_1ms += other.over_1ms;
        self.over_5ms += other.over_5ms;
        self.max_us = self.max_us.max(other.max_us);
    }
}

impl Lateness {
    fn record(&self, late: Duration) {
        let us = late.as_micros().min(u64::MAX as u128) as u64;
        self.sent.fetch_add(1, AtomicOrdering::Relaxed);
        if us > 1_000 {
            self.over_1ms.fetch_add(1, AtomicOrdering::Relaxed);
        }
        if us > 5_000 {
            self.over_5ms.fetch_add(1, AtomicOrdering::Relaxed);
        }
        self.max_us.fetch_max(us, AtomicOrdering::Relaxed);
    }

    /// What was recorded since the last take, and start again.
    fn take(&self) -> WireLateness {
        WireLateness {
            sent: self.sent.swap(0, AtomicOrdering::Relaxed),
            over_1ms: self.over_1ms.swap(0, AtomicOrdering::Relaxed),
            over_5ms: self.over_5ms.swap(0, AtomicOrdering::Relaxed),
            max_us: self.max_us.swap(0, AtomicOrdering::Relaxed),
        }
    }
}

impl WireState {
    fn tokens(&self) -> MutexGuard<'_, Tokens> {
        // Every update leaves the heap consistent, so a panic elsewhere cannot corrupt it.
        self.tokens.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pushes a token; true if it is the earliest now (the thread must wake sooner).
    fn push(&self, due: Instant, socket: Arc<Shared>) -> bool {
        let mut t = self.tokens();
        let earlier = t.heap.peek().is_none_or(|Reverse(head)| due < head.due);
        let seq = t.next_seq;
        t.next_seq += 1;
        t.heap.push(Reverse(Token { due, seq, socket }));
        earlier
    }
}

/// The wire of one emulated network (owned by its [`super::LatencyMap`]).
pub(super) struct Wire {
    state: Arc<WireState>,
    thread: std::thread::Thread,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").finish_non_exhaustive()
    }
}

impl Wire {
    /// Starts the wire's thread.
    pub(super) fn start() -> std::io::Result<Wire> {
        let state = Arc::new(WireState {
            tokens: Mutex::default(),
            closed: AtomicBool::new(false),
            lateness: Lateness::default(),
        });
        let handle = {
            let state = state.clone();
            std::thread::Builder::new()
                .name("emulated-wire".into())
                .stack_size(WIRE_STACK)
                .spawn(move || run(state))?
        };
        Ok(Wire {
            state,
            thread: handle.thread().clone(),
        })
    }

    /// How late the wire has sent since the last call.
    pub(super) fn take_lateness(&self) -> WireLateness {
        self.state.lateness.take()
    }

    /// `socket`'s queue has a new head, due at `due`.
    pub(super) fn schedule(&self, due: Instant, socket: Arc<Shared>) {
        if self.state.push(due, socket) {
            self.thread.unpark();
        }
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        // Datagrams already queued are "on the wire": the thread still sends them.
        self.state.closed.store(true, AtomicOrdering::Release);
        self.thread.unpark();
    }
}

/// The wire thread: sends what is due, then sleeps until the earliest token.
fn run(state: Arc<WireState>) {
    set_min_timer_slack();
    set_realtime_priority();
    let mut due_now = Vec::new();
    let mut batch = Vec::with_capacity(SEND_BATCH);
    loop {
        let now = Instant::now();
        {
            let mut t = state.tokens();
            while t.heap.peek().is_some_and(|Reverse(head)| head.due <= now) {
                let Reverse(token) = t.heap.pop().expect("peeked");
                due_now.push(token.socket);
            }
        }
        for socket in due_now.drain(..) {
            let more = {
                let mut queue = socket.queue();
                while batch.len() < SEND_BATCH {
                    match queue.pop_due(now) {
                        Some(d) => batch.push(d),
                        None => break,
                    }
                }
                // Only a visit that sent something re-arms: an empty visit was a stale
                // token, and the queue's head has a token of its own.
                (!batch.is_empty()).then(|| queue.next_due()).flatten()
            };
            for d in batch.drain(..) {
                send_now(&socket.io, &d);
                state
                    .lateness
                    .record(Instant::now().saturating_duration_since(d.due));
            }
            if let Some(due) = more {
                state.push(due, socket);
            }
        }
        // Read after the sends: they may have re-armed sockets, and `try_send` adds tokens.
        let next = state.tokens().heap.peek().map(|Reverse(head)| head.due);
        match next {
            Some(due) => {
                let wait = due.saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    std::thread::park_timeout(wait);
                }
            }
            None => {
                if state.closed.load(AtomicOrdering::Acquire) {
                    return;
                }
                // An unpark between the check and here is kept: `park` returns at once.
                std::thread::park();
            }
        }
    }
}

/// Sends one datagram on the non-blocking socket, retrying briefly while its buffer is
/// full; a datagram that still does not fit, or fails, is lost (QUIC recovers), and the
/// wire goes on.
fn send_now(io: &std::net::UdpSocket, d: &super::Datagram) {
    for _ in 0..SEND_RETRIES {
        match io.send_to(&d.bytes, d.dest) {
            Ok(_) => return,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_micros(50));
            }
            Err(e) => {
                tracing::debug!(dest = %d.dest, error = %e, "emulated socket: send failed");
                return;
            }
        }
    }
    tracing::debug!(dest = %d.dest, "emulated socket: send buffer full, datagram lost");
}

/// Asks for the lowest real-time priority (`SCHED_FIFO` 1), so that when a datagram falls
/// due the wire runs at once instead of waiting for a time slice behind the busy threads of
/// the nodes it emulates: a late wire delays every datagram due meanwhile, whichever
/// protocol sent it. The thread sleeps between sends, so it cannot starve the machine (and
/// the kernel caps real-time threads at 95% of a CPU anyway). Needs `CAP_SYS_NICE` (root);
/// without it the thread keeps the normal policy.
fn set_realtime_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: pthread_self() is this live thread and `param` a valid sched_param.
        let rc =
            unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
        if rc != 0 {
            tracing::debug!(
                rc,
                "emulated wire: no real-time priority (needs CAP_SYS_NICE)"
            );
        }
    }
}

/// Asks the kernel to wake this thread's timed sleeps as precisely as it can (the default
/// slack of 50 us is half a LAN latency).
fn set_min_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only affects this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}
