//! Local health, after Lifeguard (Dadgar et al., 2018): a node that is itself slow (its
//! core starved, its inbox backed up) sees acks arrive late and would declare healthy
//! members suspect, then dead. On a host running more nodes than it has cores, every node
//! did that at once: members were declared dead tens of thousands of times, each death
//! re-planned trees, and the extra work kept the host starved.
//!
//! The score rises when we must refute a suspicion of ourselves (others could not hear
//! from us in time: we may be the slow one), and falls with every probe of ours answered
//! in time. A probe period that ends without an ack does not raise it here: the member
//! may be dead or cut off, and a side of a partition would count every probe across it
//! (Lifeguard tells the cases apart with nacks from the indirect probers; not built).
//!
//! Probe timeouts, probe periods and the time a suspect is given to refute are all
//! stretched by `1 + score`, so a struggling node probes less, waits longer, and accuses
//! nobody on the strength of its own slowness. A healthy node (score 0) keeps the
//! configured timings.

use super::Gossip;
use std::time::Duration;

/// The highest score: timings stretched at most ninefold, as in Lifeguard.
pub const MAX_LOCAL_HEALTH: u32 = 8;

impl Gossip {
    /// How unhealthy this node believes itself to be, 0 (healthy) to
    /// [`MAX_LOCAL_HEALTH`].
    pub fn local_health(&self) -> u32 {
        self.health
    }

    /// Evidence that this node is slow.
    pub(super) fn health_worse(&mut self) {
        self.health = (self.health + 1).min(MAX_LOCAL_HEALTH);
    }

    /// Evidence that this node keeps up.
    pub(super) fn health_better(&mut self) {
        self.health = self.health.saturating_sub(1);
    }

    /// `base` stretched by the local health score.
    pub(super) fn stretched(&self, base: Duration) -> Duration {
        base * (1 + self.health)
    }
}
