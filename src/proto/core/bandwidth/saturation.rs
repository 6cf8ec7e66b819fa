//! QUIC's path statistics as a passive measurement: a connection that backed off for
//! congestion while it carried data ran its path full, so what it delivered meanwhile is
//! about what the path toward its peer carries ([`crate::proto::Input::PathSaturated`]).
//!
//! The estimates are inbound, held by the receiving cluster's members, so the sender passes
//! the figure on ([`Message::PathSaturated`], at most once per [`TELL_EVERY`] per peer)
//! to the receiver and to the receiving cluster's probers (its `bw_probers` smallest ids):
//! the cluster matrix is the median of what that cluster's members measured, so the
//! receiver alone, if it is no prober, could not move it. Each compares the figure with
//! what it holds from the sender (its own estimate, or the matrix's figure for the pair):
//! far below (outside [`SURPRISE`]) the sender's cluster is rechecked at once, as after a
//! surprising train, but nothing is recorded until a train confirms it. A saturated
//! window says the path carried *at least* that much while the sender had data: one in
//! which the sender waited for its own upstream half the time, or shared the link with
//! other connections, reads low, and costs a train. So a link that slowed under an
//! overlay is learnt from the first transfer that runs into it, with trains once that
//! transfer ends, instead of at the next routine round (`bw_probe_interval`).

use super::SURPRISE;
use crate::proto::core::Core;
use crate::proto::id::NodeId;
use crate::proto::message::Message;
use std::time::Duration;

/// At most one report per this long from one node to one peer that their path ran full.
pub const TELL_EVERY: Duration = Duration::from_secs(10);

impl Core {
    /// This node's connection to `to` ran its path full while it delivered `bytes` over
    /// `span`: tell `to` and its cluster's probers, at most once per [`TELL_EVERY`].
    pub(in crate::proto::core) fn handle_path_saturated(
        &mut self,
        to: NodeId,
        bytes: u64,
        span: Duration,
    ) {
        if span.is_zero() || to == self.id || !self.members.is_alive(&to) {
            return;
        }
        self.bw.stats.paths_saturated += 1;
        let now = self.now;
        let told = self.bw.told_saturated.get(&to);
        if told.is_some_and(|t| now.saturating_since(*t) < TELL_EVERY) {
            return;
        }
        // Inside this node's cluster the rate only sizes the fan-out: nobody rechecks it.
        let groups = self.clusters().partition(1);
        let Some(mut theirs) = groups.into_iter().find(|g| g.contains(&to)) else {
            return;
        };
        if theirs.contains(&self.id) {
            return;
        }
        self.bw.told_saturated.insert(to, now);
        theirs.sort_unstable();
        theirs.truncate(self.config.bw_probers);
        let kbps = bytes as f64 * 8.0 / span.as_secs_f64() / 1e3;
        let kbps = kbps.clamp(1.0, u32::MAX as f64) as u32;
        let mut told = vec![to];
        told.extend(theirs.into_iter().filter(|p| *p != to));
        for peer in told {
            if self.members.is_alive(&peer) {
                self.send(peer, Message::PathSaturated { kbps });
            }
        }
    }

    /// `from` says its connection toward this node's cluster ran full at `kbps`: if that
    /// is far below what this node holds from `from` (its own estimate, or the matrix's
    /// figure), `from`'s cluster is measured again.
    pub(in crate::proto::core) fn handle_path_saturated_heard(&mut self, from: NodeId, kbps: u32) {
        if !self.members.is_alive(&from) {
            return;
        }
        let Some(name) = self.other_cluster_name(&from) else {
            return;
        };
        let held = self.bw.estimate(&from).or_else(|| {
            let view = self.bandwidth_view();
            view.bps(view.cluster_of(&from)?, view.cluster_of(&self.id)?)
        });
        let Some(held) = held else {
            return;
        };
        let bps = kbps as f64 * 1e3;
        if bps * SURPRISE >= held {
            return;
        }
        let interval = self.config.bw_probe_interval;
        if self
            .bw
            .suspect_by_path(self.now, name, (from, bps), held, interval)
        {
            self.bw.stats.saturations_rechecked += 1;
        }
    }
}
