//! Tree entries received from peers (adverts and pushed updates): noted down as heard, then acted on.

use super::*;

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
pub(super) fn heard_of(e: &AdvertEntry) -> Heard {
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
pub(super) enum HeardFrom {
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
    pub(super) fn get(&self, ri: RootIdx) -> Option<Heard> {
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
    pub(super) fn set(&mut self, ri: RootIdx, h: Heard, roots: usize, more: usize) {
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
    pub(super) fn for_each_of(&self, due: &[bool], mut f: impl FnMut(RootIdx, Heard)) {
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
    pub(super) fn known(&self) -> Vec<(RootIdx, Heard)> {
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

impl Core {
    /// One root's state from a peer: from our parent it sets our own state; from anyone
    /// else it is a candidate to judge. `pushed` marks a [`Message::TreeUpdate`].
    pub(super) fn handle_entry(&mut self, from: NodeId, e: AdvertEntry, pushed: bool) {
        let Some(ri) = self.live_root(e.root) else {
            return;
        };
        let roots = self.trees.len();
        self.heard
            .entry(from)
            .or_default()
            .set(ri, heard_of(&e), roots, 0);
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
        let mut live = std::mem::take(&mut self.entry_scratch);
        live.clear();
        live.extend(
            entries
                .iter()
                .map(|e| self.root_index.get(&e.root).copied()),
        );
        for slot in live.iter_mut() {
            *slot = slot.filter(|&i| self.trees[i].is_some());
        }
        let count = live.iter().flatten().count();
        if count > 0 {
            let roots = self.trees.len();
            let heard = self.heard.entry(from).or_default();
            let mut more = count;
            for (e, ri) in entries.iter().zip(&live) {
                if let Some(ri) = *ri {
                    more -= 1;
                    heard.set(ri, heard_of(e), roots, more);
                }
            }
            for (e, ri) in entries.iter().zip(&live) {
                if let Some(ri) = *ri {
                    self.act_on_entry(from, ri, *e, pushed);
                }
            }
        }
        self.entry_scratch = live;
    }

    /// The part of [`Core::handle_entry`] after `e` was written down as heard from `from`.
    pub(super) fn act_on_entry(&mut self, from: NodeId, ri: RootIdx, e: AdvertEntry, pushed: bool) {
        let t = self.trees[ri].as_ref().expect("live");
        if t.parent == Some(from) {
            self.apply_parent_state(ri, e);
        } else if pushed {
            // It thinks we are its child; we are not (any more).
            self.outbox.detach(from, e.root);
        } else {
            self.consider(ri, from);
        }
    }
}
