//! `overlay-netns wan`: the userspace WAN emulator.
//!
//! The router namespace routes every packet that arrives from a cluster into a TUN device
//! (policy routing: `ip rule add iif rN lookup 100`, table 100 `default dev tun0`). This
//! program reads each packet from the TUN, finds the source and destination clusters from
//! the addresses (cluster `i` is `10.77.{i+1}.0/24`), holds the packet for the one-way
//! latency between them and writes it back; the kernel then routes it (input interface
//! tun0, main table) out to the destination cluster, where tbf/htb applies the bandwidth.
//!
//! Two threads: one reads and stamps each packet with its release time, the other sleeps
//! until the earliest release time and writes. Packets are released in deadline order and,
//! for equal deadlines, in arrival order, so a flow between two clusters is never reordered.
//! Packets that are not IPv4 between two known clusters pass without delay.

use crate::loss::LossTable;
use anyhow::{Context, bail};
use overlay::testbed::cluster_of_ip;
use overlay::topology::Topology;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Options of `wan`.
#[derive(clap::Args, Debug)]
pub struct WanArgs {
    /// The TUN device to attach to (created beforehand with `ip tuntap add ... mode tun`).
    #[arg(long, default_value = "tun0")]
    tun: String,
    /// Topology file: the one-way latency of every pair of clusters.
    #[arg(long, value_name = "FILE")]
    topology: PathBuf,
    /// Packet loss between clusters, read again whenever it changes (`A B PERCENT` lines;
    /// see `netns-scripts/loss`).
    #[arg(long, value_name = "FILE")]
    loss_file: Option<PathBuf>,
    /// Most packets held at once; more are dropped (a router's buffer).
    #[arg(long, default_value_t = 100_000)]
    max_queue: usize,
    /// Seconds between two statistics lines on stderr (0: none).
    #[arg(long, default_value_t = 30)]
    stats_every: u64,
    /// Run at normal priority. By default the emulator asks for real-time scheduling
    /// (SCHED_FIFO, falling back to nice -10): it stands for the network, and on a busy
    /// machine a descheduled emulator would add milliseconds to every packet.
    #[arg(long)]
    normal_priority: bool,
}

/// Raises the calling thread's priority; says what it got.
fn raise_priority() -> String {
    // SAFETY: sched_setscheduler and setpriority read one small struct / integers we own.
    unsafe {
        let param = libc::sched_param { sched_priority: 10 };
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 {
            return "SCHED_FIFO 10".into();
        }
        if libc::setpriority(libc::PRIO_PROCESS, 0, -10) == 0 {
            return "nice -10 (no real-time scheduling allowed)".into();
        }
    }
    format!("normal priority ({})", std::io::Error::last_os_error())
}

/// One held packet.
struct Held {
    at: Instant,
    seq: u64,
    packet: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    /// Reversed, so the max-heap pops the earliest deadline (then the earliest arrival).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Packets waiting for their release time.
#[derive(Default)]
pub struct DelayQueue {
    heap: BinaryHeap<Held>,
    next_seq: u64,
}

impl DelayQueue {
    /// Holds `packet` until `at`.
    pub fn push(&mut self, at: Instant, packet: Vec<u8>) {
        self.heap.push(Held {
            at,
            seq: self.next_seq,
            packet,
        });
        self.next_seq += 1;
    }

    /// Earliest release time, if any packet is held.
    pub fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|h| h.at)
    }

    /// Moves every packet due at `now` into `out`, earliest first; returns how late they
    /// are released (now - release time).
    pub fn pop_due(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) -> Lateness {
        let mut late = Lateness::default();
        while self.heap.peek().is_some_and(|h| h.at <= now) {
            let h = self.heap.pop().expect("peeked");
            late.add(now - h.at);
            out.push(h.packet);
        }
        late
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }
}

/// How late a batch of packets was released.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lateness {
    /// Packets.
    pub count: u64,
    /// Largest lateness.
    pub max: Duration,
    /// Sum over the packets (for the mean).
    pub total: Duration,
    /// Packets released more than 1 ms late.
    pub over_1ms: u64,
}

impl Lateness {
    fn add(&mut self, late: Duration) {
        self.count += 1;
        self.max = self.max.max(late);
        self.total += late;
        self.over_1ms += u64::from(late > Duration::from_millis(1));
    }
}

/// One-way delay for every ordered pair of clusters, and the address-to-cluster map.
pub struct Delays {
    clusters: usize,
    matrix: Vec<Duration>,
}

impl Delays {
    pub fn from_topology(t: &Topology) -> Delays {
        let k = t.clusters.len();
        let mut matrix = Vec::with_capacity(k * k);
        for a in 0..k {
            for b in 0..k {
                matrix.push(t.latency(a, b));
            }
        }
        Delays {
            clusters: k,
            matrix,
        }
    }

    /// Source and destination clusters of an IPv4 packet, when both are testbed clusters.
    pub fn pair(&self, packet: &[u8]) -> Option<(usize, usize)> {
        if packet.len() < 20 || packet[0] >> 4 != 4 {
            return None;
        }
        let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
        let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
        Some((
            cluster_of_ip(src, self.clusters)?,
            cluster_of_ip(dst, self.clusters)?,
        ))
    }

    /// How long to hold `packet`.
    pub fn delay(&self, packet: &[u8]) -> Duration {
        self.pair(packet)
            .map_or(Duration::ZERO, |(a, b)| self.matrix[a * self.clusters + b])
    }
}

/// Attaches to the TUN device `name` (no packet-information header).
fn open_tun(name: &str) -> anyhow::Result<File> {
    const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
    const IFF_TUN: libc::c_short = 0x0001;
    const IFF_NO_PI: libc::c_short = 0x1000;
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        bail!("bad TUN device name {name:?}");
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .context("opening /dev/net/tun (is the tun driver available?)")?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which IfReq lays out (16-byte
    // name, then the flags in a 24-byte union); the pointer is valid for the whole call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            "attaching to TUN device {name}: {e} (create it with `ip tuntap add dev {name} mode tun`)"
        );
    }
    Ok(file)
}

/// Counters shared by the two threads.
#[derive(Default)]
struct Stats {
    read: AtomicU64,
    delayed: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
    lost: AtomicU64,
    write_errors: AtomicU64,
    max_late_us: AtomicU64,
    total_late_us: AtomicU64,
    late_over_1ms: AtomicU64,
    max_queue: AtomicU64,
}

pub fn run(args: WanArgs) -> anyhow::Result<ExitCode> {
    let topology = Topology::load(&args.topology)?;
    let delays = Delays::from_topology(&topology);
    let tun = Arc::new(open_tun(&args.tun)?);
    // Sleep as precisely as the kernel allows: the default timer slack is 50 us.
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    let shared = Arc::new((Mutex::new(DelayQueue::default()), Condvar::new()));
    let stats = Arc::new(Stats::default());
    // Set before the reader is spawned, so both threads inherit it.
    let priority = if args.normal_priority {
        "normal priority".to_string()
    } else {
        raise_priority()
    };
    eprintln!(
        "wan emulator ready on {}: {} clusters of {}, one-way delays from the topology, {priority}",
        args.tun,
        topology.clusters.len(),
        topology.name
    );

    let reader = {
        let (tun, shared, stats) = (tun.clone(), shared.clone(), stats.clone());
        let max_queue = args.max_queue;
        let mut loss = LossTable::new(args.loss_file.clone(), &topology);
        std::thread::Builder::new().name("wan-read".into()).spawn(
            move || -> anyhow::Result<()> {
                let mut buf = vec![0u8; 65_536];
                loop {
                    let n = (&*tun).read(&mut buf).context("reading from the TUN")?;
                    let now = Instant::now();
                    stats.read.fetch_add(1, Ordering::Relaxed);
                    if let Some(line) = loss.refresh(now) {
                        eprintln!("{line}");
                    }
                    let pair = delays.pair(&buf[..n]);
                    if pair.is_some_and(|(from, to)| loss.drops(from, to)) {
                        stats.lost.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let delay = delays.delay(&buf[..n]);
                    if !delay.is_zero() {
                        stats.delayed.fetch_add(1, Ordering::Relaxed);
                    }
                    let (queue, wake) = &*shared;
                    let mut q = queue.lock().expect("queue lock");
                    if q.len() >= max_queue {
                        stats.dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let earliest = q.next_at();
                    q.push(now + delay, buf[..n].to_vec());
                    stats.max_queue.fetch_max(q.len() as u64, Ordering::Relaxed);
                    if earliest.is_none_or(|e| now + delay < e) {
                        wake.notify_one();
                    }
                }
            },
        )?
    };

    let mut due = Vec::new();
    let mut last_stats = Instant::now();
    let mut written_before = 0;
    let every = Duration::from_secs(args.stats_every);
    loop {
        {
            let (queue, wake) = &*shared;
            let mut q = queue.lock().expect("queue lock");
            loop {
                let now = Instant::now();
                match q.next_at() {
                    Some(at) if at <= now => break,
                    Some(at) => q = wake.wait_timeout(q, at - now).expect("queue lock").0,
                    None => {
                        q = wake
                            .wait_timeout(q, Duration::from_secs(1))
                            .expect("queue lock")
                            .0
                    }
                }
                if reader.is_finished() {
                    break;
                }
            }
            let late = q.pop_due(Instant::now(), &mut due);
            stats
                .max_late_us
                .fetch_max(late.max.as_micros() as u64, Ordering::Relaxed);
            stats
                .total_late_us
                .fetch_add(late.total.as_micros() as u64, Ordering::Relaxed);
            stats
                .late_over_1ms
                .fetch_add(late.over_1ms, Ordering::Relaxed);
        }
        if reader.is_finished() {
            return match reader.join() {
                Ok(Err(e)) => Err(e),
                _ => bail!("the TUN reader stopped"),
            };
        }
        for packet in due.drain(..) {
            // A TUN takes one whole packet per write, or none.
            match (&*tun).write(&packet) {
                Ok(n) if n == packet.len() => stats.written.fetch_add(1, Ordering::Relaxed),
                _ => stats.write_errors.fetch_add(1, Ordering::Relaxed),
            };
        }
        if !every.is_zero() && last_stats.elapsed() >= every {
            last_stats = Instant::now();
            let written = stats.written.load(Ordering::Relaxed);
            eprintln!(
                "wan: read {} (delayed {}), written {}, dropped {} (queue full), lost {} (loss set), write errors {}, max queue {}; released late: mean {:.0} us, {} packets by more than 1 ms, max {} us (since the last line)",
                stats.read.load(Ordering::Relaxed),
                stats.delayed.load(Ordering::Relaxed),
                written,
                stats.dropped.load(Ordering::Relaxed),
                stats.lost.load(Ordering::Relaxed),
                stats.write_errors.load(Ordering::Relaxed),
                stats.max_queue.load(Ordering::Relaxed),
                stats.total_late_us.swap(0, Ordering::Relaxed) as f64
                    / (written - written_before).max(1) as f64,
                stats.late_over_1ms.swap(0, Ordering::Relaxed),
                stats.max_late_us.swap(0, Ordering::Relaxed),
            );
            written_before = written;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn delay_by_cluster_pair() {
        let d = Delays::from_topology(&Topology::builtin("das-4").unwrap());
        let ms = |x: f64| Duration::from_secs_f64(x / 1e3);
        // VU (10.77.1.x) -> Leiden (10.77.2.x): 3.5 ms; Leiden -> Delft: 4 ms.
        assert_eq!(d.delay(&ipv4([10, 77, 1, 2], [10, 77, 2, 3])), ms(3.5));
        assert_eq!(d.delay(&ipv4([10, 77, 2, 9], [10, 77, 4, 2])), ms(4.0));
        // Unknown addresses, too short, IPv6: no delay.
        assert_eq!(
            d.delay(&ipv4([10, 77, 9, 2], [10, 77, 2, 3])),
            Duration::ZERO
        );
        assert_eq!(
            d.delay(&ipv4([192, 168, 1, 2], [10, 77, 2, 3])),
            Duration::ZERO
        );
        assert_eq!(d.delay(&[0x45; 10]), Duration::ZERO);
        let mut v6 = ipv4([10, 77, 1, 2], [10, 77, 2, 3]);
        v6[0] = 0x60;
        assert_eq!(d.delay(&v6), Duration::ZERO);
    }

    #[test]
    fn queue_releases_in_deadline_then_arrival_order() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut q = DelayQueue::default();
        q.push(at(5), vec![1]);
        q.push(at(2), vec![2]);
        q.push(at(5), vec![3]);
        q.push(at(9), vec![4]);
        assert_eq!(q.next_at(), Some(at(2)));
        let mut out = Vec::new();
        assert_eq!(q.pop_due(at(1), &mut out), Lateness::default());
        assert!(out.is_empty());
        let late = q.pop_due(at(6), &mut out);
        assert_eq!(out, vec![vec![2], vec![1], vec![3]]);
        assert_eq!(late.count, 3);
        assert_eq!(late.max, Duration::from_millis(4));
        assert_eq!(late.total, Duration::from_millis(4 + 1 + 1));
        assert_eq!(late.over_1ms, 1);
        assert_eq!(q.len(), 1);
        assert_eq!(q.next_at(), Some(at(9)));
    }
}
