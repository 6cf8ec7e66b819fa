//! Bandwidth measured at run time: packet trains asked of peers in other clusters, and the
//! rate of real transfers, turned into per-peer inbound estimates that the cluster summary
//! publishes (see [`crate::proto::bandwidth`] for the cluster-level view built from them).
//!
//! Who measures: the `bw_probers` members of each discovered cluster with the smallest ids
//! ask one member of every other cluster (rotating) for a train every `bw_probe_interval`,
//! so the probe traffic on a wide-area link does not grow with the clusters' sizes. The
//! first three rounds come every couple of seconds, so an overlay that just formed knows
//! its links before its first large broadcast, and so do up to [`CATCH_UP_ROUNDS`] more
//! while a cluster is still unmeasured (they ask only those). Each routine round a prober also asks one
//! member of its own cluster for a short train ([`INTRA_TRAIN`]): the in-cluster rate sets
//! how wide the tree inside the cluster may be (`crate::proto::stripe::fanout`).
//!
//! What it costs, bounded twice: a train is sized to spread over about
//! [`TRAIN_SPREAD`] at the link's estimated rate (at least [`MIN_TRAIN`] datagrams), and
//! a prober waits long enough between trains to one cluster that they take at most
//! [`LINK_SHARE`] of the estimated capacity; the sender of trains honours a request only
//! within its byte budget (`bw_budget`, a token bucket), and says no otherwise.
//!
//! Never during bulk transfers: a node moving data-plane streams or large inline payloads
//! (or that just stopped, see [`crate::proto::Input::BulkTransfer`]) neither asks for
//! trains nor sends them. A train is a burst of back-to-back datagrams; on a link a
//! striped broadcast keeps at capacity it overflows the queue and makes the data streams
//! back off, and what it measured would be the capacity left over, not the link's. The
//! transfers themselves are measured instead (`handle_transfer_rate`).
//!
//! When a link changes: a train from a member of another cluster that lands outside
//! [`SURPRISE`] times (or a fraction of) what this node holds for that member is held back
//! and makes the cluster suspect (once per `bw_probe_interval` per cluster); this node asks
//! that cluster for a train every quick period. If the next one surprises the same way,
//! the change is confirmed: both trains, and the next from every other member (at most
//! [`RECHECK_ROUNDS`] quick rounds in all), replace the members' histories instead of
//! joining their medians, so a link that dropped from 26 to 3 Mbit/s is known a few
//! seconds after the first routine train notices, not after five. If it does not, the
//! first is dropped (one train right after a transfer, while a queue still drained, once
//! took VU->Delft from 7.3 to 2.2 Mbit/s when it replaced the history on its own).
//!
//! Owns the estimates, the trains asked for, the budget and the counters ([`Bandwidth`]).

use super::Core;
use crate::proto::id::{IdMap, NodeId};
use crate::proto::message::{BandwidthEdge, MAX_BANDWIDTH_EDGES, MAX_TRAIN_PACKETS, Message};
use crate::proto::rng::SplitMix64;
use crate::proto::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

mod arrivals;
mod recheck;
mod saturation;

use self::recheck::Recheck;

/// Datagram size asked for (the driver sends at most what its path allows).
pub const TRAIN_DATAGRAM: u16 = 1200;
/// Fewest datagrams in a train: fewer would measure the timer more than the link.
pub const MIN_TRAIN: u16 = 8;
/// A train is sized to take about this long to cross the link at its estimated rate.
pub const TRAIN_SPREAD: Duration = Duration::from_millis(8);
/// Share of a link's estimated capacity one prober's trains may take on average.
pub const LINK_SHARE: f64 = 0.01;
/// How many train results an estimate keeps (their median is the estimate).
const KEEP_SAMPLES: usize = 5;
/// A train not arrived after this long is forgotten.
const TRAIN_WAIT: Duration = Duration::from_secs(5);
/// Rounds of the start-up phase, and their period.
const QUICK_ROUNDS: u32 = 3;
const QUICK_PERIOD: Duration = Duration::from_secs(2);
/// Most quick rounds after the start-up ones that ask only the clusters still unmeasured.
const CATCH_UP_ROUNDS: u32 = 10;
/// A train this many times above or below the member's estimate suggests the link changed.
pub const SURPRISE: f64 = 2.0;
/// Most quick rounds spent re-measuring a suspect cluster.
const RECHECK_ROUNDS: u32 = 4;
/// Most datagrams in a train inside a cluster.
pub const INTRA_TRAIN: u16 = 32;

/// What measuring bandwidth cost and found, for status and the overhead figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BandwidthStats {
    /// Trains this node asked for.
    pub trains_asked: u64,
    /// Trains this node sent (asked by others), and their bytes.
    pub trains_sent: u64,
    pub train_bytes_sent: u64,
    /// Requests refused because the budget was spent.
    pub trains_refused: u64,
    /// Trains that arrived here, and their bytes.
    pub trains_received: u64,
    pub train_bytes_received: u64,
    /// Transfers whose rate was recorded (passive measurements).
    pub transfers_measured: u64,
    /// Windows in which one of this node's connections ran its path full (QUIC backed off
    /// for congestion while it carried data).
    pub paths_saturated: u64,
    /// Clusters measured again because a peer said its path here ran full far below
    /// this node's estimate.
    pub saturations_rechecked: u64,
}

/// One peer's inbound estimate.
#[derive(Clone, Debug, Default)]
struct PeerRate {
    /// Recent train results, bits per second.
    trains: VecDeque<f64>,
    /// The best rate a real transfer from this peer reached, and when.
    transfer: Option<(f64, Time)>,
    /// When last measured either way.
    updated: Option<Time>,
    samples: u32,
}

impl PeerRate {
    /// The estimate: the median train result, or a faster real transfer (a transfer's
    /// rate is what the path carried, so the capacity is at least that). Never a
    /// transfer alone: the stripes of a large broadcast are paced at their share of a
    /// link, so their rate says what the plan asked, not what the path carries (published
    /// alone, such figures once took UvA->VU from 25 to 2.4 Mbit/s in the matrix).
    fn estimate(&self) -> Option<f64> {
        let mut t: Vec<f64> = self.trains.iter().copied().collect();
        t.sort_by(f64::total_cmp);
        let median = t.get(t.len() / 2).copied()?;
        Some(self.transfer.map_or(median, |(r, _)| median.max(r)))
    }
}

/// Bandwidth measurement state of one core.
pub(super) struct Bandwidth {
    peers: IdMap<NodeId, PeerRate>,
    /// Trains asked for: id, peer, when.
    asked: Vec<(u32, NodeId, Time)>,
    next_id: u32,
    next_round: Option<Time>,
    /// Earliest next round of rechecks of suspect clusters.
    next_recheck: Option<Time>,
    rounds: u32,
    /// Whether the next routine round only asks the clusters not measured yet.
    catch_up: bool,
    /// Per target cluster (named by its smallest member): earliest next train.
    next_to_cluster: IdMap<NodeId, Time>,
    /// Token bucket of train bytes this node may still send, and when it was refilled.
    tokens: f64,
    refilled: Time,
    /// Clusters (by name) whose link seems to have changed: when that was noticed, the
    /// members measured since, and the quick rounds spent on it.
    suspect: IdMap<NodeId, Recheck>,
    /// When each cluster was last made suspect.
    suspected_at: IdMap<NodeId, Time>,
    /// When this node last told each peer that their path ran full.
    told_saturated: IdMap<NodeId, Time>,
    /// Its own generator: the tree protocol's draws stay what they were without it.
    rng: SplitMix64,
    pub(super) stats: BandwidthStats,
}

impl Bandwidth {
    pub(super) fn new(seed: u64, now: Time) -> Self {
        Bandwidth {
            peers: IdMap::default(),
            asked: Vec::new(),
            next_id: 1,
            next_round: None,
            next_recheck: None,
            rounds: 0,
            catch_up: false,
            next_to_cluster: IdMap::default(),
            suspect: IdMap::default(),
            suspected_at: IdMap::default(),
            told_saturated: IdMap::default(),
            tokens: 0.0,
            refilled: now,
            rng: SplitMix64::new(seed ^ 0xB4D0_1D7E_5EED_0B5E),
            stats: BandwidthStats::default(),
        }
    }

    /// The inbound estimate from `peer`, bits per second.
    pub(super) fn estimate(&self, peer: &NodeId) -> Option<f64> {
        self.peers.get(peer).and_then(PeerRate::estimate)
    }

    /// Whether an estimate is held of any of `members`.
    fn holds_any(&self, members: &[NodeId]) -> bool {
        members.iter().any(|m| self.estimate(m).is_some())
    }

    /// What to publish: the freshest estimates, at most [`MAX_BANDWIDTH_EDGES`].
    pub(super) fn edges(&self) -> Vec<BandwidthEdge> {
        let mut v: Vec<(Time, BandwidthEdge)> = self
            .peers
            .iter()
            .filter_map(|(p, r)| {
                let bps = r.estimate()?;
                Some((
                    r.updated?,
                    BandwidthEdge {
                        from: *p,
                        kbps: (bps / 1e3).clamp(1.0, u32::MAX as f64) as u32,
                        samples: r.samples.min(255) as u8,
                    },
                ))
            })
            .collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.from.cmp(&b.1.from)));
        v.truncate(MAX_BANDWIDTH_EDGES);
        let mut out: Vec<BandwidthEdge> = v.into_iter().map(|(_, e)| e).collect();
        out.sort_by_key(|e| e.from);
        out
    }

    pub(super) fn forget(&mut self, peer: &NodeId) {
        self.peers.remove(peer);
        self.told_saturated.remove(peer);
        self.asked.retain(|(_, p, _)| p != peer);
    }

    /// Records a train result; `replace` drops what was known of the peer first (its link
    /// changed).
    fn train(&mut self, now: Time, peer: NodeId, bps: f64, replace: bool) {
        let r = self.peers.entry(peer).or_default();
        if replace {
            r.trains.clear();
            r.transfer = None;
        }
        r.trains.push_back(bps);
        while r.trains.len() > KEEP_SAMPLES {
            r.trains.pop_front();
        }
        r.updated = Some(now);
        r.samples = r.samples.saturating_add(1);
    }

    /// Takes `bytes` from the budget refilled at `rate` bytes per second (one minute of
    /// budget at most is saved up); false if there is not enough.
    fn spend(&mut self, now: Time, rate: f64, bytes: f64) -> bool {
        let dt = now.saturating_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.tokens = (self.tokens + dt * rate).min(rate * 60.0);
        if self.tokens < bytes {
            return false;
        }
        self.tokens -= bytes;
        true
    }
}

/// Whether two lists of published figures differ enough to publish again: another set of
/// peers, or a rate that moved by more than an eighth.
pub(super) fn differs(old: &[BandwidthEdge], new: &[BandwidthEdge]) -> bool {
    old.len() != new.len()
        || old.iter().zip(new).any(|(a, b)| {
            a.from != b.from || (a.kbps as f64 - b.kbps as f64).abs() > a.kbps as f64 / 8.0
        })
}

impl Core {
    /// Once per housekeeping round: forget trains that never came, and if this node is one
    /// of its cluster's probers and a round is due, ask one member of each other cluster
    /// for a train.
    pub(super) fn bandwidth_round(&mut self) {
        let now = self.now;
        self.bw
            .asked
            .retain(|(_, _, at)| now.saturating_since(*at) < TRAIN_WAIT);
        self.bw
            .told_saturated
            .retain(|_, t| now.saturating_since(*t) < saturation::TELL_EVERY);
        let view = self.clusters();
        let groups = view.partition(1);
        if groups.len() < 2 || self.config.bw_probers == 0 {
            return;
        }
        let Some(mine) = groups.iter().position(|g| g.contains(&self.id)) else {
            return;
        };
        let mut own: Vec<NodeId> = groups[mine].clone();
        own.sort_unstable();
        let prober = own
            .iter()
            .take(self.config.bw_probers)
            .any(|p| *p == self.id);
        let interval = self.config.bw_probe_interval;
        self.bw
            .suspected_at
            .retain(|_, t| now.saturating_since(*t) < interval);
        self.bw.suspect.retain(|name, r| {
            r.rounds < RECHECK_ROUNDS
                && groups
                    .iter()
                    .find(|g| g.contains(name))
                    .is_some_and(|g| g.iter().any(|m| !r.measured.contains(m)))
        });
        // Only probers ask routinely; any member rechecks a cluster a peer's saturated
        // connection made suspect, since it holds the estimate in question.
        if (!prober && self.bw.suspect.is_empty()) || self.probing.loaded(now) {
            return;
        }
        // Routine rounds ask every other cluster; rechecks only the suspect ones.
        let routine = prober && now >= *self.bw.next_round.get_or_insert(now);
        let recheck = !self.bw.suspect.is_empty() && self.bw.next_recheck.is_none_or(|t| now >= t);
        if !routine && !recheck {
            return;
        }
        let catch_up = routine && std::mem::take(&mut self.bw.catch_up);
        if routine {
            self.bw.rounds += 1;
            // Trains asked in the start-up rounds are often refused (every prober of every
            // cluster asks at once, and the senders' budgets start empty): a cluster still
            // unmeasured is asked again a quick period later, not a whole interval (a
            // real-QUIC das-4 run waited 30 s for its last pair in two runs out of three).
            let unmeasured = groups
                .iter()
                .enumerate()
                .any(|(gi, g)| gi != mine && !self.bw.holds_any(g));
            let quick = self.bw.rounds <= QUICK_ROUNDS;
            self.bw.catch_up =
                !quick && unmeasured && self.bw.rounds <= QUICK_ROUNDS + CATCH_UP_ROUNDS;
            let period = if quick || self.bw.catch_up {
                QUICK_PERIOD
            } else {
                interval
            };
            let jitter = 0.75 + 0.5 * self.bw.rng.unit();
            self.bw.next_round = Some(now + period.mul_f64(jitter));
        }
        if recheck {
            self.bw.next_recheck = Some(now + QUICK_PERIOD);
        }
        for (gi, g) in groups.iter().enumerate() {
            if gi == mine || g.is_empty() {
                continue;
            }
            let mut g = g.clone();
            g.sort_unstable();
            let name = g[0];
            let measured = catch_up && self.bw.holds_any(&g);
            let suspect = if recheck {
                self.bw.suspect.get_mut(&name)
            } else {
                None
            };
            let spaced = self.bw.next_to_cluster.get(&name).is_some_and(|t| now < *t);
            if suspect.is_none() && (!routine || spaced || measured) {
                continue;
            }
            // A recheck after a low figure sizes its train for that figure: a train sized
            // for the old rate costs the sender's budget several times over, and once
            // left a recheck refused until its rounds ran out.
            let (target, slower) = match suspect {
                Some(r) => {
                    r.rounds += 1;
                    let members = &self.members;
                    let target = r
                        .target(&g, |m| members.is_alive(m))
                        .unwrap_or(g[self.bw.rounds as usize % g.len()]);
                    (target, r.first.2.then_some(r.first.1))
                }
                None => (g[self.bw.rounds as usize % g.len()], None),
            };
            if !self.members.is_alive(&target) {
                continue;
            }
            self.ask_train(name, target, &g, (MAX_TRAIN_PACKETS, slower));
        }
        // Inside the cluster too (one member per routine round, rotating): how fast a
        // member forwards to another sets how many children it can feed in a stripe
        // (chain or wider tree, see `striping`). Capped smaller: a fast LAN needs no
        // long train to tell it is several times faster than the wide area.
        if routine && !catch_up && own.len() > 1 {
            let others: Vec<NodeId> = own.iter().copied().filter(|m| *m != self.id).collect();
            let target = others[self.bw.rounds as usize % others.len()];
            let spaced = self
                .bw
                .next_to_cluster
                .get(&own[0])
                .is_some_and(|t| now < *t);
            if !spaced && self.members.is_alive(&target) {
                self.ask_train(own[0], target, &others, (INTRA_TRAIN, None));
            }
        }
    }

    /// Asks `target` (of the cluster named `name`, whose members are `group`) for a train
    /// of at most `cap` datagrams, sized from the best figure held for the cluster, or
    /// from `slower` if that is lower (a recheck after a low figure).
    fn ask_train(
        &mut self,
        name: NodeId,
        target: NodeId,
        group: &[NodeId],
        (cap, slower): (u16, Option<f64>),
    ) {
        let now = self.now;
        let est = group
            .iter()
            .filter_map(|p| self.bw.estimate(p))
            .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))))
            .map(|e| slower.map_or(e, |s| e.min(s)));
        let bits = est.map_or(0.0, |e| e * TRAIN_SPREAD.as_secs_f64());
        let packets = ((bits / (TRAIN_DATAGRAM as f64 * 8.0)).ceil() as u16 + 1)
            .clamp(MIN_TRAIN, cap.max(MIN_TRAIN));
        let bytes = packets as f64 * TRAIN_DATAGRAM as f64;
        // At most LINK_SHARE of the link on average, whatever the configured interval.
        if let Some(e) = est {
            let gap = Duration::from_secs_f64((bytes * 8.0 / (LINK_SHARE * e)).min(3600.0));
            self.bw.next_to_cluster.insert(name, now + gap);
        }
        let id = self.bw.next_id;
        self.bw.next_id = self.bw.next_id.wrapping_add(1);
        self.bw.asked.push((id, target, now));
        self.bw.stats.trains_asked += 1;
        self.send(
            target,
            Message::TrainRequest {
                id,
                packets,
                size: TRAIN_DATAGRAM,
            },
        );
    }

    /// What measuring bandwidth cost and found so far.
    pub fn bandwidth_stats(&self) -> BandwidthStats {
        self.bw.stats
    }

    /// This node's inbound estimate from `peer`, bits per second.
    pub fn bandwidth_from(&self, peer: &NodeId) -> Option<f64> {
        self.bw.estimate(peer)
    }
}

impl Core {
    /// The name (smallest member) of `peer`'s discovered cluster, unless it is this
    /// node's own: the link a train or report from `peer` measures is then wide-area.
    fn other_cluster_name(&self, peer: &NodeId) -> Option<NodeId> {
        self.clusters()
            .partition(1)
            .into_iter()
            .find(|g| g.contains(peer) && !g.contains(&self.id))
            .and_then(|g| g.into_iter().min())
    }

    /// The discovered clusters with the bandwidth and latency between them, aggregated
    /// from every node's published figures (see [`crate::proto::bandwidth`]).
    pub fn bandwidth_view(&self) -> crate::proto::bandwidth::BandwidthView {
        let table = &self.discovery.table;
        crate::proto::bandwidth::BandwidthView::build(
            self.clusters(),
            table.bandwidth(),
            table.edges(),
            self.now,
        )
    }
}
