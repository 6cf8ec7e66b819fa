//! Parent selection: judging candidates by the rules of [`crate::proto::tree`], switching, detaching, and what follows a change of our own state.
//!
//! Owns no fields: this is the logic that joins the parts of the core (our state in the
//! trees, what peers told us, the RTT estimates, the adverts and requests that follow).

use super::Core;
use super::entries::Heard;
use super::trees::{OWN_ROOT, RootIdx, entry_of};
use crate::proto::Event;
use crate::proto::id::NodeId;
use crate::proto::message::{AdvertEntry, Message};
use crate::proto::tree::{self, CandidateView, INFINITE, Judgement, SwitchReason};

/// Own RTT samples a peer needs before a connected node switches to it.
pub(super) const MIN_SAMPLES_TO_MOVE: usize = 3;

impl Core {
    /// What we know of candidate `c` in a tree, given what it last told us about it (`h`):
    /// that and our latency to it, with its RTT sample count; `None` unless it is alive and
    /// we have an RTT estimate.
    pub(super) fn view_heard(&self, c: NodeId, h: Heard) -> Option<(CandidateView, usize)> {
        if !self.members.is_alive(&c) {
            return None;
        }
        let rtt = self.nbrs.get(&c)?;
        let view = CandidateView {
            id: c,
            serial: h.serial,
            dist_us: h.dist_us,
            connected: h.connected,
            lat_us: rtt.lat_us()?,
        };
        Some((view, rtt.samples()))
    }

    /// The rules' verdict on `view` as a parent in tree `ri`, held back until the candidate
    /// is measured well enough (`samples`: its RTT sample count).
    pub(super) fn judge_sampled(
        &self,
        ri: RootIdx,
        view: &CandidateView,
        samples: usize,
    ) -> Judgement {
        let t = self.trees.live(ri);
        let parent_lat = t.parent.and_then(|p| self.nbrs.lat_us(&p));
        let rules = tree::Rules {
            threshold_us: self.config.shortcut_threshold.as_micros() as u32,
            leaf_search: self.probing.met_everyone(),
            flatten: self.config.flatten_clusters,
        };
        let verdict = tree::judge_with(t, self.id, parent_lat, view, rules);
        // A connected node only moves to a peer measured a few times: a first sample can
        // be far off (queueing), and a move on noise is a move too many. Repair need not
        // wait. A peer that would be taken but is not measured enough (it advertises to us
        // because it watches us) is probed first; without that, two equally good entries
        // into a cluster of which only one watches the other would never merge.
        if t.connected && samples < MIN_SAMPLES_TO_MOVE {
            return match verdict {
                // A candidate that would qualify once its state is fresh is measured first
                // too: without that, one heard of long ago, that does not advertise to us
                // again (its dist did not change), is never looked at again.
                Judgement::Switch(_) | Judgement::NeedFresh => Judgement::NeedMeasure,
                // Asking for its parent moves nothing: one sample of our own will do (noise
                // only makes a peer look farther). Waiting for three would stall the walk up
                // a cluster's subtree at every step, and lose it where the hinted peer is
                // dropped before its third sample.
                Judgement::AskParent if samples > 0 => Judgement::AskParent,
                _ => Judgement::No,
            };
        }
        verdict
    }

    /// Judges one candidate and acts on the verdict.
    pub(super) fn consider(&mut self, ri: RootIdx, c: NodeId) {
        if ri == OWN_ROOT {
            return;
        }
        let Some(h) = self.heard.get(&c, ri) else {
            return;
        };
        let Some((view, samples)) = self.view_heard(c, h) else {
            return;
        };
        self.consider_view(ri, view, samples);
    }

    /// [`Core::consider`] once the candidate's view and RTT sample count are known.
    pub(super) fn consider_view(&mut self, ri: RootIdx, view: CandidateView, samples: usize) {
        match self.judge_sampled(ri, &view, samples) {
            Judgement::Switch(why) => self.switch_to(ri, view, why),
            other => {
                self.remeasure_stale(ri, &view, samples, other);
                self.follow_up(ri, &view, other)
            }
        }
    }

    /// A peer that tells us its state but that we judge by fewer than
    /// [`MIN_SAMPLES_TO_MOVE`] samples, none of them recent, is measured again: a peer
    /// that watches us without our watching it may have only the sample the sweep took in
    /// a cold start's rush (at 1000 nodes, 14.6 ms for a cluster neighbour 280 µs away),
    /// and judged by it, the better of two entries into one cluster was never taken. So is
    /// one judged by old samples however many, when it is nearer the root than we are and
    /// in our discovered cluster, yet looks farther than a cluster neighbour: in the join
    /// storm of 120 processes, a cluster's second entry kept its samples of the first from
    /// the rush (42.6 ms for a neighbour 150 µs away), and that alone kept the cluster
    /// entered twice for good.
    fn remeasure_stale(
        &mut self,
        ri: RootIdx,
        view: &CandidateView,
        samples: usize,
        verdict: Judgement,
    ) {
        if verdict != Judgement::No || !self.probing.met_everyone() {
            return;
        }
        // Discovery groups the members by everyone's measurements, so one bad sample of
        // ours does not move a neighbour out of our cluster.
        let suspect = || {
            let t = self.trees.live(ri);
            // Nearer in the rules' own order, ties by id: two entries straight under the
            // root at one dist each hold the other away, and the one that ranks second
            // must measure the first again or the cluster stays entered twice.
            t.connected
                && (view.dist_us, view.id) < (t.dist_us, self.id)
                && view.lat_us > self.near_us()
                && (self.clusters().group_of(1, &self.id))
                    .is_some_and(|g| g.members.binary_search(&view.id).is_ok())
        };
        let fresh = self.stale_after();
        if (samples < MIN_SAMPLES_TO_MOVE || suspect())
            && !self.probing.sampled_within(&view.id, self.now, fresh)
        {
            self.measure(view.id);
        }
    }

    /// Acts on a verdict that is not a switch: ask for fresher state, or for the
    /// candidate's parent.
    pub(super) fn follow_up(&mut self, ri: RootIdx, view: &CandidateView, verdict: Judgement) {
        match verdict {
            Judgement::NeedFresh => self.ask(ri, view, true),
            // Parent queries only once the sweep has met every member: before that, every
            // tree is forming, nearly every neighbour looks worth asking, and each answer
            // costs a hinted peer and its probes; in a large overlay that floods.
            Judgement::AskParent if !self.probing.met_everyone() => {}
            Judgement::AskParent => {
                // What we heard may be stale by a little (small changes are not advertised):
                // ask for its exact state too.
                if self.query_parent(ri, view) {
                    self.ask(ri, view, false);
                    self.tell_state(ri, view);
                }
                // A peer much closer than our parent is worth a few samples of our own: one
                // taken while either end was busy can be far off, and a peer judged by it
                // alone may fail the rules and never be measured again (a second entry
                // into our cluster, 5 ms away by a sample from a cold start's backlog,
                // stayed a second entry for good).
                self.measure(view.id);
            }
            Judgement::NeedMeasure => self.measure(view.id),
            Judgement::No if self.probing.met_everyone() && self.entry_walk(ri, view) => {
                // The walk finds a better entry only above the peer; when we are that
                // better entry, the peer must hear of us, and it may not watch us. Once per
                // change: in a settled cluster the walks repeat every minute, into our own
                // subtree.
                if self.query_parent(ri, view) && self.first_query(view.id, ri) {
                    self.tell_state(ri, view);
                }
            }
            Judgement::Switch(_) | Judgement::No => {}
        }
    }

    /// Sends our state in tree `ri` to `view.id`, a cluster neighbour (a tenth of the
    /// shortcut threshold away) that would be no worse off under us, as the parent query
    /// we just sent it goes out. The query walks its ancestry, which finds a better entry
    /// only above it; this lets it judge us. Without it, two entries into one cluster whose
    /// dists tie across the hop between them stayed two: das-4 at 100 nodes (simulator,
    /// seed 1) kept a tree with UvA entered twice from 9 s to 65 s, the entry that
    /// should move never having heard the other in that tree; and in the join storm of
    /// 120 processes, entries whose dists were 2 ms apart stayed two for good, the worse
    /// one not watching the better. Rate-limited with the query.
    fn tell_state(&mut self, ri: RootIdx, view: &CandidateView) {
        let t = self.trees.live(ri);
        let near = self.near_us();
        if t.connected
            && view.lat_us <= near
            && t.dist_us.saturating_add(view.lat_us) <= view.dist_us
            && !t.children.contains(&view.id)
        {
            let entries = vec![entry_of(t)];
            self.stats.states_told += 1;
            self.send(view.id, Message::Advert { entries });
        }
    }

    /// Whether to walk up the ancestry of `view.id`, a peer much closer to us than our
    /// parent that is neither a better parent nor, by its dist, obviously hanging near a
    /// better one. We then entered a cluster over a long link, and the cluster may be
    /// entered a second time, through the subtree `view.id` is in: the walk up finds that
    /// other entry. Two entries whose near peers all hang in their own subtrees never see
    /// each other otherwise. In a settled tree the walk leads back to us; the parent query
    /// is then not repeated while nothing changes (see `query_parent`).
    pub(super) fn entry_walk(&self, ri: RootIdx, view: &CandidateView) -> bool {
        let t = self.trees.live(ri);
        let Some(parent) = t.parent else {
            return false;
        };
        // Cheapest tests first (the verdict is the same in any order): the latency to our
        // parent is looked up once per tree and stays cached, the children are a tree walk.
        t.connected
            && view.connected
            && parent != view.id
            && self
                .nbrs
                .lat_us(&parent)
                .is_some_and(|pl| view.lat_us.saturating_mul(2) < pl)
            && self.nbrs.measured(&view.id)
            && !t.children.contains(&view.id)
    }

    /// Judges every candidate heard of for this root and takes the best switch; a node
    /// still without a path asks the root for a fresh serial.
    pub(super) fn evaluate_all(&mut self, ri: RootIdx) {
        if ri == OWN_ROOT || !self.trees.is_live(ri) {
            return;
        }
        // What every peer told us about this root, in the map's order, looked up in one
        // pass (nothing in the loop changes what was heard).
        let heard = self.heard.of_root(ri);
        self.evaluate_heard(ri, &heard);
        self.heard.give_back(heard);
    }

    /// [`Core::evaluate_all`] of a live tree other than our own, given what every peer told
    /// us about it (`heard`, in the heard map's order).
    pub(super) fn evaluate_heard(&mut self, ri: RootIdx, heard: &[(NodeId, Heard)]) {
        let mut best: Option<((SwitchReason, u32, u32, NodeId), CandidateView)> = None;
        for &(c, h) in heard {
            let Some((view, samples)) = self.view_heard(c, h) else {
                continue;
            };
            match self.judge_sampled(ri, &view, samples) {
                Judgement::Switch(why) => {
                    let key = tree::preference(why, &view);
                    if best.as_ref().is_none_or(|(k, _)| key < *k) {
                        best = Some((key, view));
                    }
                }
                other => {
                    self.remeasure_stale(ri, &view, samples, other);
                    self.follow_up(ri, &view, other)
                }
            }
        }
        if let Some(((why, ..), view)) = best {
            self.switch_to(ri, view, why);
        }
        if !self.trees.live(ri).connected {
            self.request_serial(ri);
        }
    }

    /// Takes `view.id` as our parent in tree `ri`: attach to it, detach from the old one, report the change.
    pub(super) fn switch_to(&mut self, ri: RootIdx, view: CandidateView, why: SwitchReason) {
        match why {
            SwitchReason::Rules => self.stats.switches_rules += 1,
            SwitchReason::Shortcut => self.stats.switches_shortcut += 1,
            SwitchReason::Repair => self.stats.switches_repair += 1,
            SwitchReason::Flatten => self.stats.switches_flatten += 1,
        }
        let now = self.now;
        let was_member = {
            let t = self.trees.live(ri);
            t.connected && self.parent_is_near(t)
        };
        let t = self.trees.live_mut(ri);
        let old = t.parent;
        let was_connected = t.connected;
        let root = t.root;
        t.parent = Some(view.id);
        t.parent_dist_us = view.dist_us;
        let advanced = t.adopt_serial(view.serial);
        t.set_dist(view.dist_through());
        t.track_best(why == SwitchReason::Repair);
        t.connected = view.connected;
        t.refreshed_at = now;
        if let Some(o) = old {
            self.out.detach(o, root);
        }
        self.out.attach(view.id, root);
        self.out.event(Event::ParentChanged {
            root,
            old,
            new: Some(view.id),
        });
        if !was_connected {
            self.out.event(Event::ConnectedChanged {
                root,
                connected: true,
            });
        }
        self.after_change(ri, advanced);
        // Only a shortcut takes a connected member to a far parent; the test spares the
        // far more frequent moves inside the cluster the list of cluster neighbours.
        if was_member && self.parent_is_far(self.trees.live(ri)) {
            self.notify_new_entry(ri);
        }
    }

    /// Our parent is gone: no path until repaired.
    pub(super) fn detach(&mut self, ri: RootIdx) {
        let t = self.trees.live_mut(ri);
        let old = t.parent.take();
        let root = t.root;
        let was_connected = t.connected;
        t.connected = false;
        t.dist_us = INFINITE;
        t.parent_dist_us = INFINITE;
        self.out.event(Event::ParentChanged {
            root,
            old,
            new: None,
        });
        if was_connected {
            self.out.event(Event::ConnectedChanged {
                root,
                connected: false,
            });
        }
        self.after_change(ri, false);
    }

    /// Our parent told us its state (pushed, advertised, or our latency to it changed).
    pub(super) fn apply_parent_state(&mut self, ri: RootIdx, e: AdvertEntry) {
        let lat = (self.trees.get(ri))
            .and_then(|t| t.parent)
            .and_then(|p| self.nbrs.lat_us(&p));
        let now = self.now;
        let t = self.trees.live_mut(ri);
        if e.serial < t.serial && e.connected {
            // Reordered or stale. A parent that says it has no path is believed whatever
            // the serial: it may have dropped the tree (and so its serial), and detaching
            // never closes a cycle; at worst a reordered one costs a repair.
            return;
        }
        let advanced = t.adopt_serial(e.serial);
        let before = (t.dist_us, t.connected);
        t.parent_dist_us = e.dist_us;
        t.refreshed_at = now;
        let dist = match (e.connected, lat) {
            (true, Some(l)) => e.dist_us.saturating_add(l),
            (true, None) => t.dist_us, // Latency unknown for a moment: keep the last figure.
            (false, _) => INFINITE,
        };
        t.set_dist(dist);
        t.track_best(false);
        t.connected = e.connected && dist != INFINITE;
        let root = t.root;
        if before.1 != t.connected {
            self.out.event(Event::ConnectedChanged {
                root,
                connected: t.connected,
            });
        }
        if advanced || before != (t.dist_us, t.connected) {
            self.after_change(ri, advanced);
        }
        if !self.trees.live(ri).connected {
            self.evaluate_all(ri);
        }
    }

    /// After our state in a tree changed: push it to the children, schedule an advert if
    /// it changed enough, and answer advert requests that waited for this serial.
    pub(super) fn after_change(&mut self, ri: RootIdx, serial_advanced: bool) {
        let t = self.trees.live_mut(ri);
        let e = entry_of(t);
        if t.advert_due() {
            let drift = !self.config.advert_drift_interval.is_zero() && t.advert_is_drift();
            self.adverts.mark(ri, drift);
        }
        if serial_advanced || t.push_due() {
            t.pushed = (t.dist_us, t.connected);
            for &c in &t.children {
                self.out.update(c, e);
            }
        }
        if serial_advanced {
            for p in self.asks.answerable(ri, e.serial) {
                self.out.answer(p, e);
            }
        }
    }
}

impl Core {
    /// Why this node does or does not take `peer` as its parent in `root`'s tree, in one
    /// line: its own state there, what it heard from `peer`, its latency samples of it and
    /// the rules' verdict. For diagnosis (the simulator's timeline prints it for trees
    /// that enter a cluster twice); `None` when the tree is not tracked.
    pub fn explain_candidate(&self, root: NodeId, peer: NodeId) -> Option<String> {
        let ri = self.trees.live_root(root)?;
        let t = self.trees.live(ri);
        let rtt = self.nbrs.get(&peer);
        let heard = self.heard.get(&peer, ri);
        let verdict = heard
            .and_then(|h| self.view_heard(peer, h))
            .map(|(view, samples)| self.judge_sampled(ri, &view, samples));
        Some(format!(
            "serial {} dist {} fd {} best {} children {} parent {}; heard {}; lat {} ({} samples); verdict {:?}",
            t.serial,
            t.dist_us,
            t.fd_us,
            t.best_us,
            t.children.len(),
            t.parent.map_or("-".into(), |p| p.short()),
            heard.map_or("nothing".into(), |h| format!(
                "serial {} dist {} connected {}",
                h.serial, h.dist_us, h.connected
            )),
            rtt.and_then(|r| r.lat_us())
                .map_or("-".into(), |l| l.to_string()),
            rtt.map_or(0, |r| r.samples()),
            verdict,
        ))
    }
}
