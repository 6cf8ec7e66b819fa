//! Parent hints: far children that may share a cluster are introduced to each other.
//!
//! Owns the far children already introduced ([`Hints`]), so that a pair that stays apart
//! is not introduced again every few rounds.

use super::Core;
use super::trees::RootIdx;
use crate::proto::id::{IdMap as HashMap, NodeId};
use crate::proto::time::Time;
use std::time::Duration;

/// A child attached over a link at least this long (one-way, µs) is introduced to its
/// siblings at about the same latency (see `Core::introduce_siblings`).
const SIBLING_HINT_MIN_LAT_US: u32 = 1_000;

/// The same two far children are introduced again only after this long.
const REINTRODUCE_AFTER: Duration = Duration::from_secs(60);

/// Far children introduced to each other, and when (see `Core::introduce_far_children`).
#[derive(Default)]
pub(super) struct Hints {
    introduced: HashMap<(RootIdx, NodeId, NodeId), Time>,
}

impl Hints {
    /// Whether to introduce `a` and `b` to each other in tree `ri` now: not if they were
    /// less than `REINTRODUCE_AFTER` ago. Notes the introduction down if so.
    fn introduce(&mut self, ri: RootIdx, a: NodeId, b: NodeId, now: Time) -> bool {
        let key = (ri, a.min(b), a.max(b));
        if self
            .introduced
            .get(&key)
            .is_some_and(|at| now.saturating_since(*at) < REINTRODUCE_AFTER)
        {
            return false;
        }
        self.introduced.insert(key, now);
        true
    }

    /// Forgets the introductions that may be repeated.
    pub(super) fn expire(&mut self, now: Time) {
        self.introduced
            .retain(|_, at| now.saturating_since(*at) < REINTRODUCE_AFTER);
    }
}

impl Core {
    /// Introduces to each other the far children whose latencies from us are within an
    /// eighth of each other (neighbours in latency order; at most `max_hinted` pairs).
    /// Not while this node is still meeting the members: every tree is forming then, and
    /// each hint costs the receiver a hinted peer to measure.
    pub(super) fn introduce_far_children(&mut self, ri: RootIdx) {
        if !self.probing.met_everyone() {
            return;
        }
        let t = self.trees.live(ri);
        let root = t.root;
        let mut far: Vec<(u32, NodeId)> = t
            .children
            .iter()
            .filter_map(|c| self.nbrs.lat_us(c).map(|l| (l, *c)))
            .filter(|(l, _)| *l >= SIBLING_HINT_MIN_LAT_US)
            .collect();
        far.sort_unstable();
        let pairs: Vec<(NodeId, NodeId)> = far
            .windows(2)
            .filter(|w| w[1].0 <= w[0].0 + w[0].0 / 8)
            .map(|w| (w[0].1, w[1].1))
            .take(self.config.max_hinted)
            .collect();
        for (a, b) in pairs {
            // A pair in different clusters stays apart; telling it again every few rounds
            // would cost two hinted watches each time, for nothing.
            if !self.hints.introduce(ri, a, b, self.now) {
                continue;
            }
            self.out.hint(a, root, b);
            self.out.hint(b, root, a);
        }
    }

    /// A child attached over a long link: it has entered a far cluster. Other children at
    /// about the same latency from us are probably in that cluster too, and then only one
    /// of them should stay attached to us (wide-area optimality). Nothing in their own
    /// candidate sets may lead them to each other (each sees only its own subtree nearby),
    /// so we introduce them to each other with parent hints, both ways; the rules then
    /// decide who moves under whom. Costs a few hints per long attach, nothing in a settled
    /// tree.
    pub(super) fn introduce_siblings(&mut self, ri: RootIdx, child: NodeId) {
        // Not while still meeting the members (see `introduce_far_children`).
        if !self.probing.met_everyone() {
            return;
        }
        let Some(lat) = self.nbrs.lat_us(&child) else {
            return;
        };
        if lat < SIBLING_HINT_MIN_LAT_US {
            return;
        }
        let (lo, hi) = (lat - lat / 8, lat + lat / 8);
        let t = self.trees.live(ri);
        let root = t.root;
        let sibs: Vec<NodeId> = t
            .children
            .iter()
            .copied()
            .filter(|s| *s != child)
            .filter(|s| self.nbrs.lat_us(s).is_some_and(|l| (lo..=hi).contains(&l)))
            .take(self.config.max_hinted + 1)
            .collect();
        if sibs.len() > self.config.max_hinted {
            // A tree still forming (many far children at once): the candidate sets are
            // doing the work, and introductions would only flood everyone with hints.
            return;
        }
        for s in sibs {
            self.out.hint(child, root, s);
            self.out.hint(s, root, child);
        }
    }
}
