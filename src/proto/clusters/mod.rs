//! Cluster discovery: which members form low-latency groups, at several levels, found from
//! measured RTTs alone (in the spirit of Lowekamp's ECO and of Nasri et al.: nodes whose
//! mutual latency is small compared with the latency that joins them to the rest form a
//! group). No configuration: the rule is relative, so it works from a LAN to a continent.
//!
//! # The rule
//!
//! Groups are the single-linkage hierarchy of the latencies (merge the two groups joined by
//! the lowest latency, again and again), cut where latency jumps: a group is kept as a level
//! of its own when the latency that joins it to the rest is more than
//! [`ClusterParams::gap`] times the latency inside it. Latencies below
//! [`ClusterParams::floor_us`] count as the floor, so the jitter of a LAN or of loopback
//! never splits it. Level 1 holds the groups of nodes (clusters), level 2 the groups of
//! level-1 groups (sites), and so on; every level is a partition of the members (a node
//! in no group of that level stands alone), and the last level that would put everyone in
//! one group is left out.
//!
//! # What each node knows
//!
//! A node measures only its candidate set closely, but it has an estimate for every member
//! it swept once. From its own row of estimates it publishes a [`ClusterSummary`] of a few
//! edges ([`summary`]): it splits its row into *shells* where the latency jumps by the same
//! factor, and publishes the nearest peers and the smallest-id peer of every shell. A
//! group that stands out by a jump is joined to the rest by the lowest latency from one of
//! its members, and for that member it is the nearest peer past the jump: so the union of
//! the summaries holds the links the hierarchy is made of, and the nearest peers and the
//! smallest ids keep every cluster connected inside.
//!
//! Summaries spread to every member ([`table`]): a node pushes a new or newer summary to
//! two random members, which push it on once (epidemic), and every
//! [`crate::proto::Config::cluster_sync`] it sends a random member the 14-byte digest of
//! its table; where the digests differ, the two narrow the difference down by buckets of ids
//! ([`buckets`](self::buckets)), exchange the version lists of the buckets that differ, and
//! push each other what the other lacks. A summary is at most [`MAX_CLUSTER_EDGES`] edges of about
//! 21 bytes (a shell costs four), and a node publishes a new version only when its nearest
//! peers change or an RTT above the floor moves by more than an eighth. Once settled, only
//! the digests travel.
//!
//! Every node runs the same deterministic computation ([`hierarchy`]) on the same table,
//! so once the table has spread all nodes hold the same groups; a group is named by its
//! smallest member id, so the labels agree too.

mod buckets;
pub mod hierarchy;
pub mod summary;
pub mod table;
mod views;

pub use self::hierarchy::compute;
pub use self::table::ClusterTable;

use super::id::NodeId;
use super::message::{ClusterEdge, ClusterSummary, MAX_BANDWIDTH_EDGES, MAX_CLUSTER_EDGES};
use std::sync::Arc;

/// The two numbers of the grouping rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClusterParams {
    /// A group stands as a level of its own when the latency joining it to the rest is
    /// more than this factor above the latency inside it.
    pub gap: f64,
    /// RTTs below this (µs) count as this much: the jitter of a LAN must not split it.
    pub floor_us: u32,
}

impl ClusterParams {
    /// Whether a merge at `outer_us` is a jump above a group held together at `inner_us`.
    pub fn is_gap(&self, inner_us: u32, outer_us: u32) -> bool {
        outer_us as f64 > self.gap * inner_us.max(self.floor_us) as f64
    }
}

impl Default for ClusterParams {
    /// A factor of 2 separates DAS-4's clusters (40 µs inside, 3 ms and more between) and
    /// the sites of a TeraGrid-like layout (2 ms between the clusters of a site, 5 ms and
    /// more between sites). A floor of 0.5 ms RTT keeps a data centre's or loopback's jitter
    /// from splitting it, and stays below the 1 ms or so that separates two buildings.
    fn default() -> Self {
        ClusterParams {
            gap: 2.0,
            floor_us: 500,
        }
    }
}

/// One group at one level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Its name: the smallest member id (the same on every node that holds the same table).
    pub label: NodeId,
    /// Its members, sorted.
    pub members: Vec<NodeId>,
    /// The typical RTT that holds it together: the median of the published RTTs that join
    /// its parts (between its members for a level-1 group, between its subgroups above).
    /// `None` for a node that stands alone.
    pub rtt_us: Option<u32>,
}

/// The groups this node sees, level by level (index 0 is level 1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// Each level's partition of the members, groups sorted by label. A group that stands
    /// at several levels (a member alone, a cluster that no site joins) is one shared
    /// value: while discovery spreads, most members stand alone at every level, and a copy
    /// per level was most of the memory of a view.
    pub levels: Vec<Vec<Arc<Group>>>,
}

impl ClusterView {
    /// How many levels there are.
    pub fn depth(&self) -> usize {
        self.levels.len()
    }

    /// The group of `id` at `level` (1-based), if the level exists and `id` is in it.
    pub fn group_of(&self, level: usize, id: &NodeId) -> Option<&Group> {
        let groups = self.levels.get(level.checked_sub(1)?)?;
        (groups.iter())
            .find(|g| g.members.binary_search(id).is_ok())
            .map(|g| &**g)
    }

    /// The partition at `level` (1-based) as sorted member lists, sorted; empty if the
    /// level does not exist.
    pub fn partition(&self, level: usize) -> Vec<Vec<NodeId>> {
        let Some(groups) = level.checked_sub(1).and_then(|l| self.levels.get(l)) else {
            return Vec::new();
        };
        let mut p: Vec<Vec<NodeId>> = groups.iter().map(|g| g.members.clone()).collect();
        p.sort();
        p
    }
}

/// A received summary cut to the size bound, without edges to its own node (left as it came,
/// shared, when it needs none: an honest node's never does).
pub(crate) fn sanitize(shared: Arc<ClusterSummary>) -> Arc<ClusterSummary> {
    let node = shared.node;
    let edges_ok =
        shared.edges.len() <= MAX_CLUSTER_EDGES && shared.edges.iter().all(|e| e.peer != node);
    let bandwidth_ok = shared.bandwidth.len() <= MAX_BANDWIDTH_EDGES
        && shared.bandwidth.iter().all(|e| e.from != node);
    if edges_ok && bandwidth_ok {
        return shared;
    }
    let mut s = ClusterSummary::clone(&shared);
    if !edges_ok {
        let edges = (s.edges.iter()).filter(|e: &&ClusterEdge| e.peer != node);
        s.edges = edges.take(MAX_CLUSTER_EDGES).copied().collect();
    }
    if !bandwidth_ok {
        let bandwidth = s.bandwidth.iter().filter(|e| e.from != node);
        s.bandwidth = bandwidth.take(MAX_BANDWIDTH_EDGES).copied().collect();
    }
    Arc::new(s)
}

#[cfg(test)]
mod tests;
