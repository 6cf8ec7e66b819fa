//! An emulated wide-area UDP socket for quinn: real QUIC over real loopback UDP sockets that
//! experiences the latency, and optionally the bandwidth, of a topology file.
//!
//! Every socket of one emulated network shares a [`LatencyMap`] that says which topology
//! cluster each bound address belongs to. An [`EmulatedUdpSocket`] holds every outgoing
//! datagram in a bounded per-socket delay queue for the one-way latency between the sender's
//! and the receiver's clusters, then sends it on its real socket; receiving is plain UDP.
//! Because only the sender delays, a datagram crosses the emulated network exactly once,
//! and an exchange `A -> B -> A` costs `one_way(A, B) + one_way(B, A)`.
//!
//! Bandwidth (only with [`LatencyMap::with_bandwidth`]; [`LatencyMap::new`] emulates latency
//! alone, so tests that do not ask for it are not slowed): a datagram from a node of
//! cluster A to a node of cluster B is first serialized on the sender's NIC at A's per-node
//! `bandwidth_mbit`, then, if A and B differ, on the directed link A -> B at that link's
//! `bandwidth_mbit` (one pipe shared by every node of A sending to B), and then delayed by
//! the one-way latency. Each pipe is first come, first served with a finite buffer
//! ([`pipe::BUFFER_TIME`] at its rate, at least [`pipe::MIN_BUFFER`]); a datagram that does
//! not fit is dropped, so QUIC's congestion control sees loss and backs off. A pipe without
//! a figure in the file is unlimited. The receiver's NIC is not modelled.
//!
//! Not emulated: loss other than full queues, reordering, ECN marks (outgoing ECN bits are
//! not set and incoming ones are not reported, so quinn sees a path without ECN) and GSO/GRO
//! (one datagram per transmit and per receive, which keeps the time of each datagram exact).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use overlay::net::emulated::{LatencyMap, endpoint};
//! use overlay::topology::Topology;
//! let map = LatencyMap::new(Topology::builtin("phoenix-27").unwrap());
//! let client = endpoint("127.0.0.1:0".parse().unwrap(), map.clone(), 1, None)?;
//! # Ok(()) }
//! ```

pub mod pipe;
mod wire;

pub use self::wire::WireLateness;

use self::pipe::Pipe;
use crate::topology::Topology;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::time::Instant;

/// Who is where: maps a bound socket address to a topology cluster, shared by all sockets of
/// one emulated network.
pub struct LatencyMap {
    topology: Topology,
    clusters: RwLock<HashMap<SocketAddr, usize>>,
    /// Addresses cut off the network: every datagram from or to them is lost (a crashed
    /// host, as its peers see it).
    cut: RwLock<std::collections::HashSet<SocketAddr>>,
    /// Whether sockets on this map emulate bandwidth.
    bandwidth: bool,
    /// The directed inter-cluster links with a bandwidth, `[from * n + to]` (empty when
    /// bandwidth is not emulated). One lock per link: senders to different clusters do not
    /// wait for each other.
    links: Vec<Option<Mutex<Pipe>>>,
    /// The thread that sends every socket's delayed datagrams, started with the first
    /// socket.
    wire: OnceLock<wire::Wire>,
}

/// Where a datagram goes: the one-way latency and the shared link it crosses, if any.
struct Route<'a> {
    latency: Duration,
    link: Option<&'a Mutex<Pipe>>,
}

impl fmt::Debug for LatencyMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The topology's matrices can be large; its name and the registrations say enough.
        f.debug_struct("LatencyMap")
            .field("topology", &self.topology.name)
            .field("registered", &self.read().len())
            .field("bandwidth", &self.bandwidth)
            .finish()
    }
}

impl LatencyMap {
    /// An empty map over `topology` that emulates latency only; shared by reference count
    /// because every socket of the network keeps it for lookups on each send.
    pub fn new(topology: Topology) -> Arc<LatencyMap> {
        Arc::new(LatencyMap {
            topology,
            clusters: RwLock::new(HashMap::new()),
            bandwidth: false,
            links: Vec::new(),
            cut: RwLock::default(),
            wire: OnceLock::new(),
        })
    }

    /// An empty map over `topology` that emulates latency and the bandwidths of the
    /// topology file: each socket's NIC at its cluster's `bandwidth_mbit`, each directed
    /// inter-cluster link at the link's (see the module documentation). Pipes the file
    /// gives no bandwidth for are unlimited.
    pub fn with_bandwidth(topology: Topology) -> Arc<LatencyMap> {
        let n = topology.clusters.len();
        let links = (0..n * n)
            .map(|cell| {
                let (from, to) = (cell / n, cell % n);
                // Inside a cluster only the NICs limit; there is no shared link.
                let mbit = (from != to).then(|| topology.bandwidth_mbit(from, to))??;
                Pipe::with_rate(mbit).map(Mutex::new)
            })
            .collect();
        Arc::new(LatencyMap {
            topology,
            clusters: RwLock::new(HashMap::new()),
            bandwidth: true,
            links,
            cut: RwLock::default(),
            wire: OnceLock::new(),
        })
    }

    /// Whether sockets on this map emulate bandwidth ([`LatencyMap::with_bandwidth`]).
    pub fn emulates_bandwidth(&self) -> bool {
        self.bandwidth
    }

    /// How late the network's wire thread has sent datagrams against their due times since
    /// the previous call (zeros before the first socket). The emulation's own error: a
    /// stall of the thread delays every datagram due meanwhile, whichever protocol sent it.
    pub fn take_wire_lateness(&self) -> WireLateness {
        self.wire
            .get()
            .map(wire::Wire::take_lateness)
            .unwrap_or_default()
    }

    /// The wire, started on first use.
    fn wire(&self) -> io::Result<&wire::Wire> {
        if let Some(w) = self.wire.get() {
            return Ok(w);
        }
        // Two sockets binding at once may both start one; the one not kept ends at once.
        let _ = self.wire.set(wire::Wire::start()?);
        Ok(self.wire.get().expect("just set"))
    }

    /// A fresh NIC pipe for a socket in `cluster`, if bandwidth is emulated and the cluster
    /// has a `bandwidth_mbit`.
    fn nic(&self, cluster: usize) -> Option<Pipe> {
        if !self.bandwidth {
            return None;
        }
        let mbit = self.topology.clusters.get(cluster)?.bandwidth_mbit?;
        Pipe::with_rate(mbit)
    }

    /// Cuts `addr` off the network (or restores it): from now on every datagram from or to
    /// it is silently lost, as with a crashed host.
    pub fn set_cut(&self, addr: SocketAddr, cut: bool) {
        let mut set = self.cut.write().unwrap_or_else(PoisonError::into_inner);
        if cut {
            set.insert(addr);
        } else {
            set.remove(&addr);
        }
    }

    fn is_cut(&self, a: SocketAddr, b: SocketAddr) -> bool {
        let set = self.cut.read().unwrap_or_else(PoisonError::into_inner);
        !set.is_empty() && (set.contains(&a) || set.contains(&b))
    }

    /// Places `addr` in cluster `cluster`, replacing any earlier registration of `addr`.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] if `cluster` is not a cluster index of the
    /// topology (an error rather than a panic: the index usually comes from configuration).
    pub fn register(&self, addr: SocketAddr, cluster: usize) -> io::Result<()> {
        let n = self.topology.clusters.len();
        if cluster >= n {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cluster {cluster} out of range: topology {} has {n} clusters",
                    self.topology.name
                ),
            ));
        }
        self.write().insert(addr, cluster);
        Ok(())
    }

    /// Forgets `addr`; datagrams to or from it are no longer delayed.
    pub fn unregister(&self, addr: SocketAddr) {
        self.write().remove(&addr);
    }

    /// The cluster `addr` is registered in, if any.
    pub fn cluster_of(&self, addr: SocketAddr) -> Option<usize> {
        self.read().get(&addr).copied()
    }

    /// One-way latency from `from` to `to`: the topology's latency between their clusters,
    /// or `None` if either address is not registered.
    pub fn one_way(&self, from: SocketAddr, to: SocketAddr) -> Option<Duration> {
        let (a, b) = {
            let map = self.read();
            (*map.get(&from)?, *map.get(&to)?)
        };
        // Both indices were range-checked by `register`, so this cannot panic.
        Some(self.topology.latency(a, b))
    }

    /// The latency from `from` to `to` and the link the datagram crosses; `None` if either
    /// address is not registered.
    fn route(&self, from: SocketAddr, to: SocketAddr) -> Option<Route<'_>> {
        let (a, b) = {
            let map = self.read();
            (*map.get(&from)?, *map.get(&to)?)
        };
        let n = self.topology.clusters.len();
        Some(Route {
            latency: self.topology.latency(a, b),
            link: self.links.get(a * n + b).and_then(Option::as_ref),
        })
    }

    /// The topology the latencies come from.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    // Poisoning cannot leave the map inconsistent (every update is one insert or remove),
    // so a panic elsewhere must not turn every later send into a panic.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<SocketAddr, usize>> {
        self.clusters.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<SocketAddr, usize>> {
        self.clusters
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Bounds of a socket's delay queue; a datagram that would exceed either is dropped and
/// counted, as a router with a full buffer would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Most datagrams held at once.
    pub datagrams: usize,
    /// Most payload bytes held at once.
    pub bytes: usize,
}

impl Default for QueueLimits {
    /// 64 Ki datagrams and 64 MiB: more than a few seconds of a busy QUIC connection at
    /// 100 ms latency, small enough that a runaway sender cannot exhaust memory.
    fn default() -> Self {
        QueueLimits {
            datagrams: 64 * 1024,
            bytes: 64 * 1024 * 1024,
        }
    }
}

/// A datagram waiting in a delay queue.
#[derive(Debug)]
struct Datagram {
    due: Instant,
    /// Insertion order: breaks ties between equal due times so they leave FIFO.
    seq: u64,
    dest: SocketAddr,
    bytes: Box<[u8]>,
}

// Reversed on (due, seq) so that `BinaryHeap`, a max-heap, pops the earliest datagram.
impl Ord for Datagram {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .due
            .cmp(&self.due)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Datagram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Datagram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Datagram {}

/// Destinations remembered for ordering before the table is pruned of past due times.
const LAST_DUE_PRUNE: usize = 1024;

/// The bounded delay queue of one socket: a min-heap on (due time, insertion order).
#[derive(Debug)]
struct DelayQueue {
    heap: BinaryHeap<Datagram>,
    bytes: usize,
    next_seq: u64,
    /// Latest due time per destination: a datagram never becomes due before an earlier one
    /// to the same destination, even if that destination's latency changed in between.
    last_due: HashMap<SocketAddr, Instant>,
    prune_at: usize,
    limits: QueueLimits,
    /// Datagrams dropped: this queue full, or (bandwidth emulation) a full NIC or link.
    dropped: u64,
    /// The sender's NIC, when bandwidth is emulated; under the queue's lock because every
    /// datagram passes both.
    nic: Option<Pipe>,
}

impl DelayQueue {
    fn new(limits: QueueLimits) -> Self {
        DelayQueue {
            heap: BinaryHeap::new(),
            bytes: 0,
            next_seq: 0,
            last_due: HashMap::new(),
            prune_at: LAST_DUE_PRUNE,
            limits,
            dropped: 0,
            nic: None,
        }
    }

    /// Passes a datagram of `len` bytes, handed over at `now`, through the sender's NIC and
    /// then `link`: when it has left the last pipe, or `None` if a pipe dropped it (counted).
    fn serialize(
        &mut self,
        now: Instant,
        len: usize,
        link: Option<&Mutex<Pipe>>,
    ) -> Option<Instant> {
        let mut at = now;
        if let Some(nic) = &mut self.nic {
            at = nic.send(at, len).or_else(|| {
                self.dropped += 1;
                None
            })?;
        }
        if let Some(link) = link {
            // Same reasoning as `LatencyMap::read`: a pipe is consistent after every call.
            let mut link = link.lock().unwrap_or_else(PoisonError::into_inner);
            at = link.send(at, len).or_else(|| {
                self.dropped += 1;
                None
            })?;
        }
        Some(at)
    }

    /// Queues `bytes` for `dest`, due `delay` after `now`; returns the due time, or `None`
    /// if the datagram was dropped because the queue is full.
    fn push(
        &mut self,
        now: Instant,
        delay: Duration,
        dest: SocketAddr,
        bytes: &[u8],
    ) -> Option<Instant> {
        let full = self.heap.len() >= self.limits.datagrams
            || self.bytes.saturating_add(bytes.len()) > self.limits.bytes;
        // An unrepresentable due time (absurd latency) is treated like a full queue: the
        // datagram would never arrive anyway.
        let (false, Some(mut due)) = (full, now.checked_add(delay)) else {
            self.dropped += 1;
            return None;
        };
        let last = self.last_due.entry(dest).or_insert(due);
        if *last > due {
            due = *last;
        } else {
            *last = due;
        }
        if self.last_due.len() > self.prune_at {
            // Entries already due cannot delay anything queued from now on.
            self.last_due.retain(|_, d| *d > now);
            self.prune_at = (2 * self.last_due.len()).max(LAST_DUE_PRUNE);
        }
        self.heap.push(Datagram {
            due,
            seq: self.next_seq,
            dest,
            bytes: bytes.into(),
        });
        self.next_seq += 1;
        self.bytes += bytes.len();
        Some(due)
    }

    /// Removes and returns the earliest datagram if it is due at `now`.
    fn pop_due(&mut self, now: Instant) -> Option<Datagram> {
        if self.heap.peek()?.due > now {
            return None;
        }
        let d = self.heap.pop()?;
        self.bytes -= d.bytes.len();
        Some(d)
    }

    /// Due time of the earliest datagram.
    fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|d| d.due)
    }

    fn len(&self) -> usize {
        self.heap.len()
    }
}

/// A socket's side of the wire: its delay queue and the descriptor the wire sends from.
/// Held by the socket and by the wire's tokens, so what is queued still leaves after the
/// socket is dropped.
#[derive(Debug)]
struct Shared {
    queue: Mutex<DelayQueue>,
    /// The socket's second descriptor (non-blocking), for the wire thread.
    io: std::net::UdpSocket,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, DelayQueue> {
        // Same reasoning as `LatencyMap::read`: every update leaves the queue consistent.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A UDP socket on loopback that delays every outgoing datagram by the one-way latency
/// between the sender's and the receiver's clusters.
pub struct EmulatedUdpSocket {
    io: Arc<UdpSocket>,
    /// The address registered in `map` (the bound address, with an unspecified IP replaced
    /// by loopback, since that is the address peers on this host send to).
    registered: SocketAddr,
    cluster: usize,
    map: Arc<LatencyMap>,
    shared: Arc<Shared>,
}

impl fmt::Debug for EmulatedUdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmulatedUdpSocket")
            .field("addr", &self.registered)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl EmulatedUdpSocket {
    /// Binds a real tokio UDP socket on `addr` (e.g. `127.0.0.1:0`), registers its local
    /// address in `map` under `cluster`, and starts its sender thread; default queue limits.
    ///
    /// Must be called inside a tokio runtime (the receive side is registered with it).
    /// The delayed sends leave from the network's wire thread (started with its first
    /// socket; see `wire.rs`). Fails if
    /// there is none, if `cluster` is out of range for the topology, or if binding fails.
    pub fn bind(
        addr: SocketAddr,
        map: Arc<LatencyMap>,
        cluster: usize,
    ) -> io::Result<Arc<EmulatedUdpSocket>> {
        Self::bind_with_limits(addr, map, cluster, QueueLimits::default())
    }

    /// [`EmulatedUdpSocket::bind`] with explicit delay-queue bounds.
    pub fn bind_with_limits(
        addr: SocketAddr,
        map: Arc<LatencyMap>,
        cluster: usize,
        limits: QueueLimits,
    ) -> io::Result<Arc<EmulatedUdpSocket>> {
        tokio::runtime::Handle::try_current()
            .map_err(|_| io::Error::other("EmulatedUdpSocket::bind needs a tokio runtime"))?;
        let clusters = map.topology().clusters.len();
        if cluster >= clusters {
            // Checked before binding so that a bad index does not leave a port bound.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cluster {cluster} out of range: topology has {clusters} clusters"),
            ));
        }
        let mut queue = DelayQueue::new(limits);
        queue.nic = map.nic(cluster);
        let std_socket = std::net::UdpSocket::bind(addr)?;
        std_socket.set_nonblocking(true)?;
        super::sockbuf::enlarge(&std_socket);
        // The same socket (a second descriptor, also non-blocking) for the wire thread.
        let send_socket = std_socket.try_clone()?;
        let io = Arc::new(UdpSocket::from_std(std_socket)?);
        let registered = registered_addr(io.local_addr()?);
        let shared = Arc::new(Shared {
            queue: Mutex::new(queue),
            io: send_socket,
        });
        map.wire()?;
        map.register(registered, cluster)?;
        Ok(Arc::new(EmulatedUdpSocket {
            io,
            registered,
            cluster,
            map,
            shared,
        }))
    }

    /// The address this socket is registered under in its [`LatencyMap`].
    pub fn registered_addr(&self) -> SocketAddr {
        self.registered
    }

    /// The cluster this socket was bound in.
    pub fn cluster(&self) -> usize {
        self.cluster
    }

    /// The map this socket looks latencies up in.
    pub fn map(&self) -> &Arc<LatencyMap> {
        &self.map
    }

    /// Datagrams currently held in the delay queue.
    pub fn queued(&self) -> usize {
        self.shared.queue().len()
    }

    /// Datagrams dropped so far because the delay queue was full or, when bandwidth is
    /// emulated, because the NIC's or the link's buffer was.
    pub fn dropped(&self) -> u64 {
        self.shared.queue().dropped
    }
}

impl Drop for EmulatedUdpSocket {
    fn drop(&mut self) {
        self.map.unregister(self.registered);
        // Datagrams already queued are "on the wire": the wire still sends them (its tokens
        // hold the queue and the descriptor).
    }
}

/// Peers on this host reach a socket bound to an unspecified IP through loopback.
fn registered_addr(bound: SocketAddr) -> SocketAddr {
    match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, bound.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, bound.port()).into(),
        _ => bound,
    }
}

/// Never blocks: sends are queued, so the socket is always writable.
#[derive(Debug)]
struct AlwaysWritable;

impl UdpPoller for AlwaysWritable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncUdpSocket for EmulatedUdpSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(AlwaysWritable)
    }

    /// Queues the datagram(s) of `transmit` for the one-way latency to its destination
    /// (none, logged at debug, if the destination is not registered); never blocks and
    /// never fails: a full queue drops, as a router would.
    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let dest = transmit.destination;
        let from = self.registered;
        if self.map.is_cut(from, dest) {
            return Ok(());
        }
        let (latency, link, known) = match self.map.route(from, dest) {
            Some(r) => (r.latency, r.link, true),
            None => {
                tracing::debug!(%from, %dest, "emulated socket: unknown destination, no delay");
                (Duration::ZERO, None, false)
            }
        };
        // We report one segment per transmit, so quinn does not set `segment_size`; split
        // anyway in case a caller does, so each datagram keeps its own boundary.
        let segment = transmit
            .segment_size
            .unwrap_or(transmit.contents.len())
            .max(1);
        let now = Instant::now();
        let mut new_head: Option<Instant> = None;
        let mut dropped = 0usize;
        {
            let mut queue = self.shared.queue();
            for chunk in transmit.contents.chunks(segment) {
                // A destination outside the map passes no pipe either: it is not emulated.
                let left = if known {
                    queue.serialize(now, chunk.len(), link)
                } else {
                    Some(now)
                };
                let Some(left) = left else {
                    dropped += 1;
                    continue;
                };
                let delay = (left - now) + latency;
                match queue.push(now, delay, dest, chunk) {
                    // A new head needs a token; the wire wakes only if it is its earliest.
                    Some(due) if queue.next_due() == Some(due) => new_head = Some(due),
                    Some(_) => {}
                    None => dropped += 1,
                }
            }
        }
        if dropped > 0 {
            tracing::trace!(%dest, dropped, "emulated socket: queue or pipe full, dropped");
        }
        if let Some(due) = new_head
            && let Some(wire) = self.map.wire.get()
        {
            wire.schedule(due, self.shared.clone());
        }
        Ok(())
    }

    /// Plain UDP receive: one datagram per buffer, as many as are ready (up to the batch).
    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let max = bufs.len().min(meta.len());
        if max == 0 {
            return Poll::Ready(Ok(0));
        }
        // Wait for the first datagram (registering the waker), then take what else is ready.
        loop {
            ready!(self.io.poll_recv_ready(cx))?;
            match self.io.try_recv_from(&mut bufs[0]) {
                Ok((len, addr)) => {
                    meta[0] = datagram_meta(len, addr);
                    break;
                }
                // Spurious readiness: readiness is cleared, poll again to re-register.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        let mut n = 1;
        while n < max {
            match self.io.try_recv_from(&mut bufs[n]) {
                Ok((len, addr)) => {
                    meta[n] = datagram_meta(len, addr);
                    n += 1;
                }
                // Deliver what we have; an error other than WouldBlock is reported by the
                // next receive if it persists.
                Err(_) => break,
            }
        }
        Poll::Ready(Ok(n))
    }

    /// The real bound address (what quinn reports as the endpoint's local address).
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    /// One datagram per transmit: no GSO, so every datagram gets its own due time.
    fn max_transmit_segments(&self) -> usize {
        1
    }

    /// One datagram per receive buffer: GRO is not enabled on the socket.
    fn max_receive_segments(&self) -> usize {
        1
    }

    /// The plain socket does not set don't-fragment, so quinn keeps path MTU discovery off
    /// and stays at its initial MTU (1200 bytes): fine for latency, not for peak throughput.
    fn may_fragment(&self) -> bool {
        true
    }
}

/// Metadata of one plain datagram (no GRO, no ECN, no destination-IP control message).
fn datagram_meta(len: usize, addr: SocketAddr) -> RecvMeta {
    RecvMeta {
        addr,
        len,
        stride: len,
        ecn: None,
        dst_ip: None,
    }
}

/// Convenience: a quinn Endpoint on an emulated socket (see [`EmulatedUdpSocket::bind`]),
/// a server if `server_config` is given, on the tokio runtime.
pub fn endpoint(
    addr: SocketAddr,
    map: Arc<LatencyMap>,
    cluster: usize,
    server_config: Option<quinn::ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    super::endpoint_on(EmulatedUdpSocket::bind(addr, map, cluster)?, server_config)
}

#[cfg(test)]
mod tests;
