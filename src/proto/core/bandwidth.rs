//! Bandwidth measured at run time: packet trains asked of peers in other clusters, and the
//! rate of real transfers, turned into per-peer inbound estimates that the cluster summary
//! publishes (see [`crate::proto::bandwidth`] for the cluster-level view built from them).
//!
//! Who measures: the `bw_probers` members of each discovered cluster with the smallest ids
//! ask one member of every other cluster (rotating) for a train every `bw_probe_interval`,
//! so the probe traffic on a wide-area link does not grow with the clusters' sizes. The
//! first three rounds come every couple of seconds, so an overlay that just formed knows
//! its links before its first large broadcast, and so do up to [`CATCH_UP_ROUNDS`] more
//! while a cluster is still unmeasured (they ask only those). Each routine round a prober
//! also asks one member of its own cluster for a short train ([`INTRA_TRAIN`]): the
//! in-cluster rate sets how wide the tree inside the cluster may be
//! (`crate::proto::stripe::fanout`). Nobody asks before its first sweep has met everyone, a
//! round asks a bounded number of clusters, and a node that is no prober forgets its
//! figures after a few intervals (the `round` part says why).
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
use crate::proto::message::{BandwidthEdge, MAX_BANDWIDTH_EDGES};
use crate::proto::rng::SplitMix64;
use crate::proto::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

mod arrivals;
mod recheck;
mod round;
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
    /// Whether measured either way within `life` of `now`.
    fn updated_within(&self, now: Time, life: Duration) -> bool {
        self.updated.is_some_and(|t| now.saturating_since(t) < life)
    }

    /// The estimate: the median train result, or a faster real transfer (a transfer's
    /// rate is what the path carried, so the capacity is at least that). Never a
    /// transfer alone: the stripes of a large broadcast are paced at their share of a
    /// link, so their rate says what the plan asked, not what the path carries (published
    /// alone, such figures once took UvA->VU from 25 to 2.4 Mbit/s in the matrix).
    fn estimate(&self) -> Option<f64> {
        if self.trains.is_empty() {
            return None;
        }
        let mut t: Vec<f64> = self.trains.iter().copied().collect();
        t.sort_by(f64::total_cmp);
        let median = crate::proto::bandwidth::median(&t);
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
    /// Whether the first sweep has met every member (no trains are asked before).
    swept: bool,
    /// Per target cluster: when a routine round last asked it (the least recent go first).
    last_asked: IdMap<NodeId, Time>,
    /// Per target cluster (this node's own too): the length to ask next after a train
    /// came back too fast for its length to measure.
    longer: IdMap<NodeId, u16>,
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
            swept: false,
            last_asked: IdMap::default(),
            longer: IdMap::default(),
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

/// Whether two lists of published figures differ enough to publish again: a cluster
/// (`cluster_of` names a peer's) gained or lost its figures, or the median of its figures
/// moved by more than an eighth. The median is the one the matrix takes (of an even count,
/// the mean of the middle two): with the upper middle one, three cold-start figures of
/// 1.5 Mbit/s and three of 4.5 read 4.5 before and after the low ones were forgotten, the
/// prober never republished, and every node kept Delft->Leiden at 3.1. Compared by
/// cluster, not by peer: a prober asks another member each round, so its freshest peers
/// change every round while what it says of the links does not, and every republish is
/// spread to every member.
pub(super) fn differs(
    old: &[BandwidthEdge],
    new: &[BandwidthEdge],
    cluster_of: impl Fn(&NodeId) -> NodeId,
) -> bool {
    let medians = |edges: &[BandwidthEdge]| {
        let mut by: Vec<(NodeId, f64)> = edges
            .iter()
            .map(|e| (cluster_of(&e.from), e.kbps as f64))
            .collect();
        by.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        let mut out: Vec<(NodeId, f64)> = Vec::new();
        for run in by.chunk_by(|a, b| a.0 == b.0) {
            let kbps: Vec<f64> = run.iter().map(|e| e.1).collect();
            out.push((run[0].0, crate::proto::bandwidth::median(&kbps)));
        }
        out
    };
    let (old, new) = (medians(old), medians(new));
    old.len() != new.len()
        || old
            .iter()
            .zip(&new)
            .any(|(a, b)| a.0 != b.0 || (a.1 - b.1).abs() > a.1 / 8.0)
}

impl Core {
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
    /// The name (smallest member) of `peer`'s discovered cluster.
    pub(super) fn cluster_name(&self, peer: &NodeId) -> Option<NodeId> {
        let group = self.clusters().group_of(1, peer)?;
        group.members.first().copied()
    }

    /// The name (smallest member) of `peer`'s discovered cluster, unless it is this
    /// node's own: the link a train or report from `peer` measures is then wide-area.
    fn other_cluster_name(&self, peer: &NodeId) -> Option<NodeId> {
        let group = self.clusters().group_of(1, peer)?;
        if group.members.binary_search(&self.id).is_ok() {
            return None;
        }
        group.members.first().copied()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: u8, kbps: u32) -> BandwidthEdge {
        BandwidthEdge {
            from: NodeId([from; 16]),
            kbps,
            samples: 1,
        }
    }

    /// Peers 1-9 form the cluster named 1, peers 10-19 the one named 10.
    fn cluster_of(p: &NodeId) -> NodeId {
        NodeId([if p.0[0] < 10 { 1 } else { 10 }; 16])
    }

    #[test]
    fn figures_differ_by_cluster_not_by_which_members_were_measured() {
        let old = [edge(2, 26_000), edge(3, 25_000), edge(11, 4_000)];
        // A prober's rotation: other members of the same clusters, at the same rates.
        let rotated = [edge(4, 26_500), edge(5, 24_800), edge(12, 4_100)];
        assert!(!differs(&old, &rotated, cluster_of));
        // A link that moved by more than an eighth.
        let slower = [edge(2, 26_000), edge(3, 25_000), edge(11, 3_000)];
        assert!(differs(&old, &slower, cluster_of));
        // A cluster gained or lost its figures.
        assert!(differs(&old, &old[..2], cluster_of));
        assert!(differs(&old[..2], &old, cluster_of));
        assert!(!differs(&[], &[], cluster_of));
    }

    #[test]
    fn an_even_count_of_figures_is_judged_by_the_mean_of_its_middle_two() {
        // Three cold-start figures read low, three right: the matrix takes 3 Mbit/s.
        let mixed = [
            edge(11, 1_500),
            edge(12, 1_500),
            edge(13, 1_600),
            edge(14, 4_500),
            edge(15, 4_500),
            edge(16, 4_500),
        ];
        let right = [edge(14, 4_500), edge(15, 4_500), edge(16, 4_500)];
        assert!(
            differs(&mixed, &right, cluster_of),
            "the low ones forgotten"
        );
    }
}
