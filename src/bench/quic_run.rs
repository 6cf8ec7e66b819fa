//! The real-QUIC benchmark run: every node of a topology a full [`crate::api::Node`] in
//! this process over the emulated-latency socket. One start gives three results:
//! convergence from a cold start, the Fig. 5 broadcast against static trees executed over
//! the same QUIC stack ([`super::quic_tree`]), and repair after a tenth of the nodes crash.

use super::quic_tree::StaticNet;
use super::quic_wait::wait;
use super::trees;
use crate::local::{LocalOptions, LocalOverlay};
use crate::net::emulated::WireLateness;
use crate::proto::{Config, NodeId};
use crate::topology::Topology;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod report;
mod steady;

pub use self::report::{lateness_summary, share_faster, slowest};
pub use self::steady::SteadyTraffic;

/// What to run.
#[derive(Clone, Debug)]
pub struct QuicRunOptions {
    /// The network and the nodes.
    pub topology: Topology,
    /// Both protocols' clocks slowed by this factor (see [`Config::slowed`]).
    pub slowdown: u32,
    /// Time dilation (1: none): the emulated network's latencies and every protocol clock
    /// and latency threshold multiplied by this factor ([`Topology::dilated`],
    /// [`Config::dilated`]), and every measured delivery time divided by it, so the
    /// results read in the topology's own time while each node gets this many times more
    /// CPU against the network. Convergence and repair are reported both ways.
    pub dilation: u32,
    /// Broadcast roots per cluster.
    pub roots_per_cluster: usize,
    /// Share of the non-root nodes crashed after the broadcasts.
    pub crash_fraction: f64,
    /// Longest wait for convergence, and for repair.
    pub timeout: Duration,
    /// Steady control traffic is measured over this much of the topology's time right
    /// after convergence (zero: not measured).
    pub overhead_window: Duration,
}

/// Per-node completion times (ms) of one contender, over all roots.
#[derive(Clone, Debug, Default)]
pub struct Times {
    /// One entry per (root, non-root node).
    pub ms: Vec<f64>,
    /// For each entry of `ms`: (root's cluster, node's cluster).
    pub clusters: Vec<(usize, usize)>,
    /// For each entry of `ms`: (root, node), as node indices.
    pub pairs: Vec<(usize, usize)>,
    /// Nodes not reached in time.
    pub missed: usize,
    /// How late the emulated wire sent datagrams during this contender's timed broadcasts
    /// (the whole network's, background traffic included): the emulation's own error.
    /// Of the kept broadcasts only.
    pub wire: WireLateness,
    /// Timed broadcasts run again because the wire ran late during them.
    pub redone: usize,
    /// Timed broadcasts kept although the wire ran late during every try.
    pub disturbed: usize,
}

impl Times {
    /// Appends `other`'s deliveries.
    fn append(&mut self, other: Times) {
        self.ms.extend(other.ms);
        self.clusters.extend(other.clusters);
        self.pairs.extend(other.pairs);
        self.missed += other.missed;
    }

    /// Times measured on a network dilated by `d` read in the undilated network's time.
    fn undilate(&mut self, d: u32) {
        for m in &mut self.ms {
            *m /= f64::from(d.max(1));
        }
    }

    /// Records one node's delivery of a broadcast from `root` (`None`: not reached).
    fn record(&mut self, root: usize, node: usize, clusters: &[usize], after: Option<Duration>) {
        match after {
            Some(t) => {
                self.ms.push(ms(t));
                self.clusters.push((clusters[root], clusters[node]));
                self.pairs.push((root, node));
            }
            None => self.missed += 1,
        }
    }
}

/// What the run measured.
#[derive(Clone, Debug, Default)]
pub struct QuicRun {
    /// Nodes started.
    pub nodes: usize,
    /// The time dilation the run used (1: none); see [`QuicRunOptions::dilation`].
    pub dilation: u32,
    /// From the first start until every node had joined.
    pub started: Duration,
    /// From the first start until every tree was wide-area optimal (and stayed so).
    pub converged: Option<Duration>,
    /// Trees wide-area optimal when the broadcasts began, of all trees.
    pub optimal: (usize, usize),
    /// Steady control traffic right after convergence, per node per second of the
    /// topology's time: frames by kind and datagrams on the network.
    pub steady: Option<SteadyTraffic>,
    /// The broadcast roots (node indices).
    pub roots: Vec<usize>,
    /// Our live trees.
    pub ours: Times,
    /// The static MagPIe tree over QUIC.
    pub magpie: Times,
    /// The topology-unaware binomial tree over QUIC.
    pub unaware: Times,
    /// The static MagPIe tree run a second time in every round: MagPIe against itself is
    /// the run's noise floor (how far apart two runs of the same tree come out).
    pub magpie_again: Times,
    /// The shortest-path one-way latency.
    pub bound: Times,
    /// Nodes crashed.
    pub crashed: usize,
    /// From the crash until every survivor's tree was wide-area optimal again.
    pub repaired: Option<Duration>,
    /// Ours: how long after its connection read a broadcast the application's delivery
    /// stream yielded it, µs, one entry per delivery (sorted). Every contender's times are
    /// taken at the connection; this is what the application adds on top.
    pub app_lag_us: Vec<f64>,
    /// Ours: how long after the application called `broadcast` the root's driver started
    /// it, µs, one entry per broadcast (sorted). Ours is timed from that start, as the
    /// static trees are from their root's first send; this is what the API adds before.
    pub api_lag_us: Vec<f64>,
    /// Ours: the cost of one send each node's plan went by after the timed broadcasts, µs,
    /// for the nodes that measured it (sorted); the others plan with the configured cost.
    pub send_cost_us: Vec<f64>,
}

/// Runs it; `progress` gets one line per step.
pub async fn run(opts: QuicRunOptions, progress: impl Fn(&str)) -> anyhow::Result<QuicRun> {
    let topo = opts.topology.clone();
    let k = opts.slowdown.max(1);
    let d = opts.dilation.max(1);
    progress(&format!(
        "quic: starting {} nodes of {} (clocks slowed x{k}, time dilated x{d})",
        topo.node_clusters().len(),
        topo.name
    ));
    // The nodes, the static trees and the bound all run on the dilated network.
    let topo = topo.dilated(d);
    let options = LocalOptions::new(Config::wan()).dilated(d).slowed(k);
    let map = crate::net::emulated::LatencyMap::new(topo.clone());
    let overlay = LocalOverlay::start_with(map.clone(), options).await?;
    let mut out = QuicRun {
        nodes: overlay.nodes.len(),
        dilation: d,
        started: overlay.started.elapsed(),
        ..QuicRun::default()
    };
    progress(&format!(
        "quic: {} nodes joined in {:.1} s; waiting for optimal trees",
        out.nodes,
        out.started.as_secs_f64()
    ));
    let stable = Duration::from_secs(2) * k * d;
    let (check, converged) = wait(&overlay, opts.timeout, stable, d, &progress).await;
    out.converged = converged;
    out.optimal = (check.wide_area_optimal, check.trees);
    match converged {
        Some(t) => progress(&format!(
            "quic: every tree wide-area optimal at {:.1} s",
            t.as_secs_f64()
        )),
        None => progress(&format!(
            "quic: {} of {} trees wide-area optimal after {:?} ({check:?}); broadcasting on the trees as they are",
            check.wide_area_optimal, check.trees, opts.timeout
        )),
    }

    if converged.is_some() && !opts.overhead_window.is_zero() {
        let window = opts.overhead_window * d;
        let steady = steady::measure(&overlay, &map, window, d).await;
        progress(&steady.line());
        out.steady = Some(steady);
    }
    out.roots = roots(&overlay.clusters, opts.roots_per_cluster);
    broadcasts(&overlay, &topo, &mut out, &progress).await?;
    let (mut lost, mut resent) = (0, 0);
    for node in &overlay.nodes {
        if let Ok(s) = node.status().await {
            (lost, resent) = (lost + s.links_lost, resent + s.resyncs_after_loss);
            if s.send_cost_measured {
                out.send_cost_us.push(s.send_cost_us as f64);
            }
        }
    }
    progress(&format!(
        "quic: frames perhaps lost to a peer {lost} times over all nodes; state sent again {resent} times"
    ));
    out.send_cost_us.sort_by(f64::total_cmp);
    for t in [
        &mut out.ours,
        &mut out.magpie,
        &mut out.unaware,
        &mut out.magpie_again,
        &mut out.bound,
    ] {
        t.undilate(d);
    }
    if converged.is_none() {
        // Repair is measured against convergence; without it there is nothing to compare.
        progress("quic: no crash and repair phase (the trees never all converged)");
        overlay.shutdown().await;
        return Ok(out);
    }

    // Crash a spread-out tenth of the non-root nodes, silently.
    let victims: Vec<usize> = {
        let others: Vec<usize> = (0..out.nodes).filter(|i| !out.roots.contains(i)).collect();
        let count = ((others.len() as f64) * opts.crash_fraction).round() as usize;
        let step = others.len() / count.max(1);
        others
            .iter()
            .step_by(step.max(1))
            .take(count)
            .copied()
            .collect()
    };
    out.crashed = victims.len();
    progress(&format!("quic: crashing {} nodes", victims.len()));
    let t = Instant::now();
    for &i in &victims {
        overlay.crash(i);
    }
    let (_, repaired) = wait(&overlay, opts.timeout, stable, d, &progress).await;
    out.repaired = repaired.map(|_| t.elapsed().saturating_sub(stable));
    progress(&match out.repaired {
        Some(r) => format!("quic: repaired {:.1} s after the crash", r.as_secs_f64()),
        None => "quic: not repaired in time".to_string(),
    });
    overlay.shutdown().await;
    Ok(out)
}

/// The first `per_cluster` nodes of every cluster.
fn roots(clusters: &[usize], per_cluster: usize) -> Vec<usize> {
    let mut seen: HashMap<usize, usize> = HashMap::new();
    (0..clusters.len())
        .filter(|&i| {
            let n = seen.entry(clusters[i]).or_default();
            *n += 1;
            *n <= per_cluster
        })
        .collect()
}

/// Per operation, when each node's connection read it; and every delivery's lag to the
/// application.
#[derive(Default)]
struct ReceiptLog {
    at: HashMap<(NodeId, u64), HashMap<usize, Instant>>,
    app_lag_us: Vec<f64>,
}

type Receipts = Arc<Mutex<ReceiptLog>>;

/// Timed broadcasts per root and contender; they alternate (ours, MagPIe, unaware, MagPIe
/// again) so that every contender sees the same machine.
const ROUNDS: usize = 5;

/// A timed broadcast during which the emulated wire sent a datagram more than this late is
/// run again (up to [`MAX_TRIES`] times in all; the last try is kept whatever happened).
pub const WIRE_LATE_LIMIT_US: u64 = 1_000;

/// Most tries of one timed broadcast (see [`WIRE_LATE_LIMIT_US`]).
pub const MAX_TRIES: usize = 8;

/// Quiet time before every timed broadcast: the previous one's acknowledgements and
/// answers are over, so no contender starts while another's traffic still runs.
const QUIET: Duration = Duration::from_millis(30);

/// 1 KB broadcasts from every root: ours and the static trees over QUIC, alternating.
async fn broadcasts(
    overlay: &LocalOverlay,
    topo: &Topology,
    out: &mut QuicRun,
    progress: &impl Fn(&str),
) -> anyhow::Result<()> {
    let receipts: Receipts = Arc::default();
    let mut listeners = Vec::new();
    for (i, node) in overlay.nodes.iter().enumerate() {
        let receipts = receipts.clone();
        let mut stream = Box::pin(node.deliveries());
        listeners.push(tokio::spawn(async move {
            while let Some(d) = stream.next().await {
                let d = d.expect("this reader keeps up: nothing is dropped for it");
                // Taken where the static trees take theirs: when the connection read it.
                let lag = d.received.elapsed();
                let mut r = receipts.lock().unwrap_or_else(|e| e.into_inner());
                r.app_lag_us.push(lag.as_secs_f64() * 1e6);
                r.at.entry((d.root, d.op))
                    .or_default()
                    .entry(i)
                    .or_insert(d.received);
            }
        }));
    }
    let net = StaticNet::start(overlay.map.clone(), &overlay.clusters)?;
    let ids: Vec<NodeId> = overlay.nodes.iter().map(|n| n.id()).collect();
    let payload = vec![0x5au8; 1024];
    let d = out.dilation.max(1);
    let wait = Duration::from_secs(5) * d;
    let mut tree_id = 0u32;
    // Every static broadcast gets its own number (warm-ups are 0).
    let mut seq = 0u32;
    for &root in &out.roots {
        progress(&format!(
            "quic: {ROUNDS} broadcasts per contender from node {root}"
        ));
        let magpie = tree_id + 1;
        let unaware = tree_id + 2;
        tree_id += 2;
        net.install(magpie, trees::magpie(root, &ids, topo));
        net.install(unaware, trees::binomial_unaware(root, &ids));
        // Warm-ups: the static trees open their trees' connections. Ours' first teaches the
        // relays their subtrees (send order, in-cluster plans); its second follows the plans,
        // whose direct copies to other clusters' entries may need connections the trees do
        // not use (a dial costs two round trips: the handshake, then the token proof).
        overlay.nodes[root].broadcast(payload.clone()).await?;
        overlay.nodes[root].broadcast(payload.clone()).await?;
        net.broadcast(magpie, 0, &payload, wait).await;
        net.broadcast(unaware, 0, &payload, wait).await;
        for round in 1..=ROUNDS as u32 {
            // Each round runs the contenders in a rotated order (no contender always goes
            // first, or right after another), each after a quiet gap.
            for k in 0..4 {
                let slot = (k + round as usize) % 4;
                // A broadcast during which the emulated wire itself ran late (the machine
                // stalled it) measured the machine, not the contender: it is run again.
                let mut tries = 0;
                let (sample, late) = loop {
                    tries += 1;
                    tokio::time::sleep(QUIET * d).await;
                    // From here, how late the wire sends is this broadcast's.
                    overlay.map.take_wire_lateness();
                    let mut sample = Times::default();
                    let tree = match slot {
                        0 => None,
                        1 => Some(magpie),
                        2 => Some(unaware),
                        _ => Some(magpie),
                    };
                    match tree {
                        None => {
                            let lag =
                                ours_once(overlay, &receipts, root, &payload, wait, &mut sample)
                                    .await?;
                            out.api_lag_us.extend(lag);
                        }
                        Some(id) => {
                            seq += 1;
                            let got = net.broadcast(id, seq, &payload, wait).await;
                            for (v, t) in got.into_iter().enumerate().filter(|(v, _)| *v != root) {
                                sample.record(root, v, &overlay.clusters, t);
                            }
                        }
                    }
                    let late = overlay.map.take_wire_lateness();
                    if late.max_us <= WIRE_LATE_LIMIT_US || tries >= MAX_TRIES {
                        break (sample, late);
                    }
                };
                let times = match slot {
                    0 => &mut out.ours,
                    1 => &mut out.magpie,
                    2 => &mut out.unaware,
                    _ => &mut out.magpie_again,
                };
                times.wire.merge(late);
                times.redone += tries - 1;
                times.disturbed += usize::from(late.max_us > WIRE_LATE_LIMIT_US);
                times.append(sample);
            }
            for (v, us) in trees::lower_bound(root, topo).into_iter().enumerate() {
                if v != root {
                    out.bound.ms.push(us / 1e3);
                    (out.bound.clusters).push((overlay.clusters[root], overlay.clusters[v]));
                    out.bound.pairs.push((root, v));
                }
            }
        }
    }
    net.close();
    for l in listeners {
        l.abort();
    }
    let mut lag = std::mem::take(
        &mut receipts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .app_lag_us,
    );
    lag.sort_by(f64::total_cmp);
    out.app_lag_us = lag;
    out.api_lag_us.sort_by(f64::total_cmp);
    Ok(())
}

/// One timed broadcast of ours from `root`, timed from when the root's driver started it
/// (its own delivery's `received`); returns how long the API took to get it there, µs.
async fn ours_once(
    overlay: &LocalOverlay,
    receipts: &Receipts,
    root: usize,
    payload: &[u8],
    wait: Duration,
    times: &mut Times,
) -> anyhow::Result<Option<f64>> {
    let n = overlay.nodes.len();
    let called = Instant::now();
    let report = overlay.nodes[root].broadcast(payload.to_vec()).await?;
    let key = (overlay.nodes[root].id(), report.op);
    let deadline = Instant::now() + wait;
    loop {
        let count = {
            let r = receipts.lock().unwrap_or_else(|e| e.into_inner());
            r.at.get(&key).map_or(0, |m| m.len())
        };
        if count >= n || Instant::now() >= deadline {
            break;
        }
        // Short, so the wire-lateness window of this broadcast ends soon after it does.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let got = receipts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .at
        .remove(&key)
        .unwrap_or_default();
    let t0 = got.get(&root).copied().unwrap_or(called);
    for v in (0..n).filter(|&v| v != root) {
        let after = got.get(&v).map(|t| t.saturating_duration_since(t0));
        times.record(root, v, &overlay.clusters, after);
    }
    let api_lag = got.get(&root).map(|t| t.saturating_duration_since(called));
    Ok(api_lag.map(|d| d.as_secs_f64() * 1e6))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
