//! The tree table: our own state in every tree we track.
//!
//! Owns the root index (root id to slot) and the slots (one [`TreeState`] per root ever
//! tracked, emptied when its root goes away). Every concern reads and changes our state in
//! the trees, through this table; a root's slot number ([`RootIdx`]) is never reused, so
//! the other tables (what peers told us, adverts due, requests waiting) are keyed by it.

use crate::proto::id::{IdMap as HashMap, IdSet as HashSet, NodeId};
use crate::proto::message::AdvertEntry;
use crate::proto::time::Time;
use crate::proto::tree::{INFINITE, TreeState};

/// Index of a root in this core's tables (never reused while the core lives).
pub(super) type RootIdx = usize;

/// The slot of our own tree.
pub(super) const OWN_ROOT: RootIdx = 0;

/// Our state in every tree, by root index.
pub(super) struct Trees {
    index: HashMap<NodeId, RootIdx>,
    slots: Vec<Option<TreeState>>,
    /// The serial and feasibility distance we held in each dropped tree, taken up again if
    /// its root comes back (see [`Trees::track`]). One pair per root ever dropped, as the
    /// index keeps one slot per root ever tracked.
    dropped: HashMap<NodeId, (u32, u32)>,
}

impl Trees {
    /// The table of node `id` at `now`: its own tree only.
    pub(super) fn new(id: NodeId, now: Time) -> Self {
        let mut index = HashMap::default();
        index.insert(id, OWN_ROOT);
        Trees {
            index,
            slots: vec![Some(TreeState::new_root(id, now))],
            dropped: HashMap::default(),
        }
    }

    /// The number of slots: every root index is below it.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Our state in tree `ri`, unless its root is gone.
    pub(super) fn get(&self, ri: RootIdx) -> Option<&TreeState> {
        self.slots[ri].as_ref()
    }

    /// Our state in tree `ri`, unless its root is gone.
    pub(super) fn get_mut(&mut self, ri: RootIdx) -> Option<&mut TreeState> {
        self.slots[ri].as_mut()
    }

    /// Our state in tree `ri`, known to be live.
    pub(super) fn live(&self, ri: RootIdx) -> &TreeState {
        self.slots[ri].as_ref().expect("live")
    }

    /// Our state in tree `ri`, known to be live.
    pub(super) fn live_mut(&mut self, ri: RootIdx) -> &mut TreeState {
        self.slots[ri].as_mut().expect("live")
    }

    /// Our own tree.
    pub(super) fn own(&self) -> &TreeState {
        self.slots[OWN_ROOT].as_ref().expect("own tree")
    }

    /// Our own tree.
    pub(super) fn own_mut(&mut self) -> &mut TreeState {
        self.slots[OWN_ROOT].as_mut().expect("own tree")
    }

    /// The slot of `root`, live or not.
    pub(super) fn index_of(&self, root: NodeId) -> Option<RootIdx> {
        self.index.get(&root).copied()
    }

    /// Whether slot `ri` holds a tree.
    pub(super) fn is_live(&self, ri: RootIdx) -> bool {
        self.slots[ri].is_some()
    }

    /// The index of `root`'s tree, if we track it.
    pub(super) fn live_root(&self, root: NodeId) -> Option<RootIdx> {
        self.index_of(root).filter(|&i| self.is_live(i))
    }

    /// Our state in `root`'s tree, if we track it.
    pub(super) fn find(&self, root: NodeId) -> Option<&TreeState> {
        self.index.get(&root).and_then(|&i| self.slots[i].as_ref())
    }

    /// Every tree we track, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &TreeState> {
        self.slots.iter().flatten()
    }

    /// This node's parent in every tree that has one.
    pub(super) fn parents(&self) -> HashSet<NodeId> {
        self.iter().filter_map(|t| t.parent).collect()
    }

    /// Starts tracking `root`'s tree, detached (in its old slot if it had one). A tree
    /// tracked before starts from the serial and feasibility distance we last held in it,
    /// as Babel keeps its source table past a retraction: peers that took us as parent
    /// before we dropped the tree may not have heard yet, and still advertise that serial
    /// with a path through us; a fresh state (serial 0) would find any of them feasible
    /// and close a cycle. This cost cycles after every healed partition in the simulator.
    /// A root that restarted from serial 1 meanwhile is asked for a newer serial, and
    /// jumps to it (see `Core::on_serial_tick`).
    pub(super) fn track(&mut self, root: NodeId, now: Time) {
        let idx = match self.index.get(&root) {
            Some(&i) => i,
            None => {
                self.slots.push(None);
                self.index.insert(root, self.slots.len() - 1);
                self.slots.len() - 1
            }
        };
        let mut t = TreeState::new_detached(root, now);
        if let Some(&(serial, fd_us)) = self.dropped.get(&root) {
            t.serial = serial;
            t.fd_us = fd_us;
        }
        self.slots[idx] = Some(t);
    }

    /// Stops tracking `root`'s tree: its slot and our last state in it, if it was live.
    pub(super) fn drop_root(&mut self, root: NodeId) -> Option<(RootIdx, TreeState)> {
        let &ri = self.index.get(&root)?;
        let t = self.slots[ri].take()?;
        self.dropped.insert(root, (t.serial, t.fd_us));
        Some((ri, t))
    }
}

/// Our state in a tree as an advert entry.
pub(super) fn entry_of(t: &TreeState) -> AdvertEntry {
    AdvertEntry {
        root: t.root,
        serial: t.serial,
        dist_us: t.dist_us,
        connected: t.connected,
    }
}

/// The entry of a tree in which this node has no path, at `serial`.
pub(super) fn no_path(root: NodeId, serial: u32) -> AdvertEntry {
    AdvertEntry {
        root,
        serial,
        dist_us: INFINITE,
        connected: false,
    }
}
