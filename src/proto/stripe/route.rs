//! From cluster trees to node-level routes: who sends each stripe to whom.
//!
//! A cluster tree says which cluster feeds which; a route picks the nodes. Each cluster is
//! entered at one node (the root itself in the root's cluster), the entry forwards across
//! the wide area to the entries of the child clusters, then spreads the stripe inside its
//! cluster with a tree of a given fanout. Entries and in-cluster forwarders rotate with the
//! stripe index, so that with several stripes the sending work is shared by many nodes
//! instead of falling on one per cluster.

use super::Arborescence;
use crate::proto::id::NodeId;
use std::collections::{HashSet, VecDeque};

/// Who sends one stripe to whom: every member except the root appears exactly once as a child.
///
/// `edges` is in sending order for each sender: wide-area children come before in-cluster
/// ones, because they are further away and head larger subtrees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// `(sender, receiver)` pairs.
    pub edges: Vec<(NodeId, NodeId)>,
}

impl Route {
    /// The nodes `n` sends this stripe to, in sending order.
    pub fn children_of(&self, n: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.edges
            .iter()
            .filter(move |&&(from, _)| from == n)
            .map(|&(_, to)| to)
    }

    /// The node `n` receives this stripe from (`None` for the root or a stranger).
    pub fn parent_of(&self, n: NodeId) -> Option<NodeId> {
        self.edges
            .iter()
            .find(|&&(_, to)| to == n)
            .map(|&(from, _)| from)
    }
}

/// One route per tree (same order as `trees`): stripe `t` follows `trees[t]` between
/// clusters, enters cluster `c` at member `t mod |c|` (members sorted by id; the root in its
/// own cluster) and spreads inside each cluster with a tree of `fanout` (0 counts as 1, a
/// pipelined chain) over the other members, rotated with `t`.
///
/// Robust to any input, so that a plan made from a stale view never breaks a broadcast: a
/// node listed twice counts in the first cluster that lists it, the root counts in
/// `root_cluster` (added if missing), an empty cluster is skipped (its child clusters hear
/// from its nearest ancestor with members), and clusters a malformed tree does not connect
/// to the root's cluster hang off it. Every route spans every listed node exactly once.
pub fn node_routes(
    root: NodeId,
    clusters: &[Vec<NodeId>],
    root_cluster: usize,
    trees: &[Arborescence],
    fanout: usize,
) -> Vec<Route> {
    node_routes_with(root, clusters, root_cluster, trees, &|_| fanout)
}

/// [`node_routes`] with a fanout per cluster: `fanout(c)` for cluster index `c` (as in
/// `clusters`; an index past them is the root's cluster added by the call). A cluster
/// whose members forward slowly gets a chain, one on a fast LAN a wider, shallower tree.
pub fn node_routes_with(
    root: NodeId,
    clusters: &[Vec<NodeId>],
    root_cluster: usize,
    trees: &[Arborescence],
    fanout: &dyn Fn(usize) -> usize,
) -> Vec<Route> {
    let (members, rc) = member_lists(root, clusters, root_cluster);
    let parents: Vec<(Vec<usize>, Vec<usize>)> = trees
        .iter()
        .map(|tree| cluster_order(tree, members.len(), rc))
        .collect();
    parents
        .iter()
        .enumerate()
        .map(|(t, (parent, order))| route_for(root, &members, rc, parent, order, t, fanout))
        .collect()
}

/// Sorted, de-duplicated member lists (root placed in its cluster, nowhere else) and the
/// root's cluster index (a new, last cluster if `root_cluster` is out of range).
fn member_lists(
    root: NodeId,
    clusters: &[Vec<NodeId>],
    root_cluster: usize,
) -> (Vec<Vec<NodeId>>, usize) {
    let mut seen: HashSet<NodeId> = HashSet::from([root]);
    let mut members: Vec<Vec<NodeId>> = clusters
        .iter()
        .map(|c| {
            let mut m: Vec<NodeId> = c.clone();
            m.sort();
            m.dedup();
            m.retain(|n| seen.insert(*n));
            m
        })
        .collect();
    let rc = if root_cluster < members.len() {
        root_cluster
    } else {
        members.push(Vec::new());
        members.len() - 1
    };
    let at = members[rc].binary_search(&root).unwrap_or_else(|i| i);
    members[rc].insert(at, root);
    (members, rc)
}

/// The effective parent of every cluster (`usize::MAX` for `rc`) and an order in which each
/// cluster comes after its parent. Clusters the tree does not connect to `rc` get `rc`.
fn cluster_order(tree: &Arborescence, k: usize, rc: usize) -> (Vec<usize>, Vec<usize>) {
    let mut kids = vec![Vec::new(); k];
    for c in (0..k).filter(|&c| c != rc) {
        if let Some(&Some(p)) = tree
            .parent
            .get(c)
            .filter(|p| p.is_some_and(|p| p < k && p != c))
        {
            kids[p].push(c);
        }
    }
    let mut parent = vec![usize::MAX; k];
    let mut reached = vec![false; k];
    let mut order = vec![rc];
    reached[rc] = true;
    let mut queue = VecDeque::from([rc]);
    while let Some(u) = queue.pop_front() {
        for &c in &kids[u] {
            if !reached[c] {
                reached[c] = true;
                parent[c] = u;
                order.push(c);
                queue.push_back(c);
            }
        }
    }
    for c in 0..k {
        if !reached[c] {
            parent[c] = rc;
            order.push(c);
        }
    }
    (parent, order)
}

/// The route of stripe `t`.
fn route_for(
    root: NodeId,
    members: &[Vec<NodeId>],
    rc: usize,
    parent: &[usize],
    order: &[usize],
    t: usize,
    fanout: &dyn Fn(usize) -> usize,
) -> Route {
    let k = members.len();
    let entry: Vec<Option<NodeId>> = (0..k)
        .map(|c| match c == rc {
            true => Some(root),
            false if members[c].is_empty() => None,
            false => Some(members[c][t % members[c].len()]),
        })
        .collect();
    // The node that feeds cluster c's children: its entry, or its nearest ancestor's.
    let mut relay = vec![root; k];
    let mut edges = Vec::new();
    for &c in order.iter().filter(|&&c| c != rc) {
        let from = relay[parent[c]];
        relay[c] = match entry[c] {
            Some(e) => {
                edges.push((from, e));
                e
            }
            None => from,
        };
    }
    for &c in order {
        let Some(e) = entry[c] else { continue };
        let mut seq: Vec<NodeId> = members[c].iter().copied().filter(|&n| n != e).collect();
        let l = seq.len();
        if l == 0 {
            continue;
        }
        let fanout = fanout(c).max(1);
        // Rotate by t times the number of forwarders, so the next stripe hands the
        // forwarding to the nodes that only received in this one.
        let forwarders = ((l - 1) / fanout).max(1);
        seq.rotate_left((t % l) * (forwarders % l) % l);
        seq.insert(0, e);
        for i in 1..seq.len() {
            edges.push((seq[(i - 1) / fanout], seq[i]));
        }
    }
    Route { edges }
}
