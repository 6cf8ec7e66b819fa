//! Parent hints: far children that may share a cluster are introduced to each other.
//!
//! Owns the far children already introduced ([`Hints`]), so that a pair that stays apart
//! is not introduced again every few rounds.

use super::Core;
use super::trees::{OWN_ROOT, RootIdx, entry_of};
use crate::proto::id::{IdMap as HashMap, NodeId};
use crate::proto::message::AdvertEntry;
use crate::proto::time::Time;
use crate::proto::tree::dist_moved;
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
    /// Whether every tree's far children were introduced once the sweep first met
    /// everyone (introductions wait for that; see `Core::introduce_far_children`).
    after_sweep: bool,
    /// Per tree in which we enter our cluster, the parent and dist our cluster
    /// neighbours were last told (see `Core::notify_entries`).
    notified: HashMap<RootIdx, (NodeId, u32)>,
    /// The cluster neighbours told our entries, and when each last became one (see
    /// `Core::notify_entries`): a peer that leaves the set and comes back within
    /// [`REINTRODUCE_AFTER`] is not told again.
    mates_told: HashMap<NodeId, Time>,
    /// Members of our discovered cluster measured again because our samples put them
    /// farther than a cluster neighbour, and when (see `Core::remeasure_cluster_members`).
    remeasured: HashMap<NodeId, Time>,
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

    /// Whether this is the first round since the sweep met everyone in which every
    /// tree's far children are to be introduced (true once: the pairs a forming tree left
    /// are then met at once, not over the next eight rounds, which at a thousand nodes
    /// was most of the cold start's tail).
    pub(super) fn first_after_sweep(&mut self, met_everyone: bool) -> bool {
        let first = met_everyone && !self.after_sweep;
        self.after_sweep |= met_everyone;
        first
    }

    /// Forgets what was noted about tree `ri` (its root went away).
    pub(super) fn forget_root(&mut self, ri: RootIdx) {
        self.notified.remove(&ri);
    }

    /// Forgets the introductions that may be repeated.
    pub(super) fn expire(&mut self, now: Time) {
        self.introduced
            .retain(|_, at| now.saturating_since(*at) < REINTRODUCE_AFTER);
        self.remeasured
            .retain(|_, at| now.saturating_since(*at) < REINTRODUCE_AFTER);
    }

    /// Notes `mates` as this round's cluster neighbours: returns those not told our
    /// entries yet (new, or back after [`REINTRODUCE_AFTER`]).
    fn new_mates(&mut self, mates: &[NodeId], now: Time) -> Vec<NodeId> {
        let new: Vec<NodeId> = (mates.iter())
            .filter(|m| {
                (self.mates_told.get(m))
                    .is_none_or(|at| now.saturating_since(*at) >= REINTRODUCE_AFTER)
            })
            .copied()
            .collect();
        for m in mates {
            self.mates_told.insert(*m, now);
        }
        // Those gone from the set keep their time until it may be repeated.
        (self.mates_told).retain(|_, at| now.saturating_since(*at) < REINTRODUCE_AFTER);
        new
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

impl Core {
    /// Tells every cluster neighbour (`mates`: measured within [`Core::near_us`]) our state
    /// in each tree in which we enter our cluster (connected, parent far): in every such
    /// tree when the sweep first met everyone (`all`), and later in a tree where we became
    /// an entry or our dist as one moved (as an advert would carry it), once per round (at
    /// once where a shortcut made us one, see [`Core::notify_new_entry`]). A peer that
    /// becomes a cluster neighbour later (its samples from a cold start's rush replaced by
    /// good ones) is told every tree in which we are an entry, once. Two entries into one
    /// cluster must hear each other for the rules to put one under the other, and in a
    /// cluster larger than a candidate set they often never do: at 1000 nodes the last
    /// trees of a cold start were each entered twice by two nodes 140 µs apart that had
    /// heard nothing from each other in that tree. Costs one advert entry per cluster
    /// neighbour per change of an entry, and per entry per new neighbour; nothing while
    /// the trees and the latencies hold still.
    pub(super) fn notify_entries(&mut self, all: bool, mates: &[NodeId]) {
        if !self.probing.met_everyone() {
            return;
        }
        let new_mates = self.hints.new_mates(mates, self.now);
        for ri in 0..self.trees.len() {
            match self.entry_news(ri, all) {
                Some(true) => self.send_entry(ri, mates),
                Some(false) if !new_mates.is_empty() => self.send_entry(ri, &new_mates),
                _ => {}
            }
        }
    }

    /// Measures again a peer that tells us its state although we do not watch it nor count
    /// it a cluster neighbour: it counts us one (an entry notice, see
    /// [`Core::notify_entries`]), so our samples of it are likely from a cold start's rush.
    /// Without a fresh sample its state is forgotten at the next housekeeping (an inbound
    /// prober's is kept only while it probes, and its probes back off), and the cluster
    /// stays entered twice: at 1000 nodes with flat clusters, two entries 140 µs apart
    /// straight under one root, one judging the other by 4 ms samples, held for seconds.
    /// Not one sampled lately: at most one probe per peer per few periods.
    pub(super) fn measure_unwatched_sender(&mut self, from: NodeId) {
        if self.probing.met_everyone()
            && self.nbrs.cands.role(&from).is_none()
            && self.nbrs.lat_us(&from).is_some_and(|l| l > self.near_us())
            && self.members.is_alive(&from)
            && !(self.probing).sampled_within(&from, self.now, self.stale_after())
        {
            self.measure(from);
        }
    }

    /// Whether we enter our cluster in tree `ri` (`None`: not) and, if so, whether that
    /// is news to our cluster neighbours (`all`: whenever we enter); notes it as told.
    fn entry_news(&mut self, ri: RootIdx, all: bool) -> Option<bool> {
        let entry = (ri != OWN_ROOT && self.trees.is_live(ri))
            .then(|| self.trees.live(ri))
            .filter(|t| t.connected && self.parent_is_far(t))
            .and_then(|t| Some((t.parent?, t.dist_us)));
        let Some((parent, dist_us)) = entry else {
            self.hints.notified.remove(&ri);
            return None;
        };
        let told = self.hints.notified.get(&ri).copied();
        let changed = told.is_none_or(|(p, d)| p != parent || dist_moved(d, dist_us));
        if all || changed {
            self.hints.notified.insert(ri, (parent, dist_us));
        }
        Some(all || changed)
    }

    /// Sends our state in tree `ri` to each of `mates` but the root and our children,
    /// nearest the root first (by what they told us, unheard last): the cluster's old
    /// entry, the one whose move ends the cluster being entered twice, hears first rather
    /// than wherever its id falls among a hundred sends.
    fn send_entry(&mut self, ri: RootIdx, mates: &[NodeId]) {
        let mut mates = mates.to_vec();
        mates.sort_by_cached_key(|m| {
            let h = self.heard.get(m, ri).filter(|h| h.connected);
            (h.map_or(u32::MAX, |h| h.dist_us), *m)
        });
        let t = self.trees.live(ri);
        let e = entry_of(t);
        for m in &mates {
            if *m != t.root && !t.children.contains(m) && self.members.is_alive(m) {
                self.stats.entry_notices += 1;
                self.out.answer(*m, e);
            }
        }
    }

    /// Measures again the members of our discovered cluster that our own samples put
    /// farther than a cluster neighbour (at most `max_hinted` a round, each once per
    /// [`REINTRODUCE_AFTER`]). Discovery groups the members by everyone's measurements:
    /// at 1000 nodes two entries of one tree into one cluster, 140 µs apart, had measured
    /// each other only in a cold start's rush (1.7 ms one way), so neither was the
    /// other's cluster neighbour, neither told the other its state, and the cluster stayed
    /// entered twice for good. Measured again, they become neighbours and are told our
    /// entries ([`Core::notify_entries`]). Costs nothing where our samples agree with
    /// discovery. One plain probe, not a watch ([`Core::measure`]): watches are few, and
    /// these evicted the ones learnt from parent hints (scale-1000 then converged at 15.8 s
    /// instead of 11.6 s); one low sample is enough, the filter keeps the smallest.
    pub(super) fn remeasure_cluster_members(&mut self) {
        if !self.probing.met_everyone() {
            return;
        }
        let near = self.near_us();
        let Some(group) = self.clusters().group_of(1, &self.id) else {
            return;
        };
        let suspects: Vec<NodeId> = (group.members.iter())
            .filter(|m| **m != self.id && self.nbrs.lat_us(m).is_some_and(|l| l > near))
            .filter(|m| !self.hints.remeasured.contains_key(m))
            .take(self.config.max_hinted)
            .copied()
            .collect();
        for peer in suspects {
            self.hints.remeasured.insert(peer, self.now);
            self.stats.cluster_remeasures += 1;
            self.ping(peer, false);
        }
    }

    /// We just left a cluster neighbour for a far parent in tree `ri`, a shorter way out
    /// than our cluster's entry has: we tell our cluster neighbours at once, not at the
    /// next round. The old entry, and the members of its subtree that gain the shortcut
    /// threshold, then move under us within a round trip; waiting for the round, each
    /// such member took a far parent of its own meanwhile, and at 1000 nodes those
    /// trickles kept clusters entered several times for seconds.
    pub(super) fn notify_new_entry(&mut self, ri: RootIdx) {
        if !self.probing.met_everyone() {
            return;
        }
        if self.entry_news(ri, false) == Some(true) {
            let mates = self.nbrs.measured_within(self.near_us());
            self.send_entry(ri, &mates);
        }
    }

    /// A cluster neighbour outside our candidate set told us its state in tree `ri`,
    /// farther from the root than ours (by dist, then id) while we enter our cluster in
    /// that tree: we answer with our state, which the rules may put it under. Its notice
    /// went out when its state changed, and what we told it earlier may have been judged
    /// against a state of its own it no longer holds: two entries left that way each
    /// knew of the other only the state it had forgotten.
    pub(super) fn answer_worse_entry(&mut self, ri: RootIdx, from: NodeId, e: AdvertEntry) {
        if !self.probing.met_everyone() || !e.connected || self.nbrs.cands.role(&from).is_some() {
            return;
        }
        let t = self.trees.live(ri);
        if !t.connected
            || (t.dist_us, self.id) >= (e.dist_us, from)
            || t.parent == Some(from)
            || t.children.contains(&from)
            || self.nbrs.lat_us(&from).is_none_or(|l| l > self.near_us())
            || !self.parent_is_far(t)
        {
            return;
        }
        self.stats.entry_answers += 1;
        let e = entry_of(t);
        self.out.answer(from, e);
    }
}
