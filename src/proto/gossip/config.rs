//! Timing, fan-out and join budget of the membership protocol.

use std::time::Duration;

/// Timing and fan-out of the membership protocol.
#[derive(Clone, Debug)]
pub struct GossipConfig {
    /// One member is probed per period.
    pub probe_interval: Duration,
    /// Wait this long for a direct ack before asking others to probe.
    pub probe_timeout: Duration,
    /// How many members are asked to probe indirectly.
    pub indirect_probes: usize,
    /// Minimum time a member stays suspect before it is declared dead; grows with the
    /// logarithm of the member count (Lifeguard).
    pub suspicion_timeout: Duration,
    /// Period of the push-pull `Sync` message with one random member.
    pub anti_entropy_interval: Duration,
    /// The period instead while the table keeps changing (news since the last push-pull):
    /// in a join storm rumors miss a few records per node, and push-pulls this often fill
    /// every table in a few seconds, where one every `anti_entropy_interval` took two or
    /// three of those periods. A settled table goes back to the long period.
    pub anti_entropy_fast_interval: Duration,
    /// Each update is piggybacked `retransmit_factor * ceil(log10(n + 1))` times (as in
    /// memberlist; rumors carry news first, piggybacking reaches the few they missed).
    pub retransmit_factor: usize,
    /// At most this many updates ride on one probe or ack.
    pub max_piggyback: usize,
    /// How long records of dead and departed members are kept (so late gossip about
    /// them cannot bring them back).
    pub tombstone_ttl: Duration,
    /// A join not answered within this time is sent again.
    pub join_retry: Duration,
    /// How many random members a node forwards news to (`Rumor` messages).
    pub rumor_fanout: usize,
    /// News that comes within this long of this node's last rumor push waits, and goes
    /// out with whatever else comes until then in one rumor per member pushed to: a storm
    /// of joins costs a node one push per gap, not one per join (at thousands of members
    /// the pushes of every join to every node were a third of all messages). News after a
    /// quiet spell goes out at once. Zero (the default): every piece of news is pushed
    /// when it comes. At 100 ms, on das-4 x7.5 (300 nodes), two seeds of four left one
    /// tree entering a cluster twice for a minute: the later news moved the trees' cold
    /// start onto a path the entry rules (DESIGN §3.9) do not yet settle quickly.
    pub rumor_gap: Duration,
    /// Records a second this node sends in full answers to joins (each costs the table's
    /// size); past them (and `join_burst` at once) a join gets a light answer and pulls
    /// the rest from another member ([`super::admission`]).
    pub join_rate: f64,
    /// Records in full answers to joins at once, before `join_rate` holds.
    pub join_burst: u32,
}

impl GossipConfig {
    /// Every period and timeout multiplied by `factor` (fan-outs unchanged): the same
    /// protocol on a slower clock, for many nodes sharing few cores.
    pub fn slowed(mut self, factor: u32) -> Self {
        let k = factor.max(1);
        self.probe_interval *= k;
        self.probe_timeout *= k;
        self.suspicion_timeout *= k;
        self.anti_entropy_interval *= k;
        self.anti_entropy_fast_interval *= k;
        self.join_retry *= k;
        self.rumor_gap *= k;
        self.join_rate /= k as f64;
        self
    }
}

impl Default for GossipConfig {
    fn default() -> Self {
        GossipConfig {
            probe_interval: Duration::from_millis(1000),
            probe_timeout: Duration::from_millis(500),
            indirect_probes: 3,
            suspicion_timeout: Duration::from_secs(3),
            anti_entropy_interval: Duration::from_secs(5),
            anti_entropy_fast_interval: Duration::from_secs(1),
            retransmit_factor: 4,
            max_piggyback: 8,
            tombstone_ttl: Duration::from_secs(300),
            join_retry: Duration::from_secs(1),
            rumor_fanout: 3,
            rumor_gap: Duration::ZERO,
            join_rate: 20_000.0,
            join_burst: 40_000,
        }
    }
}
