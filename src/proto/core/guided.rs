//! Summary-guided measuring: which members a node measures once its sweep took only a
//! sample of them ([`crate::proto::Config::sweep_limit`], DESIGN §3.12).
//!
//! Cluster discovery needs a node's row to hold its own cluster and the links to the
//! others; trees need the nearest peers, and any one member of a remote cluster stands
//! for the latency to all of it. So past the sample, a probe round adds, up to a budget:
//! the members of this node's discovered level-1 cluster it has no sample of (and of any
//! group holding a peer it measured as near as its nearest), then one
//! random member of each other cluster it has no sample of (a few clusters a round, round
//! robin, so a round costs what the node measured, its cluster and 16 clusters, not
//! O(members)). A node whose cluster mates were
//! all missed by the sample stands alone at first; the member of its cluster it then
//! measures is its nearest peer, its next summary says so, and discovery puts it in its
//! cluster, whose other members the next rounds measure.

use super::Core;
use crate::proto::id::NodeId;

/// Clusters looked at per probe round for a member to sample.
const GROUPS_PER_ROUND: usize = 16;

/// Where the round-robin over the other clusters stands.
#[derive(Default)]
pub(super) struct Guide {
    /// Index of the next level-1 group to look at.
    next_group: usize,
    /// Whether the last round found members to measure: the row is still filling in.
    filling: bool,
}

impl Guide {
    /// Whether the last probe round found members discovery points to and this node had
    /// not measured: its row is still filling in.
    pub(super) fn filling(&self) -> bool {
        self.filling
    }
}

impl Core {
    /// Up to `max` members to measure this round, where discovery points: unmeasured
    /// members of this node's cluster first, then one member of each cluster without a
    /// sample.
    pub(super) fn guided_targets(&mut self, max: usize) -> Vec<NodeId> {
        let mut out = Vec::new();
        let view = self.discovery.table.view();
        let Some(groups) = view.levels.first() else {
            return out;
        };
        let unmeasured =
            |p: &NodeId| *p != self.id && self.members.is_alive(p) && !self.nbrs.measured(p);
        // This node's cluster: its own group, and the group of every peer it measured as
        // near as its nearest by the discovery rule. Measuring only its own group would
        // keep a cluster that discovery split (rows of samples can) split for good: each
        // part's rows would name only its own members.
        let params = self.config.cluster_params();
        let nearest = self.nbrs.measured_rtts().map(|(_, r)| r).min();
        let mut near: Vec<NodeId> = self
            .discovery
            .table
            .cluster_rep(&self.id)
            .into_iter()
            .collect();
        if let Some(nearest) = nearest {
            near.extend(
                self.nbrs
                    .measured_rtts()
                    .filter(|&(_, r)| !params.is_gap(nearest, r))
                    .filter_map(|(p, _)| self.discovery.table.cluster_rep(&p)),
            );
        }
        near.sort_unstable();
        near.dedup();
        for label in near {
            if let Ok(i) = groups.binary_search_by_key(&label, |g| g.label) {
                let left = max.saturating_sub(out.len());
                // From a random place: in id order, every member of a cluster would probe
                // the same few first.
                let members = &groups[i].members;
                let from = self.rng.below(members.len() as u64) as usize;
                let (tail, head) = members.split_at(from);
                out.extend(head.iter().chain(tail).filter(|p| unmeasured(p)).take(left));
            }
        }
        let start = self.probing.guide.next_group;
        let mut looked = 0;
        while looked < groups.len().min(GROUPS_PER_ROUND) && out.len() < max {
            let g = &groups[(start + looked) % groups.len()];
            looked += 1;
            if g.members.binary_search(&self.id).is_ok()
                || g.members.iter().any(|p| self.nbrs.measured(p))
            {
                continue;
            }
            // A random member, not the smallest id: every node would pick the same one.
            let pick = g.members[self.rng.below(g.members.len() as u64) as usize];
            if unmeasured(&pick) {
                out.push(pick);
            }
        }
        self.probing.guide.next_group = (start + looked) % groups.len().max(1);
        self.probing.guide.filling = !out.is_empty();
        out
    }
}
