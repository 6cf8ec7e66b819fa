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
//! It also rises at the end of a probe period in which the node's event loop ran late
//! (the driver reports how far behind a timer fired, [`Gossip::handle_lateness`]) by a
//! tenth of the probe timeout or more: the host is short of CPU, so the acks we wait for
//! and the refutations we give others time for are late on our side too. When every node
//! of a host is starved at once (a hundred processes on two cores) no node refutes
//! suspicions in time, so the first rule alone never fires, and each false death (a
//! closed connection, trees re-planned, a new handshake) starved the host further.
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

    /// The node's event loop ran `late` behind one of its deadlines (a timer that fired
    /// that long after it was due). A period with lateness of a tenth of the probe timeout
    /// or more counts as evidence that this node is slow.
    ///
    /// ```
    /// # use overlay::proto::gossip::{Gossip, GossipConfig};
    /// # use overlay::proto::{NodeId, Time};
    /// # use std::time::Duration;
    /// let mut g = Gossip::new(NodeId::from_seed(1, 1), "a".into(),
    ///     "127.0.0.1:7000".parse().unwrap(), 1, GossipConfig::default(), 1, Time::ZERO);
    /// g.handle_lateness(Duration::from_millis(300));
    /// assert_eq!(g.local_health(), 0, "judged when the probe period ends");
    /// ```
    pub fn handle_lateness(&mut self, late: Duration) {
        self.late_max = self.late_max.max(late);
    }

    /// Whether the node ran late in the probe period now ending (and a fresh start for the
    /// next).
    pub(super) fn take_ran_late(&mut self) -> bool {
        std::mem::take(&mut self.late_max) >= self.config.probe_timeout / 10
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
