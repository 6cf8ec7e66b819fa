//! A P-LogP-style cost model (Kielmann et al.): per cluster pair a latency L and a gap
//! g(m) = overhead + m / bandwidth per message of m bytes. Enough to tell when striping
//! over several trees beats the widest single tree: striping divides the streaming time
//! but its trees may be deeper (more latency, longer pipeline fill), so small messages
//! keep one tree and large ones stripe.

use super::{Arborescence, ClusterGraph};

/// A fresh QUIC path's congestion window, bytes (quinn's default initial window: ten
/// 1200-byte datagrams' worth with headers, at least 14,720 bytes).
pub const INITIAL_WINDOW: f64 = 14_720.0;

/// How long a stream over `tree` runs below the tree's rate while congestion control opens
/// the window of its longest hop: slow start doubles the window once per round trip from
/// [`INITIAL_WINDOW`] to the path's bandwidth-delay product, and a relay's onward path
/// is as new as the first (each stripe of a broadcast is its own short burst, so the
/// windows of its paths seldom stay open). Over das-4's 3-7 ms round trips this is a few
/// milliseconds; over a 300 ms round trip at 20 Mbit/s, 1.7 s, which moves the crossover
/// from a few hundred KiB to several MiB (field-station, measured over QUIC).
///
/// The window is the connection's, not the tree's: a hop's ramp is to the product of the
/// arc's capacity (what the connection ends up carrying, every stripe over it together)
/// and its round trip, so a slow tree sharing a hop with fast ones ramps as long as they
/// do (taken at its own rate, a 0.08 Mbit/s tree looked ready at once and made striping
/// look faster than one tree at 1 KiB).
pub fn ramp_s(g: &ClusterGraph, tree: &Arborescence) -> f64 {
    tree.arcs()
        .map(|(p, c)| {
            let rtt = 2.0 * g.latency(p, c) as f64 * 1e-6;
            let bdp = g.cap(p, c) * rtt / 8.0;
            rtt * (bdp / INITIAL_WINDOW).max(1.0).log2()
        })
        .fold(0.0, f64::max)
}

/// Gap of one message of `bytes` at `bps` plus a fixed per-message overhead: the time a
/// sender is busy per message. Infinite if `bps` is not positive (no link).
pub fn gap_s(bytes: f64, bps: f64, overhead_s: f64) -> f64 {
    if bps.is_nan() || bps <= 0.0 {
        return f64::INFINITY;
    }
    overhead(overhead_s) + bytes.max(0.0) * 8.0 / bps
}

/// The overhead, with nonsense (negative, NaN, infinite) read as none.
fn overhead(overhead_s: f64) -> f64 {
    if overhead_s.is_finite() && overhead_s > 0.0 {
        overhead_s
    } else {
        0.0
    }
}

/// Predicted time of a pipelined transfer of `bytes` over one tree in segments of
/// `segment` bytes (0: one segment): the depth latency, plus the bottleneck streaming the
/// whole payload (one gap per segment at the tree's rate), plus one segment's gap per extra
/// hop to fill the pipeline. Infinite if the tree has no positive rate.
pub fn predict_tree_s(
    g: &ClusterGraph,
    tree: &Arborescence,
    bytes: u64,
    segment: u64,
    overhead_s: f64,
) -> f64 {
    predict_share(g, tree, bytes as f64, segment, overhead_s)
}

/// [`predict_tree_s`] for a fractional share of the payload.
fn predict_share(
    g: &ClusterGraph,
    tree: &Arborescence,
    bytes: f64,
    segment: u64,
    overhead_s: f64,
) -> f64 {
    let rate = tree.rate_bps;
    if rate.is_nan() || rate <= 0.0 {
        return f64::INFINITY;
    }
    let latency = tree.depth_latency_us(g) as f64 * 1e-6;
    if bytes.is_nan() || bytes <= 0.0 {
        return latency;
    }
    let latency = latency + ramp_s(g, tree);
    let seg = if segment == 0 {
        bytes
    } else {
        (segment as f64).min(bytes)
    };
    let segments = (bytes / seg).ceil();
    let stream = segments * overhead(overhead_s) + bytes * 8.0 / rate;
    let fill = tree.hops().saturating_sub(1) as f64 * gap_s(seg, rate, overhead_s);
    latency + stream + fill
}

/// Predicted time of a striped transfer handed out as the trees free up (earliest finish,
/// as the driver's schedule does): each tree starts streaming once its first segment has
/// crossed its depth (latency plus the pipeline fill of [`predict_tree_s`]) and then
/// carries bits at its rate, less the per-segment overhead; the payload is done at the
/// time T where the trees together have carried it (water-filling: a tree whose start
/// comes after T carries nothing, so a slow, deep tree never makes striping look slower
/// than leaving it out). Trees without a positive rate get nothing; infinite if none has
/// one.
pub fn predict_striped_s(
    g: &ClusterGraph,
    trees: &[Arborescence],
    bytes: u64,
    segment: u64,
    overhead_s: f64,
) -> f64 {
    let usable: Vec<&Arborescence> = trees.iter().filter(|t| t.rate_bps > 0.0).collect();
    if let Some(t) = usable.iter().find(|t| t.rate_bps.is_infinite()) {
        // An infinite rate (nothing crosses the wide area) takes the whole payload.
        return predict_share(g, t, bytes as f64, segment, overhead_s);
    }
    if usable.is_empty() {
        return f64::INFINITY;
    }
    if bytes == 0 {
        // Nothing to carry: the tree that gets there first.
        return usable
            .iter()
            .map(|t| predict_share(g, t, 0.0, segment, overhead_s))
            .fold(f64::INFINITY, f64::min);
    }
    let seg = if segment == 0 {
        bytes
    } else {
        segment.min(bytes)
    } as f64;
    // (start, bits per second carried once started) per tree, earliest start first.
    let mut lanes: Vec<(f64, f64)> = usable
        .iter()
        .map(|t| {
            let rate = t.rate_bps;
            let latency = t.depth_latency_us(g) as f64 * 1e-6 + ramp_s(g, t);
            let fill = t.hops().saturating_sub(1) as f64 * gap_s(seg, rate, overhead_s);
            let per_bit = 1.0 / rate + overhead(overhead_s) / (seg * 8.0);
            (latency + fill, 1.0 / per_bit)
        })
        .collect();
    lanes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let bits = bytes as f64 * 8.0;
    let (mut rate, mut weighted) = (0.0, 0.0);
    let mut done = f64::INFINITY;
    for (i, &(start, r)) in lanes.iter().enumerate() {
        rate += r;
        weighted += r * start;
        // With lanes 0..=i streaming: bits = sum r (T - start).
        let t = (bits + weighted) / rate;
        let next = lanes.get(i + 1).map_or(f64::INFINITY, |l| l.0);
        if t <= next {
            done = t;
            break;
        }
    }
    done
}

/// The smallest size in `[lo, hi]` from which `striped` is predicted faster than `single`,
/// by bisection (the difference is taken as monotone in the size); `None` if striping is
/// not faster at `hi` (or `lo > hi`). Derived from the model, so it moves with the
/// measured latencies and rates instead of being a tuned constant.
pub fn crossover_bytes(
    single: impl Fn(u64) -> f64,
    striped: impl Fn(u64) -> f64,
    lo: u64,
    hi: u64,
) -> Option<u64> {
    let faster = |x: u64| striped(x) < single(x);
    if lo > hi || !faster(hi) {
        return None;
    }
    if faster(lo) {
        return Some(lo);
    }
    let (mut slow, mut fast) = (lo, hi);
    while fast - slow > 1 {
        let mid = slow + (fast - slow) / 2;
        if faster(mid) {
            fast = mid;
        } else {
            slow = mid;
        }
    }
    Some(fast)
}
