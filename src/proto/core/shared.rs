//! Shared trees: the roots of one cluster share their tree outside it.
//!
//! Owns no part of the core: the rule of which trees this node tracks, and the children an
//! operation goes to, read from the cluster table (`discovery`) and the tree table.
//!
//! Once the overlay has [`Config::shared_trees_from`](crate::proto::Config) members, every
//! discovered level-1 cluster C is represented by its smallest member id, rep(C). The tree
//! of rep(C) spans the overlay, as every tree does. Another root r of C has a tree only
//! inside C: nodes outside C keep no tree for r, so a node keeps one tree per member of its
//! own cluster plus one per other cluster, not one per member. An operation of r spreads
//! along r's tree inside C; a node that keeps r's tree also passes it to those of its
//! children in rep(C)'s tree that keep none, and a node that keeps none passes it to all
//! its children in rep(C)'s tree (`Sharing::children`). Every node outside C has one parent
//! in rep(C)'s tree, and following parents reaches C (rep(C) is in it), so the first node
//! of C on that path, which has the operation from r's tree, starts it down: every node is
//! reached once, provided r's tree spans C through C's members alone (nobody outside keeps
//! it: a member of C that reaches r only through another cluster stays out of it).
//! Where two nodes disagree on the clusters for a while (discovery has not spread
//! everywhere yet), a node may be reached twice, which the collective engine answers with
//! nothing (counted once), or not at all, which the root's direct asks make up for (§5.3
//! of the design).
//!
//! The wide-area part of r's tree is rep(C)'s: the trees of one cluster's roots share their
//! wide-area part once optimal (they enter every other cluster once, from the nearest
//! cluster), so the wide-area part costs nothing; an operation pays the hops inside C to
//! where rep(C)'s tree leaves it (5-15 % on phoenix-168 broadcasts). Loop freedom holds
//! per tree as before: every tree tracked runs the same rules, and a tree a node stops
//! tracking is dropped as when its root leaves (its children are told "no path" and its
//! serial and feasibility distance are kept, see `Trees::track`).

use super::Core;
use super::trees::Trees;
use crate::proto::clusters::ClusterTable;
use crate::proto::id::{IdSet, NodeId};

/// The rule of shared trees over one view of the clusters.
#[derive(Clone, Copy)]
pub(super) struct Sharing<'a> {
    /// Whether trees are shared now (configured, and the overlay that large).
    on: bool,
    /// The clusters as discovered.
    table: &'a ClusterTable,
}

impl<'a> Sharing<'a> {
    /// The rule over the clusters in `table`, with trees shared or not (`on`).
    pub(super) fn of(on: bool, table: &'a ClusterTable) -> Self {
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
        self.table.cluster_rep(&id)
    }

    /// Whether `node` keeps a tree for `root`. A root discovery has not placed yet (in a
    /// cluster, or alone once its own summary is in) has no tree but at itself: at a cold
    /// start every node would otherwise keep every tree until the clusters are known, the
    /// cost shared trees are there to avoid.
    pub(super) fn tracks(&self, node: NodeId, root: NodeId) -> bool {
        self.kept_by(node).keeps(root)
    }

    /// [`Sharing::tracks`] for one `node` and many roots: `node`'s cluster is looked up
    /// once, not once per root.
    pub(super) fn kept_by(self, node: NodeId) -> KeptBy<'a> {
        let cluster = if self.on { self.group_rep(node) } else { None };
        KeptBy {
            sharing: self,
            node,
            cluster,
        }
    }

    /// The children an operation of `root` goes to from a node with trees `trees`: its
    /// children in `root`'s tree, and its children in the representative's tree that keep
    /// no tree for `root` (outside `root`'s cluster). A node that keeps no tree for `root`
    /// passes it to all its children in the representative's tree, whatever its view says
    /// of theirs: a child it would wrongly count as keeping one would lose its whole
    /// subtree, a child reached twice only answers the second time with nothing.
    pub(super) fn children(&self, trees: &Trees, root: NodeId) -> Vec<NodeId> {
        let own = trees.find(root);
        let mut out: Vec<NodeId> = own
            .map(|t| t.children.iter().copied().collect())
            .unwrap_or_default();
        let rep = self.rep(root);
        if rep != root
            && let Some(t) = trees.find(rep)
        {
            for &c in &t.children {
                if (own.is_none() || !self.tracks(c, root)) && !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        out
    }
}

/// The trees one node keeps (see [`Sharing::kept_by`]).
#[derive(Clone, Copy)]
pub(super) struct KeptBy<'a> {
    sharing: Sharing<'a>,
    node: NodeId,
    /// The representative of `node`'s cluster, if discovery put it in one.
    cluster: Option<NodeId>,
}

impl KeptBy<'_> {
    /// Whether the node keeps a tree for `root`.
    pub(super) fn keeps(&self, root: NodeId) -> bool {
        let s = &self.sharing;
        if !s.on || self.node == root {
            return true;
        }
        match s.group_rep(root) {
            Some(rep) => rep == root || Some(rep) == self.cluster,
            None => s.table.in_view(&root),
        }
    }
}

impl Core {
    /// The rule of shared trees as this node sees the overlay now.
    pub(super) fn sharing(&self) -> Sharing<'_> {
        Sharing::of(self.discovery.shared_on, &self.discovery.table)
    }

    /// Turns shared trees on once the overlay has `Config::shared_trees_from` members, and
    /// off only once it has fewer than nine tenths of that: a count that hovers around the
    /// bound would otherwise drop and take up nearly every tree each time it crosses.
    /// Every node then decides the same way within a member or two. Runs when members come
    /// and go and at every cluster round; the trees follow at once.
    pub(super) fn update_sharing(&mut self) {
        let Some(from) = self.config.shared_trees_from else {
            return;
        };
        let count = self.members.alive().len() + 1;
        let on = if self.discovery.shared_on {
            count * 10 >= from * 9
        } else {
            count >= from
        };
        if on != self.discovery.shared_on {
            self.discovery.shared_on = on;
            self.retrack();
        }
    }

    /// Whether this node keeps a tree for `root`: always, unless trees are shared and
    /// `root` is a member of another cluster than ours and not its representative, or
    /// discovery has not placed `root` yet.
    pub fn tracks_tree(&self, root: NodeId) -> bool {
        self.sharing().tracks(self.id, root)
    }

    /// Asks again for the trees taken up that are not settled where they should be: those
    /// that heard nothing for two serial periods, and those of a root of our cluster that
    /// we reach through another cluster. A node takes a tree up when its view of the
    /// clusters places the root, and its first asks may all come to nothing: its near
    /// peers' views may not place the root yet (they do not keep the tree, so neither
    /// answer nor advertise it to us), and the root's answer cannot be judged before we
    /// hold samples of the root (with a limited sweep, a cluster mate is measured only
    /// once discovery points to it); a member of another cluster that kept the tree a
    /// while may be all we heard. Without news of the tree nobody sends it again: such
    /// trees stayed without a parent, or entered their own cluster from outside, for tens
    /// of seconds at a thousand nodes. The wait doubles after each ask, up to 32 periods.
    pub(super) fn reask_unrouted(&mut self) {
        let period = self.config.serial_period;
        let now = self.now;
        let me = self.id;
        let table = &self.discovery.table;
        let own = table.cluster_rep(&me);
        let outside = |p: &NodeId| own.is_some() && table.cluster_rep(p) != own;
        let unsettled: IdSet<NodeId> = (self.trees.iter())
            .filter(|t| t.root != me && self.trees.live_root(t.root).is_some())
            .filter(|t| {
                (t.serial == 0 && !t.connected)
                    || (!outside(&t.root) && t.parent.is_some_and(|p| outside(&p)))
            })
            .map(|t| t.root)
            .collect();
        let asked = &mut self.discovery.unrouted;
        asked.retain(|r, _| unsettled.contains(r));
        let mut due = Vec::new();
        for r in unsettled {
            let (at, wait) = asked.entry(r).or_insert((now, period * 2));
            if now.saturating_since(*at) >= *wait {
                *at = now;
                *wait = (*wait * 2).min(period * 32);
                due.push(r);
            }
        }
        due.sort_unstable();
        for r in due {
            self.stats.reasks += 1;
            self.ask_for_tree(r);
        }
    }

    /// Brings the trees tracked in line with [`Core::tracks_tree`], after the clusters or
    /// the members changed: trees of roots now outside our concern are dropped (as when
    /// their root leaves, without forgetting the member), trees of roots now ours tracked.
    pub(super) fn retrack(&mut self) {
        let sharing = self.sharing();
        let kept = sharing.kept_by(self.id);
        let changes: Vec<(NodeId, bool)> = (self.members.alive().iter().copied())
            .filter_map(|id| {
                let want = kept.keeps(id);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::clusters::ClusterParams;
    use crate::proto::message::{ClusterEdge, ClusterMessage, ClusterSummary};
    use crate::proto::time::Time;
    use std::sync::Arc;

    fn id(k: u8) -> NodeId {
        NodeId([k; 16])
    }

    /// Node 1's table: clusters {1, 2, 3} and {5, 6} (0.2 ms inside, 20 ms between), and
    /// member 9, whose summary has not come.
    fn table() -> ClusterTable {
        let e = |k: u8, rtt_us: u32| ClusterEdge {
            peer: id(k),
            rtt_us,
        };
        let s = |k: u8, edges: Vec<ClusterEdge>| {
            Arc::new(ClusterSummary {
                node: id(k),
                version: 1,
                edges: edges.into(),
                bandwidth: Arc::from([]),
            })
        };
        let mut t = ClusterTable::new(id(1));
        t.publish_edges(vec![e(2, 200), e(3, 200), e(5, 20_000)]);
        let summaries = vec![
            s(2, vec![e(1, 200), e(3, 200)]),
            s(3, vec![e(1, 200), e(2, 200)]),
            s(5, vec![e(6, 200), e(1, 20_000)]),
            s(6, vec![e(5, 200)]),
        ];
        let msg = ClusterMessage::Summaries { summaries };
        t.handle(Time::from_micros(0), msg, |_| true);
        t.recompute(&[2, 3, 5, 6, 9].map(id), &ClusterParams::default());
        t
    }

    #[test]
    fn a_node_keeps_its_clusters_trees_and_the_other_clusters_representatives() {
        let t = table();
        let on = Sharing::of(true, &t);
        assert_eq!([2, 6, 9].map(|k| on.rep(id(k))), [1, 5, 9].map(id));
        let keeps = |node: u8, root: u8| on.tracks(id(node), id(root));
        assert!(keeps(1, 2) && keeps(1, 3), "its own cluster's roots");
        assert!(
            keeps(1, 5) && keeps(6, 1),
            "the other cluster's representative"
        );
        assert!(
            !keeps(1, 6) && !keeps(6, 2),
            "not the other cluster's other roots"
        );
        assert!(!keeps(1, 9), "nor a root discovery has not placed");
        assert!(keeps(9, 9), "but everyone its own");
        let off = Sharing::of(false, &t);
        assert!(off.tracks(id(1), id(6)) && off.tracks(id(1), id(9)));
        assert_eq!(off.rep(id(6)), id(6));
    }

    #[test]
    fn an_operation_leaves_the_cluster_along_the_representatives_tree() {
        let t = table();
        let on = Sharing::of(true, &t);
        let now = Time::from_micros(0);
        let with_children = |me: u8, trees: &[(u8, &[u8])]| {
            let mut tt = Trees::new(id(me), now);
            for &(root, children) in trees {
                if root != me {
                    tt.track(id(root), now);
                }
                let ri = tt.index_of(id(root)).expect("tracked");
                tt.live_mut(ri).children = children.iter().map(|&k| id(k)).collect();
            }
            tt
        };
        // Node 2 keeps root 3's tree: its children there, and those in the
        // representative's (1) tree that keep none for 3 (5, not the root itself).
        let node2 = with_children(2, &[(3, &[1]), (1, &[5, 3])]);
        assert_eq!(on.children(&node2, id(3)), vec![id(1), id(5)]);
        // Node 6 keeps none for 3: all its children in 1's tree, whatever its view says
        // of them.
        let node6 = with_children(6, &[(1, &[9, 2])]);
        assert_eq!(on.children(&node6, id(3)), vec![id(2), id(9)]);
        // The representative's own operations follow its tree alone.
        assert_eq!(on.children(&node2, id(1)), vec![id(3), id(5)]);
        // Not shared: each root's own tree.
        let off = Sharing::of(false, &t);
        assert_eq!(off.children(&node2, id(3)), vec![id(1)]);
    }
}
