//! Parent hints: far children that may share a cluster are introduced to each other.

use super::*;

impl Core {
    /// Introduces to each other the far children whose latencies from us are within an
    /// eighth of each other (neighbours in latency order; at most `max_hinted` pairs).
    /// Not while this node is still meeting the members: every tree is forming then, and
    /// each hint costs the receiver a hinted peer to measure.
    pub(super) fn introduce_far_children(&mut self, ri: RootIdx) {
        if !self.sweep.is_empty() {
            return;
        }
        let t = self.trees[ri].as_ref().expect("live");
        let root = t.root;
        let mut far: Vec<(u32, NodeId)> = t
            .children
            .iter()
            .filter_map(|c| self.lat_us(c).map(|l| (l, *c)))
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
            let key = (ri, a.min(b), a.max(b));
            if self
                .introduced
                .get(&key)
                .is_some_and(|at| self.now.saturating_since(*at) < REINTRODUCE_AFTER)
            {
                continue;
            }
            self.introduced.insert(key, self.now);
            self.outbox.hint(a, root, b);
            self.outbox.hint(b, root, a);
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
        if !self.sweep.is_empty() {
            return;
        }
        let Some(lat) = self.lat_us(&child) else {
            return;
        };
        if lat < SIBLING_HINT_MIN_LAT_US {
            return;
        }
        let (lo, hi) = (lat - lat / 8, lat + lat / 8);
        let t = self.trees[ri].as_ref().expect("live");
        let root = t.root;
        let sibs: Vec<NodeId> = t
            .children
            .iter()
            .copied()
            .filter(|s| *s != child)
            .filter(|s| self.lat_us(s).is_some_and(|l| (lo..=hi).contains(&l)))
            .take(self.config.max_hinted + 1)
            .collect();
        if sibs.len() > self.config.max_hinted {
            // A tree still forming (many far children at once): the candidate sets are
            // doing the work, and introductions would only flood everyone with hints.
            return;
        }
        for s in sibs {
            self.outbox.hint(child, root, s);
            self.outbox.hint(s, root, child);
        }
    }
}
