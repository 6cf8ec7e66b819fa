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
    fn cluster_rtt_us(&self) -> u32 {
        self.config.cluster_rtt.as_micros().min(u32::MAX as u128) as u32
    }
    fn send_cost_us(&self) -> u32 {
        self.config.send_cost.as_micros().min(u32::MAX as u128) as u32
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
