//! The clusters a node discovered, as its status reports them.

use crate::proto::{ClusterView, NodeId};
use serde::{Deserialize, Serialize};

/// One level of the discovered groups (level 1: clusters; 2: groups of clusters, such as
/// sites; and so on). Every level is a partition of the members.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterLevel {
    /// The level, from 1.
    pub level: usize,
    /// Its groups, sorted by label.
    pub groups: Vec<ClusterGroup>,
}

/// One discovered group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterGroup {
    /// Its name: the smallest member id (every node that has the same summaries agrees).
    pub label: NodeId,
    /// Its members, sorted by id.
    pub members: Vec<NodeId>,
    /// Their names, in the same order (empty where unknown).
    pub names: Vec<String>,
    /// The typical RTT holding it together, in ms (median of the published RTTs joining
    /// its parts); `None` for a member alone.
    pub rtt_ms: Option<f64>,
    /// Whether the reporting node is in it.
    pub mine: bool,
}

/// The levels of `view` as a status reports them; `name` gives a member's name.
pub(crate) fn cluster_levels(
    view: &ClusterView,
    me: NodeId,
    name: impl Fn(&NodeId) -> Option<String>,
) -> Vec<ClusterLevel> {
    view.levels
        .iter()
        .enumerate()
        .map(|(i, groups)| ClusterLevel {
            level: i + 1,
            groups: groups
                .iter()
                .map(|g| ClusterGroup {
                    label: g.label,
                    names: g
                        .members
                        .iter()
                        .map(|m| name(m).unwrap_or_default())
                        .collect(),
                    members: g.members.clone(),
                    rtt_ms: g.rtt_us.map(|us| us as f64 / 1e3),
                    mine: g.members.binary_search(&me).is_ok(),
                })
                .collect(),
        })
        .collect()
}
