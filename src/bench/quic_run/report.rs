//! Reading a run's results: per-contender summaries, paired comparisons, the slowest
//! deliveries and the JSON report.

use super::{MAX_TRIES, QuicRun, Times, WIRE_LATE_LIMIT_US};
use crate::bench::quantile;
use crate::proto::Config;
use std::collections::HashMap;

/// One line on the emulation's error from a run's `wire_lateness` JSON: the redo rule, and
/// per contender the broadcasts run again, those kept late, and the latest send.
pub fn lateness_summary(wl: &serde_json::Value) -> String {
    let per: Vec<String> = (wl["contenders"].as_array().into_iter().flatten())
        .map(|c| {
            format!(
                "{} {} redone, {} kept late, {} of {} datagrams over 1 ms late, max {:.1} ms",
                c["name"].as_str().unwrap_or(""),
                c["redone"],
                c["disturbed"],
                c["over_1ms"],
                c["sent"],
                c["max_ms"].as_f64().unwrap_or(f64::NAN)
            )
        })
        .collect();
    format!(
        "a timed broadcast during which the emulated wire sent a datagram more than {} ms after its due time is run again, {} tries at most; {}",
        wl["limit_ms"],
        wl["max_tries"],
        per.join("; ")
    )
}

/// The `k` slowest deliveries of a contender: (ms, root, node, root's cluster, node's
/// cluster), slowest first. The maximum is one of them; they tell whether it is one
/// straggler (a retransmission) or a pattern.
pub fn slowest(t: &Times, k: usize) -> Vec<(f64, usize, usize, usize, usize)> {
    let mut v: Vec<(f64, usize, usize, usize, usize)> = (t.ms.iter().zip(&t.pairs))
        .zip(&t.clusters)
        .map(|((m, p), c)| (*m, p.0, p.1, c.0, c.1))
        .collect();
    v.sort_by(|a, b| b.0.total_cmp(&a.0));
    v.truncate(k);
    v
}

/// (median, max) of a contender's times.
fn summary(t: &Times) -> (f64, f64) {
    let mut v = t.ms.clone();
    v.sort_by(f64::total_cmp);
    (quantile(&v, 0.5), v.last().copied().unwrap_or(f64::NAN))
}

/// (median, max) over (root, node) pairs of each pair's median over the rounds: one lost
/// datagram's retransmission in one round no longer decides the maximum.
fn per_pair_summary(t: &Times) -> (f64, f64) {
    let mut by_pair: HashMap<(usize, usize), Vec<f64>> = HashMap::new();
    for (m, p) in t.ms.iter().zip(&t.pairs) {
        by_pair.entry(*p).or_default().push(*m);
    }
    let mut medians: Vec<f64> = by_pair
        .into_values()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            quantile(&v, 0.5)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    (
        quantile(&medians, 0.5),
        medians.last().copied().unwrap_or(f64::NAN),
    )
}

/// Each (root, node) pair's median over the rounds.
fn pair_medians(t: &Times) -> HashMap<(usize, usize), f64> {
    let mut by_pair: HashMap<(usize, usize), Vec<f64>> = HashMap::new();
    for (m, p) in t.ms.iter().zip(&t.pairs) {
        by_pair.entry(*p).or_default().push(*m);
    }
    by_pair
        .into_iter()
        .map(|(p, mut v)| {
            v.sort_by(f64::total_cmp);
            (p, quantile(&v, 0.5))
        })
        .collect()
}

/// Of the (root, node) pairs both reached, the share where `a`'s median over the rounds is
/// below `b`'s: a paired comparison, which no single slow or fast sample decides.
pub fn share_faster(a: &Times, b: &Times) -> f64 {
    let (a, b) = (pair_medians(a), pair_medians(b));
    let both: Vec<(f64, f64)> = a
        .iter()
        .filter_map(|(p, x)| b.get(p).map(|y| (*x, *y)))
        .collect();
    let faster = both.iter().filter(|(x, y)| x < y).count();
    faster as f64 / both.len().max(1) as f64
}

impl QuicRun {
    /// The contenders in table order, with their names.
    pub fn contenders(&self) -> [(&'static str, &Times); 4] {
        [
            ("unaware binomial", &self.unaware),
            ("static MagPIe", &self.magpie),
            ("ours", &self.ours),
            ("lower bound", &self.bound),
        ]
    }

    /// The results as one JSON object (`benchmark: "quic"`).
    /// Per (root's cluster, node's cluster): each contender's median, ms (where ours wins
    /// and loses).
    pub fn per_cluster(&self) -> Vec<((usize, usize), [f64; 4])> {
        let mut pairs: Vec<(usize, usize)> = self.bound.clusters.clone();
        pairs.sort_unstable();
        pairs.dedup();
        pairs
            .into_iter()
            .map(|pair| {
                let median = |t: &Times| {
                    let mut v: Vec<f64> = (t.ms.iter().zip(&t.clusters))
                        .filter(|(_, c)| **c == pair)
                        .map(|(m, _)| *m)
                        .collect();
                    v.sort_by(f64::total_cmp);
                    quantile(&v, 0.5)
                };
                let c = self.contenders();
                (
                    pair,
                    [
                        median(c[0].1),
                        median(c[1].1),
                        median(c[2].1),
                        median(c[3].1),
                    ],
                )
            })
            .collect()
    }

    pub fn to_json(&self, topology: &str, slowdown: u32) -> serde_json::Value {
        use serde_json::json;
        let s: Vec<(f64, f64)> = self.contenders().iter().map(|(_, t)| summary(t)).collect();
        let ratio =
            |other: usize| json!({"median": s[2].0 / s[other].0, "max": s[2].1 / s[other].1});
        let p: Vec<(f64, f64)> = (self.contenders().iter())
            .map(|(_, t)| per_pair_summary(t))
            .collect();
        let again = summary(&self.magpie_again);
        let late: Vec<serde_json::Value> = [
            ("ours", &self.ours),
            ("static MagPIe", &self.magpie),
            ("MagPIe again", &self.magpie_again),
            ("unaware binomial", &self.unaware),
        ]
        .iter()
        .map(|(name, t)| {
            json!({"name": name, "sent": t.wire.sent, "over_1ms": t.wire.over_1ms,
                "over_5ms": t.wire.over_5ms, "max_ms": t.wire.max_us as f64 / 1e3,
                "redone": t.redone, "disturbed": t.disturbed})
        })
        .collect();
        let again_pp = per_pair_summary(&self.magpie_again);
        json!({
            "benchmark": "quic",
            "topology": topology,
            "nodes": self.nodes,
            "slowdown": slowdown,
            "dilation": self.dilation.max(1),
            "roots": self.roots.len(),
            "contenders": self.contenders().iter().zip(&s).map(|((name, t), (med, max))| json!({
                "name": name, "median_ms": med, "max_ms": max, "missed": t.missed})).collect::<Vec<_>>(),
            "ratio_vs_static": ratio(1),
            "ratio_vs_unaware": ratio(0),
            "ratio_vs_bound": ratio(3),
            "noise_floor": {
                "note": "the static MagPIe tree against itself (run twice per round): how far two runs of the same tree come out on this machine; ours against MagPIe means something only beyond this",
                "ratio_again_vs_static": {"median": again.0 / s[1].0, "max": again.1 / s[1].1},
                "per_pair_median": {"median": again_pp.0 / p[1].0, "max": again_pp.1 / p[1].1},
            },
            "pairs_faster": {
                "note": "share of (root, node) pairs whose median over the rounds is lower: ours against MagPIe, and MagPIe's second run against its first (0.5 is a tie)",
                "ours_vs_static": share_faster(&self.ours, &self.magpie),
                "again_vs_static": share_faster(&self.magpie_again, &self.magpie),
            },
            "per_pair_median": {
                "note": "supplementary: each (root, node) pair's median over the rounds first, then the median and max over the pairs",
                "ratio_vs_static": {"median": p[2].0 / p[1].0, "max": p[2].1 / p[1].1},
                "ratio_vs_bound": {"median": p[2].0 / p[3].0, "max": p[2].1 / p[3].1},
            },
            "slowest": self.contenders().iter().map(|(name, t)| json!({
                "name": name,
                "deliveries": slowest(t, 3).iter().map(|(m, r, v, cr, cv)| json!({
                    "ms": m, "root": r, "node": v, "root_cluster": cr, "node_cluster": cv})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "wire_lateness": {
                "note": "how late the emulated wire sent datagrams during each contender's kept timed broadcasts (the whole network's traffic): a stall of the emulation delays every datagram due meanwhile, whichever protocol sent it; a broadcast during which it was more than limit_ms late is run again (redone), up to max_tries in all (disturbed: kept after the last try)",
                "limit_ms": WIRE_LATE_LIMIT_US as f64 / 1e3,
                "max_tries": MAX_TRIES,
                "contenders": late,
            },
            "joined_s": self.started.as_secs_f64(),
            "converged_s": self.converged.map(|d| d.as_secs_f64()),
            "optimal_trees": self.optimal.0,
            "trees": self.optimal.1,
            "crashed": self.crashed,
            "repair_s": self.repaired.map(|d| d.as_secs_f64()),
            "steady_control": self.steady.as_ref().map(|t| json!({
                "note": "per node per second of the topology's time over a window right after convergence: frame_bytes is what the nodes handed their connections, bandwidth probes left out (the simulator's measure), by kind in by_kind_bytes (bandwidth probes under bandwidth); wire_bytes and wire_datagrams are what their sockets sent, QUIC's headers and acknowledgements and bandwidth probes included, IP and UDP headers not",
                "bytes_per_node_per_s": t.frame_bytes,
                "by_kind_bytes": t.by_kind,
                "wire_bytes_per_node_per_s": t.wire_bytes,
                "wire_datagrams_per_node_per_s": t.wire_datagrams,
                "window_s": t.window.as_secs_f64(),
            })),
            "topology_time": {
                "note": "convergence and repair divided by the time dilation: how long they take in the topology's own time (the wall-clock figures above are dilation times as long)",
                "joined_s": self.started.as_secs_f64() / f64::from(self.dilation.max(1)),
                "converged_s": self.converged.map(|d| d.as_secs_f64() / f64::from(self.dilation.max(1))),
                "repair_s": self.repaired.map(|d| d.as_secs_f64() / f64::from(self.dilation.max(1))),
            },
            "per_cluster_median_ms": self.per_cluster().iter().map(|((a, b), m)| json!({
                "root_cluster": a, "node_cluster": b, "unaware": m[0], "magpie": m[1], "ours": m[2], "bound": m[3]})).collect::<Vec<_>>(),
            "app_lag_us": {
                "note": "ours: from the connection's read to the application's delivery stream; every contender's times are at the connection",
                "median": quantile(&self.app_lag_us, 0.5),
                "p90": quantile(&self.app_lag_us, 0.9),
            },
            "send_cost_us": {
                "note": "ours: the cost of one send the in-cluster plans went by after the timed broadcasts, on the nodes that measured it (the others plan with the configured cost)",
                "measured_on": self.send_cost_us.len(),
                "configured": Config::wan().send_cost.as_micros() as f64,
                "median": quantile(&self.send_cost_us, 0.5),
                "max": self.send_cost_us.last().copied(),
            },
            "api_lag_us": {
                "note": "ours: from the application's broadcast call to its root's driver starting it; ours is timed from that start, as the static trees from their root's first send",
                "median": quantile(&self.api_lag_us, 0.5),
                "p90": quantile(&self.api_lag_us, 0.9),
            },
        })
    }
}
