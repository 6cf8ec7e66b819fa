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
mod queue;
mod udp;
mod wire;

pub use self::queue::QueueLimits;
pub use self::wire::WireLateness;

use self::pipe::Pipe;
use self::queue::{Datagram, DelayQueue};
use crate::topology::Topology;
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::Duration;
use tokio::net::UdpSocket;

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
    /// What every socket on the map has sent: UDP payload bytes (QUIC's packets whole:
    /// headers, acknowledgements and all frames) and datagrams.
    sent: WireSent,
}

/// Bytes and datagrams the sockets of one map have handed to the network.
#[derive(Default)]
struct WireSent {
    bytes: AtomicU64,
    datagrams: AtomicU64,
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
            sent: WireSent::default(),
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
            sent: WireSent::default(),
        })
    }

    /// Sets the directed link from cluster `from` to cluster `to` to `mbit` Mbit/s from now
    /// on (a link whose rate changed under the overlay, e.g. another tenant's traffic or a
    /// reroute); datagrams already on their way keep their times. False if the map does
    /// not emulate bandwidth, the link had no rate in the file, or `mbit` is not a rate.
    pub fn set_link_mbit(&self, from: usize, to: usize, mbit: f64) -> bool {
        let n = self.topology.clusters.len();
        if from >= n || to >= n || from == to {
            return false;
        }
        match (self.links.get(from * n + to), Pipe::with_rate(mbit)) {
            (Some(Some(link)), Some(pipe)) => {
                *link.lock().unwrap_or_else(PoisonError::into_inner) = pipe;
                true
            }
            _ => false,
        }
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

    /// UDP payload bytes and datagrams every socket on this map has sent so far (to cut
    /// off or unknown peers too): what the nodes put on the network, QUIC's headers and
    /// acknowledgements included, IP and UDP headers not (28 bytes a datagram over IPv4).
    pub fn sent(&self) -> (u64, u64) {
        (
            self.sent.bytes.load(Ordering::Relaxed),
            self.sent.datagrams.load(Ordering::Relaxed),
        )
    }

    /// Counts a datagram of `len` bytes sent by a socket of this map.
    fn count_sent(&self, len: usize) {
        self.sent.bytes.fetch_add(len as u64, Ordering::Relaxed);
        self.sent.datagrams.fetch_add(1, Ordering::Relaxed);
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
