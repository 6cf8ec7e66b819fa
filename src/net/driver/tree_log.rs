//! What the log says about the trees. Every parent change is a DEBUG line; at INFO a node
//! says at most once per [`SUMMARY_EVERY`] how many changes there were, in how many trees,
//! and how many of its trees reach their roots, and only when something changed (a
//! changed parent, or a child more or fewer in its own tree). A settled node therefore
//! logs nothing about trees, and a churning one a line per half minute, whatever the
//! number of roots.

use crate::proto::{Core, NodeId};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tracing::info;

/// The shortest time between two summaries.
const SUMMARY_EVERY: Duration = Duration::from_secs(30);
/// Roots remembered between summaries (the count of changes goes on past it).
const MAX_ROOTS: usize = 4096;

/// Parent changes since the last summary.
pub(super) struct TreeLog {
    changes: u64,
    roots: HashSet<NodeId>,
    /// Children in this node's own tree at the last summary.
    own_children: usize,
    /// When the window of the next summary started.
    since: Instant,
}

impl TreeLog {
    pub(super) fn new(now: Instant) -> TreeLog {
        TreeLog {
            changes: 0,
            roots: HashSet::new(),
            own_children: 0,
            since: now,
        }
    }

    /// A parent changed in `root`'s tree.
    pub(super) fn parent_changed(&mut self, root: NodeId) {
        self.changes += 1;
        if self.roots.len() < MAX_ROOTS {
            self.roots.insert(root);
        }
    }

    /// Logs the summary if one is due and something changed.
    pub(super) fn tick(&mut self, now: Instant, core: &Core) {
        if now.duration_since(self.since) < SUMMARY_EVERY {
            return;
        }
        let own_children = core.tree(core.id()).map_or(0, |t| t.children.len());
        if self.changes > 0 || own_children != self.own_children {
            let roots = core.roots();
            let connected = roots.iter().filter(|&&r| core.is_connected(r)).count();
            info!(
                parent_changes = self.changes,
                in_trees = self.roots.len(),
                connected_trees = connected,
                trees = roots.len(),
                own_tree_children = own_children,
                "trees changed over the last {} s",
                now.duration_since(self.since).as_secs()
            );
        }
        self.changes = 0;
        self.roots.clear();
        self.own_children = own_children;
        self.since = now;
    }
}
