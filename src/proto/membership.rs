//! The member table. Members arrive, leave and die as inputs (the network layer's gossip
//! and failure detector produce them); the table remembers departures so that late
//! messages from departed members are ignored.

use super::id::IdMap;
use super::id::NodeId;

/// State of a member as this node knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemberState {
    /// Taking part.
    Alive,
    /// Announced its departure.
    Left,
    /// Declared dead by the failure detector.
    Dead,
}

/// Every member this node has heard of, with its state.
#[derive(Clone, Debug, Default)]
pub struct MemberTable {
    members: IdMap<NodeId, MemberState>,
    alive: Vec<NodeId>,
}

impl MemberTable {
    /// Marks `id` alive; returns true if that is news (new, or back after leaving or dying).
    pub fn up(&mut self, id: NodeId) -> bool {
        let prev = self.members.insert(id, MemberState::Alive);
        if prev == Some(MemberState::Alive) {
            return false;
        }
        self.alive.push(id);
        true
    }

    /// Marks `id` departed; returns true if it was alive.
    pub fn down(&mut self, id: NodeId, state: MemberState) -> bool {
        debug_assert_ne!(state, MemberState::Alive);
        let prev = self.members.insert(id, state);
        if prev != Some(MemberState::Alive) {
            return false;
        }
        if let Some(pos) = self.alive.iter().position(|m| *m == id) {
            self.alive.swap_remove(pos);
        }
        true
    }

    /// Whether `id` is currently alive.
    pub fn is_alive(&self, id: &NodeId) -> bool {
        self.members.get(id) == Some(&MemberState::Alive)
    }

    /// The alive members, in no particular order (indexable for random sampling).
    pub fn alive(&self) -> &[NodeId] {
        &self.alive
    }

    /// Every member ever seen, with its state, sorted by id.
    pub fn sorted(&self) -> Vec<(NodeId, MemberState)> {
        let mut v: Vec<(NodeId, MemberState)> =
            self.members.iter().map(|(k, v)| (*k, *v)).collect();
        v.sort_unstable_by_key(|(k, _)| *k);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_down_and_rejoin() {
        let mut t = MemberTable::default();
        let a = NodeId::from_seed(0, 1);
        assert!(t.up(a));
        assert!(!t.up(a));
        assert!(t.is_alive(&a));
        assert!(t.down(a, MemberState::Dead));
        assert!(!t.down(a, MemberState::Left));
        assert!(!t.is_alive(&a));
        assert!(t.alive().is_empty());
        assert!(t.up(a), "a restarted node can rejoin");
        assert_eq!(t.alive(), &[a]);
    }
}
