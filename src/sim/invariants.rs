//! The global parent view and the loop-freedom check.
//!
//! The simulator keeps `parent[root][node]` from the cores' `ParentChanged` events. A cycle
//! can only appear when some node changes its parent, and then it must contain that node, so
//! following parent pointers from the node that just changed is a complete check.

use crate::proto::{NodeId, Time};

const NONE: u32 = u32::MAX;

/// `parent[root][node]` for every root and node the simulator has created (by node index),
/// plus how many times each entry changed.
#[derive(Clone, Debug, Default)]
pub struct ParentView {
    parents: Vec<Vec<u32>>,
    changes: Vec<Vec<u32>>,
}

impl ParentView {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of nodes (and roots) in the view.
    pub fn len(&self) -> usize {
        self.parents.len()
    }

    /// Whether the view has no nodes.
    pub fn is_empty(&self) -> bool {
        self.parents.is_empty()
    }

    /// Adds one node (and its tree); returns its index. Every entry starts as "no parent".
    pub fn add_node(&mut self) -> usize {
        for row in self.parents.iter_mut() {
            row.push(NONE);
        }
        for row in self.changes.iter_mut() {
            row.push(0);
        }
        let n = self.parents.len() + 1;
        self.parents.push(vec![NONE; n]);
        self.changes.push(vec![0; n]);
        n - 1
    }

    /// `node`'s parent in `root`'s tree.
    pub fn parent(&self, root: usize, node: usize) -> Option<usize> {
        match self.parents[root][node] {
            NONE => None,
            p => Some(p as usize),
        }
    }

    /// Sets `node`'s parent in `root`'s tree; returns the previous one. Counts a change when
    /// the value differs.
    pub fn set(&mut self, root: usize, node: usize, parent: Option<usize>) -> Option<usize> {
        let new = parent.map_or(NONE, |p| p as u32);
        let old = std::mem::replace(&mut self.parents[root][node], new);
        if old != new {
            self.changes[root][node] += 1;
        }
        (old != NONE).then_some(old as usize)
    }

    /// Sets an entry without counting a change (used when a core drops a whole tree).
    pub fn clear(&mut self, root: usize, node: usize) {
        self.parents[root][node] = NONE;
    }

    /// How many times `node`'s parent in `root`'s tree changed.
    pub fn changes(&self, root: usize, node: usize) -> u32 {
        self.changes[root][node]
    }

    /// The raw row of `root`'s tree: `row[node]` is the parent index or `u32::MAX`.
    pub fn row(&self, root: usize) -> &[u32] {
        &self.parents[root]
    }

    /// Follows parent pointers from `node` in `root`'s tree through nodes for which
    /// `alive` is true. Returns the cycle (starting at `node`) if the walk comes back to
    /// `node`. Stops at a missing parent, at a dead node, or after visiting every node once
    /// (a cycle not through `node`, which an earlier check would already have reported).
    pub fn find_cycle(&self, root: usize, node: usize, alive: &[bool]) -> Option<Vec<usize>> {
        // Walked once to tell (nearly always: no cycle), and again to list a cycle found.
        let walk = |mut visit: Option<&mut Vec<usize>>| -> bool {
            let row = &self.parents[root];
            let mut cur = row[node];
            let mut steps = 0;
            while cur != NONE {
                let p = cur as usize;
                if p == node {
                    return true;
                }
                if !alive.get(p).copied().unwrap_or(false) || steps > row.len() {
                    return false;
                }
                if let Some(path) = visit.as_deref_mut() {
                    path.push(p);
                }
                steps += 1;
                cur = row[p];
            }
            false
        };
        if !walk(None) {
            return None;
        }
        let mut path = vec![node];
        walk(Some(&mut path));
        Some(path)
    }
}

/// One cycle found in a tree, kept for diagnostics.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CycleRecord {
    /// When it was seen (virtual time, µs).
    pub at: Time,
    /// The tree's root.
    pub root: NodeId,
    /// The nodes on the cycle, starting at the node whose parent change closed it; each
    /// node's parent is the next one, and the last one's parent is the first.
    pub nodes: Vec<NodeId>,
}

impl std::fmt::Display for CycleRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at {:?} in tree of {}: ", self.at, self.root)?;
        for n in &self.nodes {
            write!(f, "{n} -> ")?;
        }
        match self.nodes.first() {
            Some(n) => write!(f, "{n}"),
            None => Ok(()),
        }
    }
}
