//! A round of a group, as [`super::Group::rendezvous`] agreed it: its members and ranks,
//! what changed since, and the large allreduce over exactly its members.

use crate::api::{BulkOptions, BulkReport, Element, Node, NodeError, ReduceOp};
use crate::proto::NodeId;

/// How a group differs from one of its rounds ([`Round::changes`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundChanges {
    /// Live members of the group that are not in the round.
    pub joined: Vec<NodeId>,
    /// Members of the round no longer live in the group.
    pub left: Vec<NodeId>,
}

impl RoundChanges {
    /// Whether the group is still exactly the round's members.
    pub fn is_empty(&self) -> bool {
        self.joined.is_empty() && self.left.is_empty()
    }
}

/// One agreed round of a group: every member of it got the same epoch and member list.
#[derive(Clone)]
pub struct Round {
    /// The group.
    pub group: String,
    /// Grows with every round the group forms.
    pub epoch: u64,
    /// The members, sorted by id: a member's rank is its index here.
    pub members: Vec<NodeId>,
    /// This node's rank.
    pub rank: usize,
    /// The member that formed the round.
    pub coordinator: NodeId,
    pub(super) node: Node,
}

impl std::fmt::Debug for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Round")
            .field("group", &self.group)
            .field("epoch", &self.epoch)
            .field("members", &self.members)
            .field("rank", &self.rank)
            .finish()
    }
}

impl Round {
    /// This node's handle.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// How the group differs from the round now, as this node sees it: members of the
    /// group that are not in the round (they joined, or missed it) and members of the round
    /// that are gone or left the group. Empty both: the round is current. Members see
    /// changes at slightly different times; to move to a new round together, agree on it
    /// in a collective (as `examples/elastic_train.rs` does with a flag in each step).
    pub fn changes(&self) -> RoundChanges {
        let now = match self.node.group(&self.group) {
            Ok(g) => g.members(),
            Err(_) => Vec::new(),
        };
        RoundChanges {
            joined: now
                .iter()
                .filter(|m| !self.members.contains(m))
                .copied()
                .collect(),
            left: (self.members.iter())
                .filter(|m| !now.contains(m))
                .copied()
                .collect(),
        }
    }

    /// Ok while every member of the round is alive; else [`NodeError::RoundBroken`] naming
    /// the first one gone.
    pub fn check(&self) -> Result<(), NodeError> {
        match self.members.iter().find(|m| !self.node.is_live(**m)) {
            None => Ok(()),
            Some(m) => Err(self.broken(format!("member {} is gone", m.short()))),
        }
    }

    fn broken(&self, reason: String) -> NodeError {
        NodeError::RoundBroken {
            group: self.group.clone(),
            epoch: self.epoch,
            reason,
        }
    }

    /// Options that make any large collective run over exactly this round's members
    /// ([`BulkOptions::members`]), e.g. `node.gather_pieces(name, root, piece,
    /// round.bulk_options())`; compare the report's contributors with `members`.
    pub fn bulk_options(&self) -> BulkOptions {
        BulkOptions {
            members: Some(self.members.clone()),
            ..BulkOptions::default()
        }
    }

    /// A large allreduce over exactly this round's members ([`Node::allreduce_slice`]):
    /// every member calls it with the same `name` and length. If a member is lost
    /// meanwhile, the result would not cover the round: [`NodeError::RoundBroken`].
    pub async fn allreduce_slice<T: Element>(
        &self,
        name: &str,
        data: &mut [T],
        op: ReduceOp,
    ) -> Result<BulkReport, NodeError> {
        self.check()?;
        let options = self.bulk_options();
        let name = format!("round/{}/{}/{name}", self.group, self.epoch);
        let report = self
            .node
            .allreduce_slice_with(&name, data, op, options)
            .await;
        let report = report.map_err(|e| self.broken(e.to_string()))?;
        if report.contributors != self.members {
            let lost: Vec<String> = (self.members.iter())
                .filter(|m| !report.contributors.contains(m))
                .map(|m| m.short())
                .collect();
            return Err(self.broken(format!("lost {}", lost.join(", "))));
        }
        Ok(report)
    }
}
