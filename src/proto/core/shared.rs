//! Shared trees: the roots of one cluster share their tree outside it.
//!
//! Owns no part of the core: the rule of which trees this node tracks, and the children an
//! operation goes to, read from the cluster table (`discovery`) and the tree table.
//!
//! Once the overlay has [`Config::shared_trees_from`](crate::proto::Config) members, every
//! discovered level-1 cluster C is represented by its smallest member id, rep(C). The tree
//! of rep(C) spans the overlay, as every tree does. Another root r of C has a tree only
//! inside C: nodes outside C keep no state for r, so a node keeps one tree per member of its
//! own cluster plus one per other cluster, not one per member. An operation of r spreads
//! along r's tree inside C, and every node passes it on to those of its children in rep(C)'s
//! tree that are outside C (`children_for`). Every node outside C has one parent in rep(C)'s
//! tree, and following parents reaches C (rep(C) is in it), so the first node of C on that
//! path, which has the operation from r's tree, starts it down: every node is reached once.
//! Where two nodes disagree on the clusters for a while (discovery has not spread
//! everywhere yet), a node may be reached twice, which the collective engine answers with
//! nothing (counted once), or not at all, which the root's direct asks make up for (§5.3
//! of the design).
//!
//! The wide-area part of r's tree is rep(C)'s: the trees of one cluster's roots share their
//! wide-area part once optimal (they enter every other cluster once, from the nearest
//! cluster), so this loses at most the latency inside C. Loop freedom holds per tree as
//! before: every tree tracked runs the same rules, and a tree a node stops tracking is
//! dropped as when its root leaves (its children are told "no path" and its serial and
//! feasibility distance are kept, see `Trees::track`).

use super::Core;
use super::trees::Trees;
use crate::proto::clusters::ClusterTable;
use crate::proto::config::Config;
use crate::proto::id::NodeId;
use crate::proto::membership::MemberTable;

/// The rule of shared trees over one view of the clusters.
#[derive(Clone, Copy)]
pub(super) struct Sharing<'a> {
    /// Whether trees are shared now (configured, and the overlay that large).
    on: bool,
    /// The clusters as discovered.
    table: &'a ClusterTable,
}

impl<'a> Sharing<'a> {
    /// The rule with `config`, among `members`, over the clusters `view`.
    pub(super) fn of(config: &Config, members: &MemberTable, table: &'a ClusterTable) -> Self {
        let on = (config.shared_trees_from).is_some_and(|n| members.alive().len() + 1 >= n);
        Sharing { on, table }
    }

    /// Whether trees are shared now.
    pub(super) fn is_on(&self) -> bool {
        self.on
    }

    /// The member whose tree carries `id`'s operations outside its cluster: the smallest
    /// member of `id`'s discovered cluster, or `id` itself while it has none (or trees are
    /// not shared).
    pub(super) fn rep(&self, id: NodeId) -> NodeId {
        if !self.on {
            return id;
        }
        self.group_rep(id).unwrap_or(id)
    }

    /// The smallest member of `id`'s discovered cluster, if it has one of two or more.
    fn group_rep(&self, id: NodeId) -> Option<NodeId> {
        match self.table.view().group_of(1, &id) {
            Some(g) if g.members.len() > 1 => Some(g.members[0]),
            _ => None,
        }
    }

    /// Whether `node` keeps a tree for `root`. A root discovery has not placed yet (in a
    /// cluster, or alone once its own summary is in) has no tree but at itself: at a cold
    /// start every node would otherwise keep every tree until the clusters are known, the
    /// cost shared trees are there to avoid.
    pub(super) fn tracks(&self, node: NodeId, root: NodeId) -> bool {
        if !self.on || node == root {
            return true;
        }
        match self.group_rep(root) {
            Some(rep) => rep == root || Some(rep) == self.group_rep(node),
            None => self.table.in_view(&root),
        }
    }

    /// The children an operation of `root` goes to from a node with trees `trees`: its
    /// children in `root`'s tree, and its children in the representative's tree that keep
    /// no tree for `root` (outside `root`'s cluster).
    pub(super) fn children(&self, trees: &Trees, root: NodeId) -> Vec<NodeId> {
        let mut out: Vec<NodeId> = (trees.find(root))
            .map(|t| t.children.iter().copied().collect())
            .unwrap_or_default();
        let rep = self.rep(root);
        if rep != root
            && let Some(t) = trees.find(rep)
        {
            for &c in &t.children {
                if !self.tracks(c, root) && !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        out
    }
}

impl Core {
    /// The rule of shared trees as this node sees the overlay now.
    pub(super) fn sharing(&self) -> Sharing<'_> {
        Sharing::of(&self.config, &self.members, &self.discovery.table)
    }

    /// The member whose tree carries `id`'s operations outside its cluster (see the module
    /// docs): `id` itself unless trees are shared.
    pub fn tree_rep(&self, id: NodeId) -> NodeId {
        self.sharing().rep(id)
    }

    /// Whether this node keeps a tree for `root`: always, unless trees are shared and
    /// `root` is a member of another cluster than ours and not its representative.
    pub fn tracks_tree(&self, root: NodeId) -> bool {
        self.sharing().tracks(self.id, root)
    }

    /// Brings the trees tracked in line with [`Core::tracks_tree`], after the clusters or
    /// the members changed: trees of roots now outside our concern are dropped (as when
    /// their root leaves, without forgetting the member), trees of roots now ours tracked.
    pub(super) fn retrack(&mut self) {
        let alive = self.members.alive().to_vec();
        let sharing = self.sharing();
        let changes: Vec<(NodeId, bool)> = (alive.into_iter())
            .filter_map(|id| {
                let want = sharing.tracks(self.id, id);
                (want != self.trees.live_root(id).is_some()).then_some((id, want))
            })
            .collect();
        for (id, want) in changes {
            if want {
                self.start_tree(id);
            } else {
                self.stats.trees_unshared += 1;
                self.end_tree(id);
            }
        }
    }
}
