//! When a connection without stream data is closed ([`IdleLimits`]): after the protocol's
//! longest gap between two probes of a peer in use, longer in a large overlay (a round of
//! membership probes), and soon for one opened only to measure.

use std::time::Duration;

/// A connection without stream data for this long is closed.
pub const LINK_IDLE: Duration = Duration::from_secs(20);
/// The same for a connection that only ever carried measurements.
pub const MEASURE_IDLE: Duration = Duration::from_secs(3);
/// The longest a link to a member is kept without stream data, however many members.
pub const MOST_MEMBER_IDLE: Duration = Duration::from_secs(300);

/// When connections without stream data are closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdleLimits {
    /// A connection that carried protocol traffic.
    pub link: Duration,
    /// A connection that only ever carried measurements.
    pub measure: Duration,
    /// A connection that carried protocol traffic is also kept this long per live member
    /// (up to [`MOST_MEMBER_IDLE`]): membership probes one member a period, round robin,
    /// so a link to a member that is not otherwise used carries a probe about every
    /// members x period. Kept that long, the next probe finds it open instead of paying a
    /// handshake (which costs both ends more than a minute of an idle link's traffic:
    /// nothing, as links send no keep-alives).
    pub per_member: Duration,
}

impl IdleLimits {
    /// The limits for a core configured so: [`LINK_IDLE`], or four of its longest regular
    /// period (serials, probes), or the longest gap between two probes of a backed-off
    /// peer plus a probe period, where that is longer; and [`MEASURE_IDLE`]. A child
    /// probes its parents and a node its candidates at least once per
    /// `probe_backoff_max` + 1 rounds (a round jittered by up to a quarter; tree state
    /// itself travels only when it changes), so neither link idles out however slow the
    /// clock (`Config::slowed`, `Config::dilated`), while links that gossip alone used
    /// still close.
    ///
    /// `per_member` is one and a half membership probe periods (`gossip_probe`): the
    /// round robin visits a member about once per members x period, late by up to a
    /// period when the order is shuffled again.
    pub fn for_config(config: &crate::proto::Config, gossip_probe: Duration) -> IdleLimits {
        let period = config.serial_period.max(config.probe_interval);
        let rounds = config.longest_probe_backoff() + 1;
        let probe_gap = config.probe_interval * rounds * 5 / 4 + config.probe_interval;
        IdleLimits {
            link: LINK_IDLE.max(period * 4).max(probe_gap),
            measure: MEASURE_IDLE,
            per_member: gossip_probe * 3 / 2,
        }
    }

    /// How long a connection goes without stream data before it is closed, with
    /// `members` live members.
    pub fn limit(&self, measure_only: bool, members: usize) -> Duration {
        if measure_only {
            return self.measure;
        }
        let by_members = (self.per_member).saturating_mul(members.min(u32::MAX as usize) as u32);
        self.link.max(by_members.min(MOST_MEMBER_IDLE))
    }

    /// The longest [`IdleLimits::limit`] can be: the QUIC idle timeout must be longer.
    pub fn most(&self) -> Duration {
        self.link.max(MOST_MEMBER_IDLE)
    }
}
