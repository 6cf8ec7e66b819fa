//! The core's side of cluster discovery ([`crate::proto::clusters`]): publishes this node's
//! summary from its RTT estimates, spreads summaries, and recomputes the groups. Runs on
//! the housekeeping round and the advert flush; its randomness comes from its own seeded
//! generator, so adding it left the tree protocol's random choices as they were.
//!
//! Owns the cluster table, that generator and the next digest exchange ([`Discovery`]).

use super::Core;
use crate::proto::clusters::{ClusterTable, ClusterView, summary};
use crate::proto::id::{IdMap, IdSet, NodeId};
use crate::proto::message::{ClusterMessage, Message};
use crate::proto::rng::SplitMix64;
use crate::proto::time::Time;
use std::time::Duration;

/// How many random members each new summary is pushed to by each node that learns it:
/// two reach about 80 % of the members, and anti-entropy the rest (three cost half as much
/// again for a second or so less).
const NEWS_FANOUT: usize = 2;

/// Republishes a node may make in a burst (its first summaries refine as samples come in).
const REPUBLISH_BURST: f64 = 3.0;

/// Past this many alive members the burst shrinks in proportion, down to one republish:
/// every republish reaches every member, so a burst of three per node cost the whole
/// overlay three spreads per member after its cold start (at 2000 members the summaries
/// still took 9.2 KB/s per node in the 5 s after the trees converged; 5.4 with one).
const BURST_MEMBERS: f64 = 500.0;

/// Every republish of a summary is spread to every member, so what a node receives is the
/// whole overlay's rate of republishes times the fan-out. A node earns one republish per
/// this many seconds per alive member (at least [`REPUBLISH_MIN_GAP`]): the overlay as a
/// whole republishes about once a second at most, whatever its size. Without a bound, on
/// the netns testbed, queueing on a thin WAN link moved RTT rows and bandwidth figures,
/// every move was republished to everyone, and the summaries (9.8 KB/s per node at 60)
/// filled the link further.
const REPUBLISH_GAP_PER_MEMBER: Duration = Duration::from_secs(1);

/// See [`REPUBLISH_GAP_PER_MEMBER`].
const REPUBLISH_MIN_GAP: Duration = Duration::from_secs(10);

/// A node recomputes its view of the clusters (once per housekeeping round, when the table
/// changed) at most once per this many rounds per alive member, rounded down: every round
/// below 2000 members, every other round from 2000, every fifth at 5000. A computation is
/// O(E log E) over the summaries' edges, E about 16 per member: spacing them out in
/// proportion keeps the CPU a node spends on discovery about constant per second
/// whatever the overlay's size (a view a round was 38 % of the simulator's time at 1000
/// nodes with shared trees, and would cost seven times that per node at 5000).
const RECOMPUTE_ROUNDS_PER_MEMBER: f64 = 0.001;

/// Republishes a node may make without the allowance while its row fills in past a
/// limited sweep (see `Discovery::named`).
const FREE_REPUBLISHES: u32 = 4;

/// Cluster discovery state of one core.
pub(super) struct Discovery {
    pub(super) table: ClusterTable,
    rng: SplitMix64,
    next_sync: Time,
    /// Republishes this node may still make (see [`REPUBLISH_GAP_PER_MEMBER`]).
    republish_tokens: f64,
    /// When the tokens were last topped up.
    tokens_at: Time,
    /// When this node last republished for news of its bandwidth figures.
    bandwidth_at: Option<Time>,
    /// Whether trees are shared (see `Core::update_sharing`).
    pub(super) shared_on: bool,
    /// Every peer a summary of ours has named. With a limited sweep a node's row fills in
    /// over several rounds (its cluster, then a member of each other cluster), and while
    /// it does, a summary naming a peer for the first time is new structure, not drift:
    /// it is published without spending the allowance, [`FREE_REPUBLISHES`] times at
    /// most. (Not once the row is complete: in a cluster of near-equal RTTs the nearest
    /// few reshuffle with jitter and kept naming new peers; at 2000 nodes the summaries
    /// were then 35 KB/s per node after convergence.)
    pub(super) named: IdSet<NodeId>,
    /// Republishes left that need no allowance (see `named`).
    free_left: u32,
    /// Trees not settled where they should be, with shared trees on: when each was last
    /// asked for, and the wait before the next ask (see `Core::reask_unrouted`).
    pub(super) unrouted: IdMap<NodeId, (Time, Duration)>,
    /// No recompute before this (see [`RECOMPUTE_ROUNDS_PER_MEMBER`]).
    recompute_after: Time,
}

impl Discovery {
    /// State for node `me`, seeded from the core's seed, first sync one period after `now`.
    pub(super) fn new(me: NodeId, seed: u64, now: Time, sync: std::time::Duration) -> Self {
        Discovery {
            table: ClusterTable::new(me),
            rng: SplitMix64::new(seed ^ 0xC1A5_7E55_D15C_0FE7),
            next_sync: now + sync,
            republish_tokens: REPUBLISH_BURST,
            named: IdSet::default(),
            free_left: FREE_REPUBLISHES,
            unrouted: IdMap::default(),
            recompute_after: now,
            tokens_at: now,
            bandwidth_at: None,
            shared_on: false,
        }
    }

    /// Whether this node may republish its summary now, among `alive` members; spends a
    /// token if so.
    fn may_republish(&mut self, now: Time, alive: usize) -> bool {
        let gap = (REPUBLISH_GAP_PER_MEMBER * alive as u32).max(REPUBLISH_MIN_GAP);
        let earned = now.saturating_since(self.tokens_at).as_secs_f64() / gap.as_secs_f64();
        let burst =
            (REPUBLISH_BURST * BURST_MEMBERS / alive.max(1) as f64).clamp(1.0, REPUBLISH_BURST);
        self.republish_tokens = (self.republish_tokens + earned).min(burst);
        self.tokens_at = now;
        if self.republish_tokens < 1.0 {
            return false;
        }
        self.republish_tokens -= 1.0;
        true
    }

    /// Whether this node may republish now for news of its bandwidth figures: once per
    /// `interval` (the probe interval), whatever the overlay's size. Under the general
    /// allowance alone a prober at 256 members waited 256 s to publish what its trains
    /// found, and the matrix every node planned on was that much behind. Few nodes have
    /// such news (the probers, two per cluster by default, and nodes rechecking a link),
    /// and a prober's figures move only when a link does ([`super::bandwidth::differs`]
    /// compares them by cluster).
    fn may_republish_bandwidth(&mut self, now: Time, interval: Duration) -> bool {
        if self
            .bandwidth_at
            .is_some_and(|t| now.saturating_since(t) < interval)
        {
            return false;
        }
        self.bandwidth_at = Some(now);
        true
    }

    /// Up to `count` distinct random elements of `pool`.
    fn pick(&mut self, pool: &[NodeId], count: usize) -> Vec<NodeId> {
        // Draws as if taking `swap_remove`s from a copy of the pool, without copying it
        // (a copy of thousands of members for one or two picks): the few slots a draw
        // moved are kept aside.
        let mut moved: Vec<(usize, NodeId)> = Vec::new();
        let at = |moved: &[(usize, NodeId)], k: usize| {
            (moved.iter().rev().find(|(slot, _)| *slot == k)).map_or(pool[k], |(_, id)| *id)
        };
        let mut out = Vec::with_capacity(count);
        let mut len = pool.len();
        while out.len() < count && len > 0 {
            let i = self.rng.below(len as u64) as usize;
            out.push(at(&moved, i));
            let last = at(&moved, len - 1);
            moved.push((i, last));
            len -= 1;
        }
        out
    }
}

impl Core {
    /// The groups this node has discovered, level by level (level 1: clusters).
    pub fn clusters(&self) -> &ClusterView {
        self.discovery.table.view()
    }

    /// The members of this node's discovered level-1 cluster, itself included (just itself
    /// until discovery has run). The collective engine plans its spread over this cluster.
    pub fn discovered_cluster(&self) -> Vec<NodeId> {
        self.clusters()
            .group_of(1, &self.id)
            .map_or_else(|| vec![self.id], |g| g.members.clone())
    }

    /// A cluster message from `from`.
    pub(super) fn handle_cluster_message(&mut self, from: NodeId, msg: ClusterMessage) {
        let members = &self.members;
        let replies = self
            .discovery
            .table
            .handle(self.now, msg, |id| members.is_alive(id));
        for m in replies {
            self.send_cluster(from, m);
        }
    }

    /// Once per housekeeping round: republish this node's summary if its row of RTT
    /// estimates says something new, compare digests with a random member when due, and
    /// recompute the groups if the table changed.
    pub(super) fn cluster_round(&mut self) {
        let params = self.config.cluster_params();
        // Not while the sweep still meets the members: the row is incomplete, and every
        // version published costs a spread to everyone.
        if self.probing.met_everyone() {
            let row: Vec<(NodeId, u32)> = self.nbrs.row(self.members.alive());
            let own = self.discovery.table.own_edges();
            let edges = summary::choose(&row, own, &params);
            let bandwidth = self.bw.edges();
            let bw_moved =
                super::bandwidth::differs(self.discovery.table.own_bandwidth(), &bandwidth, |p| {
                    self.cluster_name(p).unwrap_or(*p)
                });
            let rtt_moved = summary::differs(own, &edges, &params);
            let (now, alive) = (self.now, self.members.alive().len());
            let interval = self.config.bw_probe_interval;
            // News of the links first spends the allowance kept for it, RTT news the
            // general one; either may use the other's.
            let free = self.config.sweep_limit.is_some()
                && self.probing.guide.filling()
                && self.discovery.free_left > 0
                && edges
                    .iter()
                    .any(|e| !self.discovery.named.contains(&e.peer));
            let publish = match (rtt_moved, bw_moved) {
                (true, _) if free => {
                    self.discovery.free_left -= 1;
                    true
                }
                (true, _) => {
                    self.discovery.may_republish(now, alive)
                        || (bw_moved && self.discovery.may_republish_bandwidth(now, interval))
                }
                (false, true) => {
                    self.discovery.may_republish_bandwidth(now, interval)
                        || self.discovery.may_republish(now, alive)
                }
                (false, false) => false,
            };
            if publish {
                tracing::debug!(
                    edges = edges.len(),
                    bandwidth = bandwidth.len(),
                    "cluster summary republished"
                );
                if self.config.sweep_limit.is_some() {
                    (self.discovery.named).extend(edges.iter().map(|e| e.peer));
                }
                self.discovery.table.publish(self.now, edges, bandwidth);
                self.stats.cluster_publishes += 1;
            }
        }
        if self.now >= self.discovery.next_sync {
            let jitter = 0.75 + 0.5 * self.discovery.rng.unit();
            self.discovery.next_sync = self.now + self.config.cluster_sync.mul_f64(jitter);
            if let Some(peer) = self.discovery.pick(self.members.alive(), 1).pop() {
                let digest = self.discovery.table.digest();
                self.send_cluster(peer, digest);
            }
        }
        let alive = self.members.alive();
        // (The view is computed when first asked for: only for the log if it is on.)
        let recomputed = self.now >= self.discovery.recompute_after
            && self.discovery.table.recompute(alive, &params);
        if recomputed {
            let rounds = (alive.len() as f64 * RECOMPUTE_ROUNDS_PER_MEMBER).floor();
            // (Half a round short of it: the next round due then comes on time.)
            let gap = self.config.serial_period.mul_f64((rounds - 0.5).max(0.0));
            self.discovery.recompute_after = self.now + gap;
        }
        self.update_sharing();
        if recomputed && self.discovery.shared_on {
            self.retrack();
        }
        if self.discovery.shared_on {
            self.reask_unrouted();
        } else {
            self.discovery.unrouted.clear();
        }
        if recomputed && tracing::enabled!(tracing::Level::DEBUG) {
            let view = self.discovery.table.view();
            tracing::debug!(
                levels = view.depth(),
                groups = ?view.levels.iter().map(Vec::len).collect::<Vec<_>>(),
                summaries = self.discovery.table.len(),
                "clusters recomputed"
            );
        }
    }

    /// At the advert flush: push new summaries to a few random members.
    pub(super) fn push_cluster_news(&mut self) {
        if !self.discovery.table.has_news() {
            return;
        }
        let batches = self.discovery.table.take_news();
        for peer in self.discovery.pick(self.members.alive(), NEWS_FANOUT) {
            for b in &batches {
                let msg = ClusterMessage::Summaries {
                    summaries: b.clone(),
                };
                self.send_cluster(peer, msg);
            }
        }
    }

    /// Sends a cluster message, counted in the stats (what discovery costs is measured).
    fn send_cluster(&mut self, to: NodeId, msg: ClusterMessage) {
        let msg = Message::Cluster(msg);
        self.stats.cluster_messages += 1;
        self.stats.cluster_bytes += msg.encoded_len() as u64;
        self.send(to, msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_are_those_of_swap_removes_from_a_copy() {
        let pool: Vec<NodeId> = (0..7).map(|i| NodeId::from_seed(5, i)).collect();
        for seed in 0..50 {
            let t0 = Time::from_micros(0);
            let mut d = Discovery::new(NodeId([1; 16]), seed, t0, Duration::from_secs(1));
            let mut rng = d.rng.clone();
            let count = seed as usize % 9;
            let (mut copy, mut want) = (pool.clone(), Vec::new());
            while want.len() < count && !copy.is_empty() {
                want.push(copy.swap_remove(rng.below(copy.len() as u64) as usize));
            }
            assert_eq!(d.pick(&pool, count), want, "seed {seed}");
        }
    }

    #[test]
    fn republishes_come_in_a_short_burst_then_one_per_member_second() {
        let at = |s: u64| Time::from_micros(s * 1_000_000);
        let mut d = Discovery::new(NodeId([7; 16]), 1, at(0), Duration::from_secs(2));
        let members = 60; // a republish per 60 s
        let burst = (0..10).filter(|_| d.may_republish(at(0), members)).count();
        assert_eq!(burst, REPUBLISH_BURST as usize);
        assert!(!d.may_republish(at(59), members), "nothing earned yet");
        assert!(d.may_republish(at(61), members), "one earned in 60 s");
        assert!(!d.may_republish(at(62), members));
        // A small overlay is held to the minimum gap, not to its size.
        let mut small = Discovery::new(NodeId([8; 16]), 1, at(0), Duration::from_secs(2));
        while small.may_republish(at(0), 4) {}
        assert!(!small.may_republish(at(9), 4));
        assert!(small.may_republish(at(11), 4));
        // A large one bursts less: every republish reaches every member.
        let mut large = Discovery::new(NodeId([9; 16]), 1, at(0), Duration::from_secs(2));
        assert_eq!(
            (0..10).filter(|_| large.may_republish(at(0), 1000)).count(),
            1
        );
        let mut huge = Discovery::new(NodeId([9; 16]), 1, at(0), Duration::from_secs(2));
        assert_eq!(
            (0..10).filter(|_| huge.may_republish(at(0), 5000)).count(),
            1
        );
    }

    #[test]
    fn news_of_the_links_is_republished_once_per_interval_whatever_the_size() {
        let at = |s: u64| Time::from_micros(s * 1_000_000);
        let every = Duration::from_secs(30);
        let mut d = Discovery::new(NodeId([7; 16]), 1, at(0), Duration::from_secs(2));
        while d.may_republish(at(0), 256) {}
        assert!(d.may_republish_bandwidth(at(1), every));
        assert!(!d.may_republish_bandwidth(at(30), every));
        assert!(d.may_republish_bandwidth(at(31), every), "not 256 s");
        assert!(
            !d.may_republish(at(31), 256),
            "the general allowance is untouched"
        );
    }
}
