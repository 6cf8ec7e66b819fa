//! Questions to other nodes: advert requests, parent queries and serial requests, rate limited.

use super::*;

impl Core {
    /// Asks `view.id` for its state once its serial reaches ours (or the next one, if our
    /// feasibility distance is what blocks it).
    pub(super) fn ask(&mut self, ri: RootIdx, view: &CandidateView) {
        let t = self.trees[ri].as_ref().expect("live");
        let want = if view.serial < t.serial {
            t.serial
        } else {
            t.serial + 1
        };
        let key = (view.id, ri);
        if let Some(&(s, at)) = self.asked.get(&key)
            && s >= want
            && self.now.saturating_since(at) < self.config.serial_period
        {
            return;
        }
        self.asked.insert(key, (want, self.now));
        self.stats.asks += 1;
        let root = t.root;
        self.out_asks.entry(view.id).or_default().push((root, want));
    }

    /// Asks `view.id` for its parent in this tree, at most once per serial period; and
    /// while neither our parent nor its dist changed, only once per `REQUERY_AFTER`: the
    /// same question would get the same answer (in a settled tree the candidate is often
    /// in our own subtree, and the walk up its ancestry only leads back to us). Returns
    /// whether the query goes out.
    pub(super) fn query_parent(&mut self, ri: RootIdx, view: &CandidateView) -> bool {
        let key = (view.id, ri);
        let t = self.trees[ri].as_ref().expect("live");
        let (parent, root) = (t.parent, t.root);
        if let Some(&(at, p, d)) = self.queried.get(&key) {
            let age = self.now.saturating_since(at);
            // Dists as heard jitter a little (an answer carries the exact figure, adverts
            // only changes above 0.1%): the same bound as for adverts.
            let delta = d.abs_diff(view.dist_us);
            let same = p == parent && (delta <= 20 || delta as u64 * 1000 <= d as u64);
            if age < self.config.serial_period || (same && age < REQUERY_AFTER) {
                return false;
            }
        }
        self.queried.insert(key, (self.now, parent, view.dist_us));
        self.stats.parent_queries += 1;
        self.out_queries.entry(view.id).or_default().push(root);
        true
    }

    /// Asks the root for a fresh serial (at most once per quarter serial period per tree): a node without a path needs one to accept a new parent.
    pub(super) fn request_serial(&mut self, ri: RootIdx) {
        let gap = self.config.serial_period / 4;
        if self
            .serial_requested
            .get(&ri)
            .is_some_and(|at| self.now.saturating_since(*at) < gap)
        {
            return;
        }
        self.serial_requested.insert(ri, self.now);
        let t = self.trees[ri].as_ref().expect("live");
        let (root, serial) = (t.root, t.serial + 1);
        self.send(root, Message::SerialRequest { root, serial });
    }
}
