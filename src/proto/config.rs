//! Protocol configuration: plain structs with public fields and presets.

use std::time::Duration;

/// Tunables of the core. Start from a preset ([`Config::wan`], [`Config::lan`],
/// [`Config::test`]) and change fields as needed.
#[derive(Clone, Debug)]
pub struct Config {
    /// The protocol's round: housekeeping (re-judging trees, expiring state) runs once per
    /// period, requests are rate limited per period, and repair and convergence are
    /// counted in periods. A root does not push a new serial every period: see
    /// [`Config::serial_refresh`].
    pub serial_period: Duration,
    /// A root increments its serial when a node asks for a newer one (a node without a
    /// path, or one whose feasibility distance blocks a better parent: Babel's seqno
    /// request), and otherwise only this often, stretched in a large overlay so the
    /// refresh costs a node at most `refresh_entries_per_s` entries per second on average
    /// whatever the number of trees (a thousand roots refresh every 500 s). Tree state
    /// travels when it changes; a parent that is gone is found by the membership protocol
    /// and the transport, not by its serials ageing.
    pub serial_refresh: Duration,
    /// Adverts to candidates are batched: changed tree state is flushed at most this often.
    pub advert_interval: Duration,
    /// While tree state keeps changing (each flush of changes within two gaps of the
    /// last), the gap between flushes doubles, up to this; one quiet gap brings it back to
    /// `advert_interval`. As OSPF throttles its LSAs: a lone change still goes out within
    /// `advert_interval`, while forming trees, whose changes come without pause, send one
    /// frame per candidate per gap instead of one per `advert_interval`. Every frame costs
    /// a packet, and packets are what a node's CPU is spent on. Equal to
    /// `advert_interval`: no throttling.
    pub advert_max_interval: Duration,
    /// Drift (a connected tree whose dist moved by at most a twentieth plus 250 µs: a hop
    /// re-measured, a parent moved inside its cluster) is advertised at most this often,
    /// or with the next flush of a real change. A node has a few dozen candidates, so a
    /// dist change of one tree sent at once costs that many messages; batched, one
    /// message per candidate carries the drift of many trees. Zero sends drift as any
    /// change. 2 s by default (see `rtt_hold` for what the quieting options save).
    pub advert_drift_interval: Duration,
    /// Bytes per second a node may spend on adverts (changes and full adverts) to peers
    /// beyond its cluster (farther than a tenth of `shortcut_threshold`, or not measured),
    /// on average, with bursts of up to one second's worth. Beyond it their adverts wait,
    /// and changes of one tree in the meantime go out as one entry: while a thousand trees
    /// form at once this keeps a node's wide-area traffic bounded (requests, answers and
    /// pushes to children are not limited).
    pub advert_budget: u32,
    /// The same for adverts to cluster neighbours (within a tenth of
    /// `shortcut_threshold`), which cross only the local network. Two entries into one
    /// cluster merge when its members hear each other's dists: at 1000 nodes, with one
    /// budget of 256 KiB/s for all, that waited for the budget and half the cold start
    /// went by with clusters entered twice.
    pub advert_budget_near: u32,
    /// Every this many serial periods, a node re-sends its full tree state to each
    /// candidate (anti-entropy: the transport is reliable and lost messages are resent
    /// (`Input::LinkLost`), so this is a safety net).
    pub full_advert_every: u32,
    /// Periodic refreshes carry at most this many entries per second on average, to one
    /// candidate (full adverts) and from one root (unrequested serials): with more trees
    /// `full_advert_every` and `serial_refresh` are stretched, so the refreshes do not
    /// grow with the overlay.
    pub refresh_entries_per_s: u32,
    /// A new explorer, or a new peer that watches us, is sent our state in at most this
    /// many trees, those of the roots nearest us (where we could be its entry into our
    /// part of the network), not our full state: at a thousand trees a full state per
    /// explorer rotation was a third of a settled node's traffic.
    pub explorer_sample: usize,
    /// How often each watched peer is probed for RTT (jittered by up to a quarter).
    pub probe_interval: Duration,
    /// A watched peer whose RTT estimate has held still for `steady_samples` samples (it
    /// moved by at most a twentieth plus 50 µs) is probed only every this many rounds,
    /// parents included; a peer whose estimate moves is probed every round again at once. 1 probes everyone every round; 3 by default. Probes and their
    /// answers are most of what an idle node sends, and every packet costs a wake-up.
    /// Raise `inbound_expiry` with it (see there).
    pub probe_backoff: u32,
    /// See `probe_backoff`.
    pub steady_samples: u32,
    /// The longest backoff, in rounds: a peer still steady after `steady_samples` more
    /// samples at its backoff has it doubled, up to this (12 by default: a peer whose RTT
    /// has held for about three minutes is probed every 12 rounds). Probes were still most
    /// of a settled node's frames at a backoff of 3, and a node's CPU follows its
    /// datagrams. Raise `inbound_expiry` with it (see there); at or below
    /// `probe_backoff`, no doubling.
    pub probe_backoff_max: u32,
    /// A node that gets a probe from a peer it watches answers with a
    /// [`crate::proto::Message::PongPing`] when its own probe of that peer is due (three
    /// quarters of its period have passed since the last sample): one exchange of three
    /// frames measures both ends where two took four. With or without it, a round skips
    /// a peer sampled within three quarters of its period. On by default; off only to
    /// measure the difference.
    pub merge_probes: bool,
    /// The shortcut rule: a switch that shortens dist by more than this is taken even if the
    /// new parent is farther; and a switch under rules (1)-(4) may not lengthen dist by more.
    pub shortcut_threshold: Duration,
    /// Flat clusters: a node under a cluster neighbour moves to another, not clearly
    /// farther, when that shortens its dist by more than two of its hops and 450 µs (see
    /// the tree rules, `proto::tree`). Keeps a large cluster's part of each tree shallow
    /// (scale-1000 x5: trees 20 levels deep on average, not 42, and no cluster entered
    /// twice after the cold start). Off by default: on phoenix-168 with membership it
    /// raised the settled traffic by about 40 % (parent queries and adverts after the
    /// moves), and the moves trickle on for a minute after the trees are optimal.
    pub flatten_clusters: bool,
    /// How many of the lowest-RTT peers found so far are kept as candidates.
    pub max_near: usize,
    /// How many random peers are kept as explorers, one rotated every `explore_rotate`,
    /// while this node's trees or members change; fewer (at least one) once they hold
    /// still and the rotation slows down. An explorer measured enough to be judged is
    /// probed every `probe_backoff` rounds, not every round.
    pub explorers: usize,
    /// How often one explorer is replaced by a random member while this node's trees or
    /// members change. Each rotation after which nothing changed doubles the gap, up to
    /// eight times this; a parent switch or a member coming or going restores it.
    pub explore_rotate: Duration,
    /// How many peers learnt through parent hints may be watched at once.
    pub max_hinted: usize,
    /// How many not-yet-measured members are probed once per probe round, so every member
    /// is measured once and the nearest ones are found quickly (then only the candidate
    /// set is probed).
    pub sweep_per_round: usize,
    /// In a large overlay the sweep probes more members per round (at least
    /// `sweep_per_round`), so that meeting every member takes about this many rounds.
    /// Parent queries, introductions and entry notices wait for the sweep to end, so its
    /// length bounds convergence: at a thousand nodes, four rounds instead of eight
    /// brought 98 % of the trees to wide-area optimal 4 s sooner (7 s against 11 s). A
    /// shorter sweep once left a few clusters entered twice for good, judged on samples
    /// taken in its rush; entry notices (DESIGN §3.9) make the entries meet again.
    pub sweep_rounds: usize,
    /// The sweep measures at most this many members, a random sample of them; past it a
    /// node measures where cluster discovery points (DESIGN §3.12): every member of its
    /// own discovered cluster, and one member of every other cluster it has no sample
    /// of. A node then measures O(sample + cluster + clusters) peers instead of every
    /// member, the all-pairs probing that kept thousands of nodes out of reach. `None`
    /// (the default): every member is measured, as the paper does.
    ///
    /// ```
    /// let config = overlay::Config { sweep_limit: Some(256), ..overlay::Config::wan() };
    /// assert_eq!(config.sweep_limit, Some(256));
    /// ```
    pub sweep_limit: Option<usize>,
    /// How many RTT samples the min-filter keeps per peer.
    pub rtt_window: usize,
    /// The RTT estimate follows the window's minimum down at once but up only past a band
    /// (a fiftieth plus 20 µs), so the creep of a min filter does not move dists in every
    /// tree. On by default. With it, `advert_drift_interval` at 2 s and `probe_backoff` 3
    /// (the defaults), a settled node of 40 on the netns testbed sent 43% fewer frames and
    /// used 22% less CPU than with all three off. They were off until tree state lost
    /// around a healed partition was found and fixed (DESIGN §4.4): the creep they remove
    /// had been resending tree state every second or so, which hid that loss.
    pub rtt_hold: bool,
    /// A root answers serial requests at most this often.
    pub serial_request_gap: Duration,
    /// A peer that probes us (with `watch`) gets our adverts until it has been quiet for
    /// four of its own last gaps between two such probes (at least three
    /// `probe_interval`s), and at most this long; this long until it has probed twice. It
    /// must exceed the longest gap between two probes of a backed-off peer
    /// (`probe_backoff_max` + 1 rounds, a round being up to 1.25 `probe_interval`).
    pub inbound_expiry: Duration,
    /// Collective operations spread inside this node's cluster by a planned schedule
    /// instead of along the tree (zero: never). The cluster is the level-1 group cluster
    /// discovery finds; until it has found one, the peers within this RTT.
    pub cluster_rtt: Duration,
    /// The cost of sending one message, as that schedule assumes it.
    pub send_cost: Duration,
    /// A relay passes an operation to the child with the most descendants first (the
    /// paper's future work: the longest subtree starts soonest). `false` sends in id order,
    /// which only serves to measure the difference (`bench fig5`).
    pub descendants_first: bool,
    /// Cluster discovery: a group of members stands as a level of its own when the
    /// latency joining it to the rest is more than this factor above the latency inside it
    /// (see the clusters module of the protocol).
    pub cluster_gap: f64,
    /// Cluster discovery: RTTs below this count as this much, so the jitter of a LAN or of
    /// loopback does not split it.
    pub cluster_floor: Duration,
    /// Cluster discovery: how often a node compares its table of summaries with a random
    /// member (anti-entropy; new summaries are pushed at once).
    pub cluster_sync: Duration,
    /// Bandwidth measurement: how many members of each discovered cluster (those with the
    /// smallest ids) ask the other clusters for packet trains; 0 turns probing off.
    pub bw_probers: usize,
    /// How often a prober asks each other cluster for a train once the overlay has settled
    /// (its first three rounds come every 2 s; trains to one cluster are spaced further if
    /// they would take more than 1% of its estimated capacity).
    pub bw_probe_interval: Duration,
    /// Bytes per second of trains a node sends at most on average when asked (a token
    /// bucket holding one minute of it).
    pub bw_budget: u32,
    /// From this many members on (this node included; off again below nine tenths of it),
    /// the roots of one discovered cluster share their tree outside it: a node outside the
    /// cluster keeps no tree for them, and
    /// their operations leave the cluster along the tree of its smallest-id member
    /// (`docs/DESIGN.md` §3.11). A node then keeps one tree per member of its cluster and
    /// one per other cluster, not one per member. The cost: a tree starts only once
    /// cluster discovery has placed its root, and operations leave their cluster where the
    /// shared tree does. `None` (the default): every root has a tree of its own
    /// everywhere, the paper's design.
    ///
    /// ```
    /// let config = overlay::Config { shared_trees_from: Some(1000), ..overlay::Config::wan() };
    /// assert_eq!(config.shared_trees_from, Some(1000));
    /// ```
    pub shared_trees_from: Option<usize>,
}

impl Config {
    /// Defaults for wide-area deployments.
    pub fn wan() -> Self {
        Config {
            serial_period: Duration::from_secs(1),
            serial_refresh: Duration::from_secs(60),
            advert_interval: Duration::from_millis(50),
            advert_max_interval: Duration::from_millis(400),
            advert_drift_interval: Duration::from_secs(2),
            advert_budget: 256 * 1024,
            advert_budget_near: 1024 * 1024,
            full_advert_every: 60,
            refresh_entries_per_s: 2,
            explorer_sample: 16,
            probe_interval: Duration::from_secs(1),
            probe_backoff: 3,
            steady_samples: 20,
            probe_backoff_max: 12,
            merge_probes: true,
            shortcut_threshold: Duration::from_millis(10),
            flatten_clusters: false,
            max_near: 16,
            explorers: 4,
            explore_rotate: Duration::from_secs(2),
            max_hinted: 8,
            sweep_per_round: 32,
            sweep_rounds: 4,
            sweep_limit: None,
            rtt_window: 64,
            rtt_hold: true,
            serial_request_gap: Duration::from_millis(20),
            inbound_expiry: Duration::from_secs(20),
            cluster_rtt: Duration::from_millis(2),
            send_cost: Duration::from_micros(30),
            descendants_first: true,
            cluster_gap: 2.0,
            cluster_floor: Duration::from_micros(500),
            cluster_sync: Duration::from_secs(2),
            bw_probers: 2,
            bw_probe_interval: Duration::from_secs(30),
            bw_budget: 4096,
            shared_trees_from: None,
        }
    }

    /// Defaults for a single data centre: faster periods, same rules.
    pub fn lan() -> Self {
        Config {
            serial_period: Duration::from_millis(500),
            advert_interval: Duration::from_millis(20),
            advert_max_interval: Duration::from_millis(160),
            probe_interval: Duration::from_millis(500),
            explore_rotate: Duration::from_secs(1),
            inbound_expiry: Duration::from_secs(10),
            cluster_sync: Duration::from_secs(1),
            ..Self::wan()
        }
    }

    /// Fast settings for tests.
    pub fn test() -> Self {
        Self::lan()
    }

    /// The longest probe backoff in rounds that a steady peer reaches: `probe_backoff_max`,
    /// or `probe_backoff` where that is larger (then no doubling), at least 1.
    pub fn longest_probe_backoff(&self) -> u32 {
        self.probe_backoff_max.max(self.probe_backoff).max(1)
    }

    /// Every period multiplied by `factor`; latencies, thresholds and sizes unchanged. The
    /// same protocol on a slower clock: fewer messages per second, the same trees, slower
    /// convergence. For many nodes sharing few cores (the in-process benchmarks).
    pub fn slowed(mut self, factor: u32) -> Self {
        let k = factor.max(1);
        self.serial_period *= k;
        self.serial_refresh *= k;
        self.advert_interval *= k;
        self.advert_max_interval *= k;
        self.advert_drift_interval *= k;
        self.probe_interval *= k;
        self.explore_rotate *= k;
        self.serial_request_gap *= k;
        self.inbound_expiry *= k;
        self
    }

    /// For a network in time dilated by `factor` (see
    /// `Topology::dilated` of the simulator feature): every period slowed as by
    /// [`Config::slowed`], and every latency threshold (`shortcut_threshold`, `cluster_rtt`,
    /// `cluster_floor`) multiplied too, so the protocol makes the decisions it makes on the
    /// undilated network; `cluster_sync`, a period [`Config::slowed`] leaves as it is, too.
    /// `send_cost` is CPU time, which dilation does not stretch, and is unchanged.
    pub fn dilated(self, factor: u32) -> Self {
        let k = factor.max(1);
        let mut c = self.slowed(k);
        c.shortcut_threshold *= k;
        c.cluster_rtt *= k;
        c.cluster_floor *= k;
        c.cluster_sync *= k;
        c.bw_probe_interval *= k;
        c
    }

    /// The size of the candidate set a node measures and advertises to: near peers plus
    /// explorers plus hinted peers (tree neighbours and inbound probers come on top).
    pub fn candidate_bound(&self) -> usize {
        self.max_near + self.explorers + self.max_hinted
    }

    /// The grouping rule of cluster discovery, from `cluster_gap` and `cluster_floor`.
    pub(crate) fn cluster_params(&self) -> crate::proto::clusters::ClusterParams {
        crate::proto::clusters::ClusterParams {
            gap: self.cluster_gap,
            floor_us: self.cluster_floor.as_micros().min(u32::MAX as u128) as u32,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self::wan()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dilated_stretches_periods_and_latency_thresholds_but_not_cpu_costs() {
        let c = Config::wan();
        let d = Config::wan().dilated(20);
        assert_eq!(d.serial_period, c.serial_period * 20);
        assert_eq!(d.probe_interval, c.probe_interval * 20);
        assert_eq!(d.advert_interval, c.advert_interval * 20);
        assert_eq!(d.shortcut_threshold, c.shortcut_threshold * 20);
        assert_eq!(d.cluster_rtt, c.cluster_rtt * 20);
        assert_eq!(d.cluster_floor, c.cluster_floor * 20);
        assert_eq!(d.send_cost, c.send_cost);
        assert_eq!(d.max_near, c.max_near);
        // Slowing alone leaves the latency thresholds.
        let s = Config::wan().slowed(20);
        assert_eq!(s.serial_period, d.serial_period);
        assert_eq!(s.shortcut_threshold, c.shortcut_threshold);
    }
}
