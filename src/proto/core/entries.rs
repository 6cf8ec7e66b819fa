//! Tree entries received from peers (adverts and pushed updates): noted down as heard, then acted on.
//!
//! Owns what peers told us about their state in each tree ([`HeardTable`]): written here
//! when entries arrive, read when candidates are judged (`parents`, `probing`), trimmed
//! to the peers we still trade with (`rounds`). Also its scratch space, kept to save an
//! allocation per message and per tree judged.

use super::Core;
use super::trees::RootIdx;
use crate::proto::id::{IdMap as HashMap, IdSet as HashSet, NodeId};
use crate::proto::message::AdvertEntry;

/// What a peer last told us about one root.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Heard {
    /// The root's serial it reported.
    pub(super) serial: u32,
    /// Its distance to the root, µs.
    pub(super) dist_us: u32,
    /// Whether it had a path to the root.
    pub(super) connected: bool,
    /// Whether anything was heard at all (a default slot has not).
    pub(super) known: bool,
}

/// What we note down about a peer's entry.
fn heard_of(e: &AdvertEntry) -> Heard {
    Heard {
        serial: e.serial,
        dist_us: e.dist_us,
        connected: e.connected,
        known: true,
    }
}

/// Everything heard from one peer, per root. Most peers tell us about a few roots (an
/// answer to an advert request, a parent hint's exchange) and some about every root
/// (candidates' full adverts): a short list sorted by root while the roots are few, one
/// slot per root (of the roots tracked) once they are many. A slot per root for every
/// peer was most of the simulator's memory at a thousand nodes.
#[derive(Clone, Debug)]
enum HeardFrom {
    /// (root, what was heard), sorted by root, every entry known.
    Few(Vec<(u32, Heard)>),
    /// Indexed by root; a slot never written holds `Heard::default()` (not known).
    Many(Vec<Heard>),
}

impl Default for HeardFrom {
    fn default() -> Self {
        HeardFrom::Few(Vec::new())
    }
}

impl HeardFrom {
    /// The most roots kept as a list with `roots` roots tracked: a list entry takes a
    /// third more room than a slot, and lookups in it are binary searches.
    fn few_max(roots: usize) -> usize {
        (roots / 8).max(16)
    }

    /// What was heard about root `ri`, if anything.
    fn get(&self, ri: RootIdx) -> Option<Heard> {
        match self {
            HeardFrom::Few(list) => list
                .binary_search_by_key(&(ri as u32), |&(r, _)| r)
                .ok()
                .map(|i| list[i].1),
            HeardFrom::Many(slots) => slots.get(ri).copied().filter(|h| h.known),
        }
    }

    /// Notes down `h` about root `ri`; `roots` is the number of roots tracked (every root
    /// index is below it), `more` how many more roots are about to be written after this
    /// one (so a list that would outgrow itself becomes slots at once).
    fn set(&mut self, ri: RootIdx, h: Heard, roots: usize, more: usize) {
        debug_assert!(ri < roots && h.known);
        if let HeardFrom::Few(list) = self {
            match list.binary_search_by_key(&(ri as u32), |&(r, _)| r) {
                Ok(i) => return list[i].1 = h,
                Err(i) if list.len() + 1 + more <= Self::few_max(roots) => {
                    return list.insert(i, (ri as u32, h));
                }
                Err(_) => {
                    let mut slots = vec![Heard::default(); roots];
                    for &(r, old) in list.iter() {
                        slots[r as usize] = old;
                    }
                    *self = HeardFrom::Many(slots);
                }
            }
        }
        let HeardFrom::Many(slots) = self else {
            unreachable!("made slots above")
        };
        if slots.len() <= ri {
            slots.resize(roots, Heard::default());
        }
        slots[ri] = h;
    }

    /// Calls `f(ri, heard)` for every root `ri` heard of with `due[ri]` (`due` covers
    /// every root index), in ascending order of root.
    fn for_each_of(&self, due: &[bool], mut f: impl FnMut(RootIdx, Heard)) {
        match self {
            HeardFrom::Few(list) => {
                for &(r, h) in list {
                    if due[r as usize] {
                        f(r as usize, h);
                    }
                }
            }
            HeardFrom::Many(slots) => {
                for (ri, h) in slots.iter().enumerate() {
                    if h.known && due[ri] {
                        f(ri, *h);
                    }
                }
            }
        }
    }

    /// Every root heard of, in ascending order of root.
    fn known(&self) -> Vec<(RootIdx, Heard)> {
        match self {
            HeardFrom::Few(list) => list.iter().map(|&(r, h)| (r as RootIdx, h)).collect(),
            HeardFrom::Many(slots) => slots
                .iter()
                .enumerate()
                .filter(|(_, h)| h.known)
                .map(|(r, h)| (r, *h))
                .collect(),
        }
    }
}

/// Everything heard from every peer we trade with.
#[derive(Default)]
pub(super) struct HeardTable {
    from: HashMap<NodeId, HeardFrom>,
    /// Scratch space of `Core::handle_entries`: the slot of each entry's root.
    live_scratch: Vec<Option<RootIdx>>,
    /// Scratch space of `Core::evaluate_all`: what every peer told us about one root.
    root_scratch: Vec<(NodeId, Heard)>,
}

impl HeardTable {
    /// Notes down `e` from `from` about root `ri`; `roots` is the number of root slots.
    fn note(&mut self, from: NodeId, ri: RootIdx, e: &AdvertEntry, roots: usize) {
        self.from
            .entry(from)
            .or_default()
            .set(ri, heard_of(e), roots, 0);
    }

    /// Notes down the `entries` from `from` whose root slot `live` gives (`count` of them),
    /// under one lookup of the peer; `roots` is the number of root slots.
    fn note_all(
        &mut self,
        from: NodeId,
        entries: &[AdvertEntry],
        live: &[Option<RootIdx>],
        count: usize,
        roots: usize,
    ) {
        let heard = self.from.entry(from).or_default();
        let mut more = count;
        for (e, ri) in entries.iter().zip(live) {
            if let Some(ri) = *ri {
                more -= 1;
                heard.set(ri, heard_of(e), roots, more);
            }
        }
    }

    /// What `peer` last told us about root `ri`, if anything.
    pub(super) fn get(&self, peer: &NodeId, ri: RootIdx) -> Option<Heard> {
        self.from.get(peer).and_then(|from| from.get(ri))
    }

    /// Whether anything was heard from `peer`.
    pub(super) fn knows(&self, peer: &NodeId) -> bool {
        self.from.contains_key(peer)
    }

    /// Every root `peer` told us about, in ascending order of root.
    pub(super) fn known_from(&self, peer: &NodeId) -> Vec<(RootIdx, Heard)> {
        self.from
            .get(peer)
            .map(HeardFrom::known)
            .unwrap_or_default()
    }

    /// Forgets everything heard from `peer`.
    pub(super) fn forget(&mut self, peer: &NodeId) {
        self.from.remove(peer);
    }

    /// Forgets what every peer told us about root `ri`, whose tree was dropped. The slot
    /// is the root's again if it comes back, and what was heard before the drop describes
    /// trees that no longer exist: a node judging candidates by it after the root returned
    /// attached to peers that had dropped the tree too, and each such pair closed a cycle.
    pub(super) fn forget_root(&mut self, ri: RootIdx) {
        for from in self.from.values_mut() {
            match from {
                HeardFrom::Few(list) => list.retain(|&(r, _)| r as RootIdx != ri),
                HeardFrom::Many(slots) => {
                    if let Some(h) = slots.get_mut(ri) {
                        *h = Heard::default();
                    }
                }
            }
        }
    }

    /// Forgets what was heard from every peer not in `keep`.
    pub(super) fn keep_only(&mut self, keep: &HashSet<NodeId>) {
        self.from.retain(|k, _| keep.contains(k));
    }

    /// What every peer told us about root `ri`, in the map's order, in the scratch space
    /// (to be given back with [`HeardTable::give_back`]).
    pub(super) fn of_root(&mut self, ri: RootIdx) -> Vec<(NodeId, Heard)> {
        let mut heard = std::mem::take(&mut self.root_scratch);
        heard.clear();
        heard.extend(
            self.from
                .iter()
                .filter_map(|(c, from)| Some((*c, from.get(ri)?))),
        );
        heard
    }

    /// Gives back the scratch space of [`HeardTable::of_root`].
    pub(super) fn give_back(&mut self, heard: Vec<(NodeId, Heard)>) {
        self.root_scratch = heard;
    }

    /// What every peer told us about each root `ri` with `due[ri]`, for
    /// [`Core::evaluate_heard`] of many trees: the entries of root `ri` are
    /// `list[start[ri]..start[ri + 1]]`, in the heard map's order, as [`Core::evaluate_all`]
    /// would collect them (`filler` fills the list before it is written). One pass over
    /// each peer's entries (in root order) instead of a lookup in every peer's entries for
    /// every tree: at a thousand trees and hundreds of peers heard from, those lookups were
    /// about half of a housekeeping round's time.
    pub(super) fn by_root(
        &self,
        due: &[bool],
        filler: NodeId,
    ) -> (Vec<usize>, Vec<(NodeId, Heard)>) {
        let mut start = vec![0usize; due.len() + 1];
        for from in self.from.values() {
            from.for_each_of(due, |ri, _| start[ri + 1] += 1);
        }
        for ri in 0..due.len() {
            start[ri + 1] += start[ri];
        }
        let mut at = start.clone();
        let mut list = vec![(filler, Heard::default()); start[due.len()]];
        for (c, from) in &self.from {
            from.for_each_of(due, |ri, h| {
                list[at[ri]] = (*c, h);
                at[ri] += 1;
            });
        }
        (start, list)
    }
}

impl Core {
    /// One root's state from a peer: from our parent it sets our own state; from anyone
    /// else it is a candidate to judge. `pushed` marks a [`Message::TreeUpdate`].
    pub(super) fn handle_entry(&mut self, from: NodeId, e: AdvertEntry, pushed: bool) {
        let Some(ri) = self.trees.live_root(e.root) else {
            return;
        };
        let roots = self.trees.len();
        self.heard.note(from, ri, &e, roots);
        self.act_on_entry(from, ri, e, pushed);
    }

    /// Several entries from one peer, as [`Core::handle_entry`] one after the other would
    /// handle them, in fewer passes over memory: every root is looked up first (the lookups
    /// are independent, so their cache misses overlap instead of queueing behind each
    /// other's work), then everything heard is written under one lookup of the peer, then
    /// each entry is acted on. Equivalent because acting on one root's entry reads and
    /// writes only that root's tree and what was heard about that root, and nothing in
    /// between adds or removes roots or forgets the peer.
    pub(super) fn handle_entries(&mut self, from: NodeId, entries: &[AdvertEntry], pushed: bool) {
        if let [e] = entries {
            return self.handle_entry(from, *e, pushed);
        }
        let mut live = std::mem::take(&mut self.heard.live_scratch);
        live.clear();
        live.extend(entries.iter().map(|e| self.trees.index_of(e.root)));
        for slot in live.iter_mut() {
            *slot = slot.filter(|&i| self.trees.is_live(i));
        }
        let count = live.iter().flatten().count();
        if count > 0 {
            let roots = self.trees.len();
            self.heard.note_all(from, entries, &live, count, roots);
            for (e, ri) in entries.iter().zip(&live) {
                if let Some(ri) = *ri {
                    self.act_on_entry(from, ri, *e, pushed);
                }
            }
        }
        self.heard.live_scratch = live;
    }

    /// The part of [`Core::handle_entry`] after `e` was written down as heard from `from`.
    pub(super) fn act_on_entry(&mut self, from: NodeId, ri: RootIdx, e: AdvertEntry, pushed: bool) {
        let t = self.trees.live(ri);
        if t.parent == Some(from) {
            self.apply_parent_state(ri, e);
        } else if pushed {
            // It thinks we are its child; we are not (any more).
            self.out.detach(from, e.root);
        } else {
            self.consider(ri, from);
            self.answer_worse_entry(ri, from, e);
        }
    }
}
