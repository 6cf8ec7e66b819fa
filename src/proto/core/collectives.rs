//! The bridge to the collective engine: the overlay view it borrows and the commands it runs.

use super::*;

/// The overlay as the collective engine sees it: borrowed from the core's tables.
pub(super) struct CoreView<'a> {
    id: NodeId,
    config: &'a Config,
    members: &'a MemberTable,
    root_index: &'a HashMap<NodeId, RootIdx>,
    trees: &'a [Option<TreeState>],
    rtt: &'a HashMap<NodeId, RttEstimator>,
    /// This node's discovered level-1 cluster (sorted, itself included), once discovery has
    /// put it in a group with others.
    cluster: Option<&'a [NodeId]>,
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
        self.root_index
            .get(&root)
            .and_then(|&i| self.trees[i].as_ref())
            .map(|t| t.children.iter().copied().collect())
            .unwrap_or_default()
    }
    fn rtt_us(&self, peer: NodeId) -> Option<u32> {
        self.rtt.get(&peer).and_then(|e| e.rtt_us())
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
        self.config.send_cost.as_micros().min(u32::MAX as u128) as u32
    }
    fn descendants_first(&self) -> bool {
        self.config.descendants_first
    }
}

impl Core {
    /// Runs `f` on the collective engine with a view of the overlay.
    pub(super) fn with_collectives(&mut self, f: impl FnOnce(&mut Collectives, &CoreView<'_>)) {
        let view = CoreView {
            id: self.id,
            config: &self.config,
            members: &self.members,
            root_index: &self.root_index,
            trees: &self.trees,
            rtt: &self.rtt,
            cluster: (self.discovery.table.view().group_of(1, &self.id))
                .map(|g| g.members.as_slice())
                .filter(|m| m.len() > 1),
        };
        f(&mut self.coll, &view);
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
            Command::Withdraw { key } => self.coll.withdraw(&key),
            Command::Contribute { op, value } => {
                self.with_collectives(|c, v| c.contribute(now, v, op, value))
            }
            Command::StreamDone { op, ok } => {
                self.with_collectives(|c, v| c.stream_done(now, v, op, ok))
            }
        }
    }
}
