//! The bridge to the collective engine: the overlay view it borrows and the commands it runs.
//!
//! Owns the collective engine and the measured cost of one send its in-cluster plans go
//! by ([`CollectiveBridge`]). The engine sees the rest of the core only through
//! [`CoreView`], borrowed for one call.

use super::Core;
use super::neighbours::Neighbours;
use super::shared::Sharing;
use super::trees::Trees;
use crate::proto::Command;
use crate::proto::collective::{Collectives, Overlay};
use crate::proto::config::Config;
use crate::proto::id::NodeId;
use crate::proto::membership::MemberTable;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// The collective engine and what it needs measured.
pub(super) struct CollectiveBridge {
    /// Broadcast, scatter, gather and reduce along the trees.
    pub(super) engine: Collectives,
    /// The cost of one send as the driver measured it (see
    /// [`Input::SendCost`](crate::proto::Input::SendCost)).
    send_cost: SendCostEstimate,
    /// The groups of every member with any, this node included (from their records).
    groups: HashMap<NodeId, Vec<String>>,
}

impl CollectiveBridge {
    /// The engine of node `id`.
    pub(super) fn new(id: NodeId) -> Self {
        CollectiveBridge {
            engine: Collectives::new(id),
            send_cost: SendCostEstimate::default(),
            groups: HashMap::new(),
        }
    }

    /// Member `id`'s groups are now `groups` (empty, or gone: none).
    pub(super) fn set_groups(&mut self, id: NodeId, groups: Vec<String>) {
        if groups.is_empty() {
            self.groups.remove(&id);
        } else {
            self.groups.insert(id, groups);
        }
    }

    /// The cost of one send: measured, else `configured`; and whether it is measured.
    pub(super) fn send_cost(&self, configured: Duration) -> (Duration, bool) {
        match self.send_cost.measured() {
            Some(c) => (c, true),
            None => (configured, false),
        }
    }

    /// One measurement of the cost of one send.
    pub(super) fn sample_send_cost(&mut self, per_send: Duration) {
        self.send_cost.sample(per_send);
    }
}

/// The overlay as the collective engine sees it: borrowed from the core's tables.
pub(super) struct CoreView<'a> {
    id: NodeId,
    config: &'a Config,
    members: &'a MemberTable,
    trees: &'a Trees,
    nbrs: &'a Neighbours,
    /// The cost of one send the plan goes by, µs.
    send_cost_us: u32,
    /// This node's discovered level-1 cluster (sorted, itself included), once discovery has
    /// put it in a group with others.
    cluster: Option<&'a [NodeId]>,
    /// The groups of every member with any.
    groups: &'a HashMap<NodeId, Vec<String>>,
    /// Whether and how the trees of a cluster's roots are shared outside it.
    sharing: Sharing<'a>,
}

impl Overlay for CoreView<'_> {
    fn me(&self) -> NodeId {
        self.id
    }
    fn alive_members(&self) -> &[NodeId] {
        self.members.alive()
    }
    fn is_alive(&self, id: &NodeId) -> bool {
        *id == self.id || self.members.is_alive(id)
    }
    fn children(&self, root: NodeId) -> Vec<NodeId> {
        self.sharing.children(self.trees, root)
    }
    fn rtt_us(&self, peer: NodeId) -> Option<u32> {
        self.nbrs.rtt_us(&peer)
    }
    fn plans(&self) -> bool {
        !self.config.cluster_rtt.is_zero()
    }
    fn in_cluster(&self, peer: &NodeId) -> bool {
        if !self.plans() {
            return false;
        }
        match self.cluster {
            Some(members) => members.binary_search(peer).is_ok(),
            // Before discovery has grouped this node: the peers within the bound.
            None => self
                .rtt_us(*peer)
                .is_some_and(|r| u128::from(r) <= self.config.cluster_rtt.as_micros()),
        }
    }
    fn send_cost_us(&self) -> u32 {
        self.send_cost_us
    }
    fn descendants_first(&self) -> bool {
        self.config.descendants_first
    }
    fn in_group(&self, id: &NodeId, group: &str) -> bool {
        self.is_alive(id)
            && self
                .groups
                .get(id)
                .is_some_and(|g| g.binary_search_by(|x| x.as_str().cmp(group)).is_ok())
    }
}

impl Core {
    /// Runs `f` on the collective engine with a view of the overlay.
    pub(super) fn with_collectives(&mut self, f: impl FnOnce(&mut Collectives, &CoreView<'_>)) {
        let view = CoreView {
            id: self.id,
            config: &self.config,
            members: &self.members,
            trees: &self.trees,
            nbrs: &self.nbrs,
            send_cost_us: self.send_cost().0.as_micros().min(u32::MAX as u128) as u32,
            cluster: (self.discovery.table.view().group_of(1, &self.id))
                .map(|g| g.members.as_slice())
                .filter(|m| m.len() > 1),
            groups: &self.coll.groups,
            sharing: Sharing::of(self.discovery.shared_on, &self.discovery.table),
        };
        f(&mut self.coll.engine, &view);
    }

    /// Runs an application command on the collective engine.
    pub(super) fn handle_collective_command(&mut self, cmd: Command) {
        let now = self.now;
        match cmd {
            Command::Leave => self.leave(),
            Command::Start(s) => self.with_collectives(|c, v| c.start(now, v, s)),
            Command::Publish { key, value } => {
                self.with_collectives(|c, v| c.publish(now, v, key, value))
            }
            Command::Withdraw { key } => self.coll.engine.withdraw(&key),
            Command::Contribute { op, value } => {
                self.with_collectives(|c, v| c.contribute(now, v, op, value))
            }
            Command::StreamDone { op, ok } => {
                self.with_collectives(|c, v| c.stream_done(now, v, op, ok))
            }
        }
    }
}

/// The measured cost of one send: the median of the last few samples, so that one burst
/// held up by something else (a stalled process, a blocked connection) does not move it.
#[derive(Clone, Debug, Default)]
struct SendCostEstimate {
    /// The latest samples, µs.
    recent: VecDeque<u32>,
    /// Their median (read for every operation a node relays; samples are rarer).
    median: Option<Duration>,
}

impl SendCostEstimate {
    /// Samples the median is taken over.
    const WINDOW: usize = 7;
    /// Samples are clamped to this range (µs).
    const RANGE_US: (u32, u32) = (1, 5_000);

    /// Takes one sample.
    fn sample(&mut self, per_send: Duration) {
        let us = per_send.as_micros().min(u128::from(u32::MAX)) as u32;
        if self.recent.len() == Self::WINDOW {
            self.recent.pop_front();
        }
        self.recent
            .push_back(us.clamp(Self::RANGE_US.0, Self::RANGE_US.1));
        let mut v: Vec<u32> = self.recent.iter().copied().collect();
        v.sort_unstable();
        self.median = v
            .get(v.len() / 2)
            .map(|&us| Duration::from_micros(u64::from(us)));
    }

    /// The median of the recent samples (the upper one of an even count: planning with too
    /// low a cost is the costlier mistake), once measured.
    fn measured(&self) -> Option<Duration> {
        self.median
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_cost_is_the_median_of_the_recent_samples_within_its_range() {
        let mut e = SendCostEstimate::default();
        assert_eq!(e.measured(), None);
        let us = Duration::from_micros;
        e.sample(us(100));
        assert_eq!(e.measured(), Some(us(100)));
        e.sample(us(300));
        assert_eq!(e.measured(), Some(us(300)), "the upper of two");
        // One burst held up for a second does not move it.
        e.sample(Duration::from_secs(1));
        assert_eq!(e.measured(), Some(us(300)));
        e.sample(us(40));
        e.sample(us(50));
        assert_eq!(e.measured(), Some(us(100)));
        // Only the last seven count.
        for _ in 0..4 {
            e.sample(us(20));
        }
        assert_eq!(e.measured(), Some(us(20)));
        let mut z = SendCostEstimate::default();
        z.sample(Duration::ZERO);
        assert_eq!(z.measured(), Some(us(1)));
    }
}
