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

impl Core {
    /// One root's state from a peer: from our parent it sets our own state; from anyone
    /// else it is a candidate to judge. `pushed` marks a [`Message::TreeUpdate`].
    pub(super) fn handle_entry(&mut self, from: NodeId, e: AdvertEntry, pushed: bool) {
        let Some(ri) = self.live_root(e.root) else {
            return;
        };
        let slot = self.heard.entry(from).or_default();
        if slot.len() <= ri {
            slot.resize(ri + 1, Heard::default());
        }
        slot[ri] = heard_of(&e);
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
        if let Some(max) = live.iter().flatten().copied().max() {
            let heard = self.heard.entry(from).or_default();
            if heard.len() <= max {
                heard.resize(max + 1, Heard::default());
            }
            for (e, ri) in entries.iter().zip(&live) {
                if let Some(ri) = *ri {
                    heard[ri] = heard_of(e);
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
