//! The inputs of a view and the view computed from them, shared by every table in the
//! process whose inputs are equal.
//!
//! A view is a pure function of its inputs (the members, every summary's edges, the
//! parameters), so two tables with equal inputs may hold one copy of it: in the simulator
//! thousands of nodes hold the same table once discovery settles, where computing views
//! was over a third of the simulator's time at 2000 nodes and keeping them a quarter of
//! its memory at 1000. The registry holds only weak references, so a view lives as long
//! as a table holds it; a daemon's one node finds there at most its own current view.

use super::{ClusterParams, ClusterView, buckets, hierarchy};
use crate::proto::id::{IdMap, NodeId};
use crate::proto::message::ClusterSummary;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// What a view is computed from, and the view and the representatives once asked for.
#[derive(Debug)]
pub(super) struct ViewInputs {
    /// A fingerprint of the nodes and the summaries' versions (the registry's key).
    key: u64,
    /// Sorted, without duplicates.
    nodes: Vec<NodeId>,
    /// Sorted by node.
    summaries: Vec<Arc<ClusterSummary>>,
    params: Option<ClusterParams>,
    view: OnceLock<ClusterView>,
    /// Each member of a level-1 group of two or more, to the group's smallest member: the
    /// representative shared trees ask for once per root (a scan of the groups was a sixth
    /// of the simulator's time at 500 nodes with shared trees).
    reps: OnceLock<IdMap<NodeId, NodeId>>,
}

/// Every view of the process by its inputs' fingerprint, and the size past which dead
/// entries are swept out.
struct Registry {
    views: HashMap<u64, Weak<ViewInputs>>,
    sweep_at: usize,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

impl ViewInputs {
    /// The inputs of no view (a table before its first recompute): the empty view.
    pub(super) fn none() -> Arc<Self> {
        Arc::new(ViewInputs {
            key: 0,
            nodes: Vec::new(),
            summaries: Vec::new(),
            params: None,
            view: OnceLock::new(),
            reps: OnceLock::new(),
        })
    }

    /// The inputs `nodes` (any order, duplicates allowed) and `summaries` (any order) with
    /// `params`: the copy another table already holds if their inputs are equal.
    pub(super) fn shared(
        mut nodes: Vec<NodeId>,
        mut summaries: Vec<Arc<ClusterSummary>>,
        params: ClusterParams,
    ) -> Arc<Self> {
        nodes.sort_unstable();
        nodes.dedup();
        summaries.sort_unstable_by_key(|s| s.node);
        let key = fingerprint(&nodes, &summaries);
        let fresh = ViewInputs {
            key,
            nodes,
            summaries,
            params: Some(params),
            view: OnceLock::new(),
            reps: OnceLock::new(),
        };
        // A poisoned lock only means another thread panicked while holding it: the map
        // is still a valid cache.
        let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let registry = guard.get_or_insert_with(|| Registry {
            views: HashMap::new(),
            sweep_at: 64,
        });
        if let Some(held) = registry.views.get(&key).and_then(Weak::upgrade)
            && held.same_as(&fresh)
        {
            return held;
        }
        let fresh = Arc::new(fresh);
        registry.views.insert(key, Arc::downgrade(&fresh));
        if registry.views.len() > registry.sweep_at {
            registry.views.retain(|_, w| w.strong_count() > 0);
            registry.sweep_at = 2 * registry.views.len() + 64;
        }
        fresh
    }

    /// Whether these inputs are those of `other` (summaries compared by content when they
    /// are not the same allocation).
    fn same_as(&self, other: &ViewInputs) -> bool {
        self.key == other.key
            && self.params == other.params
            && self.nodes == other.nodes
            && self.summaries.len() == other.summaries.len()
            && (self.summaries.iter().zip(&other.summaries))
                .all(|(a, b)| Arc::ptr_eq(a, b) || a.node == b.node && a.edges == b.edges)
    }

    /// Whether `id`'s summary is among the inputs.
    pub(super) fn holds(&self, id: &NodeId) -> bool {
        (self.summaries)
            .binary_search_by_key(id, |s| s.node)
            .is_ok()
    }

    /// The view of these inputs: that of [`hierarchy::compute`] (the empty view before the
    /// first recompute), computed when first asked for.
    pub(super) fn view(&self) -> &ClusterView {
        self.view.get_or_init(|| {
            let Some(params) = &self.params else {
                return ClusterView::default();
            };
            let edges = (self.summaries.iter())
                .flat_map(|s| s.edges.iter().map(move |e| (s.node, e.peer, e.rtt_us)));
            hierarchy::compute_from(&self.nodes, edges, params)
        })
    }

    /// The smallest member of `id`'s level-1 group, if that group has two members or more.
    pub(super) fn rep(&self, id: &NodeId) -> Option<NodeId> {
        let reps = self.reps.get_or_init(|| {
            let mut reps = IdMap::default();
            for g in self.view().levels.first().into_iter().flatten() {
                if g.members.len() > 1 {
                    reps.extend(g.members.iter().map(|m| (*m, g.members[0])));
                }
            }
            reps
        });
        reps.get(id).copied()
    }
}

/// An order-sensitive hash of the sorted nodes and of each summary's node and version.
fn fingerprint(nodes: &[NodeId], summaries: &[Arc<ClusterSummary>]) -> u64 {
    let step = |h: u64, id: &NodeId, v: u32| h.rotate_left(7) ^ buckets::mix(id, v);
    let h = nodes.iter().fold(nodes.len() as u64, |h, n| step(h, n, 0));
    summaries.iter().fold(h, |h, s| step(h, &s.node, s.version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::message::ClusterEdge;

    fn summary(node: NodeId, peer: NodeId, version: u32) -> Arc<ClusterSummary> {
        Arc::new(ClusterSummary {
            node,
            version,
            edges: vec![ClusterEdge { peer, rtt_us: 100 }].into(),
            bandwidth: Arc::from([]),
        })
    }

    #[test]
    fn equal_inputs_share_one_view_and_others_do_not() {
        let ids: Vec<NodeId> = (0..3).map(|i| NodeId::from_seed(61, i)).collect();
        let params = ClusterParams::default();
        let s01 = summary(ids[0], ids[1], 1);
        let s10 = summary(ids[1], ids[0], 1);
        let a = ViewInputs::shared(ids.clone(), vec![s01.clone(), s10.clone()], params);
        // Another order, a copy of a summary rather than the same allocation: shared.
        let copy = Arc::new(ClusterSummary::clone(&s10));
        let mut reversed = ids.clone();
        reversed.reverse();
        let b = ViewInputs::shared(reversed, vec![copy, s01.clone()], params);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.view().levels[0].len(), 2, "{{0, 1}} and {{2}} alone");
        assert_eq!(b.rep(&ids[1]), Some(ids[0].min(ids[1])));
        // Another version, other edges, another member: each its own.
        let newer = summary(ids[1], ids[2], 2);
        let c = ViewInputs::shared(ids.clone(), vec![s01.clone(), newer], params);
        assert!(!Arc::ptr_eq(&a, &c));
        let d = ViewInputs::shared(ids[..2].to_vec(), vec![s01, s10], params);
        assert!(!Arc::ptr_eq(&a, &d));
        assert_eq!(c.rep(&ids[2]), c.rep(&ids[1]), "1 and 2 joined in c");
        // Dropped by every table: gone from the registry, computed afresh next time.
        let weak = Arc::downgrade(&c);
        drop(c);
        assert!(weak.upgrade().is_none());
    }
}
