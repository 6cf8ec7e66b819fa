//! The tree rules, per root r at node n, in one place.
//!
//! The Phoenix paper's parent-suitability conditions: candidate c is more suitable than the
//! current parent p if
//! 1. c is connected to tree r;
//! 2. lat(n, c) < lat(n, p);
//! 3. dist(c) < dist(n);
//! 4. serial(c) == serial(n);
//!
//! and the shortcut: n may take c even when (2) fails if that shortens dist(n) by more than
//! a threshold (10 ms by default).
//!
//! Two corrections the paper leaves open, both applied here:
//! - **Loop freedom** (Babel's feasibility condition, RFC 8966): for the current serial, `fd`
//!   is the smallest dist n has computed (and so advertised) since the serial last advanced.
//!   A candidate with a newer serial is feasible; one with the same serial is feasible only
//!   if `(dist(c), c) < (fd, n)`; an older serial never is. Every switch, including repair
//!   and the shortcut, requires feasibility. Along parent pointers `(serial, fd, id)` then
//!   strictly improves toward the root, so no cycle can form, whatever messages are in flight.
//! - **No oscillation**: a switch under (1)-(4) may not lengthen dist(n) by more than half
//!   the shortcut threshold, otherwise the shortcut would undo it (the paper's Fig. 2
//!   flip-flop); nor beyond half the threshold above the shortest dist n has held since it
//!   last attached by repair ([`TreeState::best_us`]), unless it shortens dist(n) or goes to
//!   a cluster neighbour (a tenth of the threshold away). Without the second bound, a chain
//!   of such switches, each within the guard (a cluster moving under ever closer clusters),
//!   adds up to more than the threshold, a shortcut undoes it, and the cycle starts again;
//!   with it, every shortcut lowers the best dist by more than half the threshold, so the
//!   switches end. The best dist is not forgotten with time: a bound that lapses lets the
//!   chain form again, and the whole overlay then moves in waves of that period.
//!
//! Ties: latencies in the simulator are exact, so dists are compared as `(dist, NodeId)`,
//! a strict total order that keeps the feasibility argument intact.
//!
//! Distances are integer microseconds; [`INFINITE`] means "no path".

use super::id::NodeId;
use super::time::Time;
use std::collections::BTreeSet;

/// Distance of a node with no path to the root.
pub const INFINITE: u32 = u32::MAX;

/// This node's state in one root's tree.
#[derive(Clone, Debug)]
pub struct TreeState {
    /// The root of this tree.
    pub root: NodeId,
    /// Current parent (`None` at the root and while detached).
    pub parent: Option<NodeId>,
    /// Nodes that attached to us.
    pub children: BTreeSet<NodeId>,
    /// Largest serial of the root received (at the root: its own counter).
    pub serial: u32,
    /// Our distance to the root along the tree, µs ([`INFINITE`] when disconnected).
    pub dist_us: u32,
    /// Feasibility distance for `serial`, µs.
    pub fd_us: u32,
    /// Whether we have a path to the root.
    pub connected: bool,
    /// The parent's last advertised distance.
    pub parent_dist_us: u32,
    /// When the parent (or, at the root, the serial timer) last refreshed us.
    pub refreshed_at: Time,
    /// The `(dist, connected)` last put into adverts, to tell when a new advert is due.
    pub advertised: (u32, bool),
    /// The `(dist, connected)` last pushed to the children.
    pub pushed: (u32, bool),
    /// The shortest dist held since the last repair (see [`TreeState::track_best`]), µs.
    pub best_us: u32,
}

impl TreeState {
    /// State of the root in its own tree.
    pub fn new_root(root: NodeId, now: Time) -> Self {
        TreeState {
            root,
            parent: None,
            children: BTreeSet::new(),
            serial: 1,
            dist_us: 0,
            fd_us: 0,
            connected: true,
            parent_dist_us: 0,
            refreshed_at: now,
            advertised: (0, true),
            pushed: (0, true),
            best_us: 0,
        }
    }

    /// State of a node that has just learnt of `root` and has no path to it yet.
    pub fn new_detached(root: NodeId, now: Time) -> Self {
        TreeState {
            root,
            parent: None,
            children: BTreeSet::new(),
            serial: 0,
            dist_us: INFINITE,
            fd_us: INFINITE,
            connected: false,
            parent_dist_us: INFINITE,
            refreshed_at: now,
            advertised: (INFINITE, false),
            pushed: (INFINITE, false),
            best_us: INFINITE,
        }
    }

    /// Adopts `serial` if it is newer: the feasibility distance restarts from scratch.
    pub fn adopt_serial(&mut self, serial: u32) -> bool {
        if serial > self.serial {
            self.serial = serial;
            self.fd_us = INFINITE;
            true
        } else {
            false
        }
    }

    /// Sets our dist; `fd` never exceeds any dist we have held for this serial.
    pub fn set_dist(&mut self, dist_us: u32) {
        self.dist_us = dist_us;
        self.fd_us = self.fd_us.min(dist_us);
    }

    /// Keeps `best_us`, the shortest dist held: a shorter dist replaces it at once; `reset`
    /// restarts it from the current dist (after a repair the old figure says nothing).
    pub fn track_best(&mut self, reset: bool) {
        if reset || self.dist_us < self.best_us {
            self.best_us = self.dist_us;
        }
    }

    /// Whether the current state differs enough from the last advertised one to send it:
    /// any change of connectivity, or of dist by more than 0.1% and 20 µs (RTT jitter must
    /// not flood the candidates; not advertising a change is always safe, and a node that
    /// needs exact figures asks with an advert request).
    pub fn advert_due(&self) -> bool {
        self.differs_from(self.advertised)
    }

    /// Whether the children should hear of the change (same test as [`Self::advert_due`],
    /// against what was last pushed; a new serial is always pushed).
    pub fn push_due(&self) -> bool {
        self.differs_from(self.pushed)
    }

    fn differs_from(&self, (d, c): (u32, bool)) -> bool {
        if c != self.connected {
            return true;
        }
        if d == INFINITE || self.dist_us == INFINITE {
            return d != self.dist_us;
        }
        let delta = d.abs_diff(self.dist_us);
        delta > 20 && delta as u64 * 1000 > d as u64
    }
}

/// What this node knows of a candidate parent for one root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CandidateView {
    /// The candidate.
    pub id: NodeId,
    /// The serial it last advertised for this root.
    pub serial: u32,
    /// The dist it last advertised, µs.
    pub dist_us: u32,
    /// Whether it said it was connected.
    pub connected: bool,
    /// Our one-way latency estimate to it, µs.
    pub lat_us: u32,
}

impl CandidateView {
    /// Our dist if we took this candidate as parent.
    pub fn dist_through(&self) -> u32 {
        self.dist_us.saturating_add(self.lat_us)
    }
}

/// Why a switch is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SwitchReason {
    /// We had no path to the root; any feasible connected candidate will do.
    Repair,
    /// The shortcut rule: dist shrinks by more than the threshold.
    Shortcut,
    /// Conditions (1)-(4) with feasibility and the oscillation guard.
    Rules,
}

/// The verdict on one candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// Switch to it.
    Switch(SwitchReason),
    /// It would qualify if what we heard from it were not older than our serial: ask it
    /// for fresh state (an advert request) before deciding.
    NeedFresh,
    /// It is much closer than our parent but not a better parent itself; its own parent
    /// may be (worth a parent query). This is how a bounded candidate set still finds the
    /// single best entry point into a cluster.
    AskParent,
    /// It would be a switch, but our latency estimate to it does not rest on enough samples
    /// of our own yet (a peer that advertises to us without being watched by us): probe it
    /// first. Not returned by [`judge`]; the core adds it.
    NeedMeasure,
    /// Not suitable.
    No,
}

/// Babel's feasibility condition, with ties ordered by NodeId.
pub fn feasible(me: &TreeState, my_id: NodeId, c: &CandidateView) -> bool {
    c.serial > me.serial || (c.serial == me.serial && (c.dist_us, c.id) < (me.fd_us, my_id))
}

/// Judges candidate `c` for node `my_id` whose state in this tree is `me`; `parent_lat_us`
/// is our latency to the current parent (if any), `threshold_us` the shortcut threshold.
pub fn judge(
    me: &TreeState,
    my_id: NodeId,
    parent_lat_us: Option<u32>,
    c: &CandidateView,
    threshold_us: u32,
) -> Judgement {
    judge_with(me, my_id, parent_lat_us, c, threshold_us, false)
}

/// [`judge`], plus, when `leaf_search` is set, the leaf's walk up a far neighbour's
/// ancestry (see the end of the function). The core sets it once it has met its peers: a
/// node still meeting them is a leaf in almost every tree, and the walk would only add
/// traffic then.
pub fn judge_with(
    me: &TreeState,
    my_id: NodeId,
    parent_lat_us: Option<u32>,
    c: &CandidateView,
    threshold_us: u32,
    leaf_search: bool,
) -> Judgement {
    if c.id == my_id || me.root == my_id || Some(c.id) == me.parent {
        return Judgement::No;
    }
    // (1) connected.
    if !c.connected {
        return Judgement::No;
    }
    let through = c.dist_through();
    let is_feasible = feasible(me, my_id, c);
    let verdict = |ok: bool, why: SwitchReason| {
        if !ok {
            Judgement::No
        } else if is_feasible {
            Judgement::Switch(why)
        } else {
            // What we heard is older than our serial, or our fd blocks it until the next
            // serial: a fresher advert may make it feasible.
            Judgement::NeedFresh
        }
    };
    let parent_lat = match (me.parent, me.connected, parent_lat_us) {
        (Some(_), true, Some(l)) => l,
        // Detached, or our parent lost its path: any feasible connected candidate.
        _ => return verdict(true, SwitchReason::Repair),
    };
    // The shortcut: dist shrinks by more than the threshold, even if (2) fails.
    if through.saturating_add(threshold_us) < me.dist_us {
        return verdict(true, SwitchReason::Shortcut);
    }
    // (2) closer, (3) nearer the root (ties by id), (4) via feasibility, and the guard: no
    // longer than half the threshold above our dist, nor above the best dist held recently
    // unless it shortens ours or is a move to a very close candidate (a cluster neighbour:
    // each such move needs a parent much farther than the last, so together they add less
    // than half the threshold between two shortcuts).
    let best = me.best_us.min(me.dist_us);
    let rules = clearly_closer(c.lat_us, parent_lat)
        && (c.dist_us, c.id) < (me.dist_us, my_id)
        && through <= me.dist_us.saturating_add(threshold_us / 2)
        && (c.lat_us <= threshold_us / 10
            || through <= me.dist_us.max(best.saturating_add(threshold_us / 2)));
    let v = verdict(rules, SwitchReason::Rules);
    if v == Judgement::No
        && c.lat_us.saturating_mul(2) < parent_lat
        && !me.children.contains(&c.id)
        && (c.dist_us <= me.dist_us.saturating_add(c.lat_us + c.lat_us / 2 + 20)
            || (leaf_search && me.children.is_empty()))
    {
        // c hangs one short hop below a node at most as far from the root as we are; or
        // we are a leaf that entered c's cluster on its own over a long link, so the
        // cluster is entered at least twice: walking up c's ancestry finds the other
        // entry, which then sees us (we watch it) and may move under us. The single entry
        // of a settled cluster is never a leaf, so this costs nothing once settled.
        return Judgement::AskParent;
    }
    v
}

/// Condition (2) with hysteresis: the candidate must be closer than the parent by more
/// than a quarter of the parent's latency plus 100 µs. Measured latencies jitter (queueing
/// only ever adds delay); without a margin, nodes of one cluster (all about equally close)
/// keep swapping parents and grow chains. Loop freedom rests on feasibility, not on this.
pub fn clearly_closer(candidate_lat_us: u32, parent_lat_us: u32) -> bool {
    candidate_lat_us
        .saturating_add(parent_lat_us / 4)
        .saturating_add(100)
        < parent_lat_us
}

/// Among switchable candidates, the one to take: for repair and shortcuts the shortest
/// resulting dist; under the rules the closest candidate (the spirit of condition (2)).
pub fn preference(reason: SwitchReason, c: &CandidateView) -> (SwitchReason, u32, u32, NodeId) {
    match reason {
        SwitchReason::Rules => (reason, c.lat_us, c.dist_through(), c.id),
        _ => (reason, c.dist_through(), c.lat_us, c.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> NodeId {
        let mut b = [0u8; 16];
        b[0] = n;
        NodeId(b)
    }

    const MS: u32 = 1000;
    const TH: u32 = 10 * MS;

    /// Node `me`=id(50) in root id(1)'s tree, parent id(2), serial 5.
    fn attached(dist: u32, fd: u32) -> TreeState {
        let mut t = TreeState::new_detached(id(1), Time::ZERO);
        t.parent = Some(id(2));
        t.serial = 5;
        t.dist_us = dist;
        t.fd_us = fd;
        t.connected = true;
        t
    }

    fn cand(n: u8, serial: u32, dist: u32, lat: u32) -> CandidateView {
        CandidateView {
            id: id(n),
            serial,
            dist_us: dist,
            connected: true,
            lat_us: lat,
        }
    }

    const ME: u8 = 50;

    #[test]
    fn condition_1_disconnected_candidate_is_never_taken() {
        let me = attached(30 * MS, 30 * MS);
        let mut c = cand(9, 5, 5 * MS, MS);
        c.connected = false;
        assert_eq!(judge(&me, id(ME), Some(20 * MS), &c, TH), Judgement::No);
    }

    #[test]
    fn conditions_1_to_4_switch_to_a_closer_parent_nearer_the_root() {
        let me = attached(30 * MS, 30 * MS);
        let c = cand(9, 5, 25 * MS, 2 * MS);
        assert_eq!(
            judge(&me, id(ME), Some(20 * MS), &c, TH),
            Judgement::Switch(SwitchReason::Rules)
        );
    }

    #[test]
    fn condition_2_a_farther_candidate_is_not_taken_without_a_big_gain() {
        let me = attached(30 * MS, 30 * MS);
        // 25 ms away vs parent at 20 ms, dist through it 26 ms: gain 4 ms < threshold.
        let c = cand(9, 5, MS, 25 * MS);
        assert_eq!(judge(&me, id(ME), Some(20 * MS), &c, TH), Judgement::No);
    }

    #[test]
    fn condition_2_needs_a_clear_margin_so_jitter_inside_a_cluster_does_not_move_parents() {
        let me = attached(30 * MS, 30 * MS);
        // 160 µs vs 250 µs: the same cluster, measured with jitter.
        let c = cand(9, 5, 25 * MS, 160);
        assert_eq!(judge(&me, id(ME), Some(250), &c, TH), Judgement::No);
        assert!(clearly_closer(100, 15 * MS));
        assert!(!clearly_closer(12 * MS, 15 * MS));
        assert!(clearly_closer(15 * MS, 25 * MS));
    }

    #[test]
    fn condition_3_candidate_must_be_nearer_the_root_ties_by_id() {
        let me = attached(30 * MS, 30 * MS);
        let farther = cand(9, 5, 35 * MS, MS);
        assert_eq!(
            judge(&me, id(ME), Some(20 * MS), &farther, TH),
            Judgement::No
        );
        // Equal dist: the smaller id wins the tie.
        let tie_small = cand(9, 5, 30 * MS, 100);
        assert_eq!(
            judge(&me, id(ME), Some(20 * MS), &tie_small, TH),
            Judgement::Switch(SwitchReason::Rules)
        );
        let tie_big = cand(90, 5, 30 * MS, 100);
        // Not a switch; being much closer than our parent, it is asked for its own parent.
        assert_eq!(
            judge(&me, id(ME), Some(20 * MS), &tie_big, TH),
            Judgement::AskParent
        );
        let tie_big_far = cand(90, 5, 30 * MS, 15 * MS);
        assert_eq!(
            judge(&me, id(ME), Some(20 * MS), &tie_big_far, TH),
            Judgement::No
        );
    }

    #[test]
    fn condition_4_older_serial_asks_for_fresh_state_newer_serial_is_feasible() {
        let me = attached(30 * MS, 30 * MS);
        let old = cand(9, 4, 25 * MS, 2 * MS);
        assert_eq!(
            judge(&me, id(ME), Some(20 * MS), &old, TH),
            Judgement::NeedFresh
        );
        let newer = cand(9, 6, 29 * MS, 2 * MS);
        assert_eq!(
            judge(&me, id(ME), Some(20 * MS), &newer, TH),
            Judgement::Switch(SwitchReason::Rules)
        );
    }

    #[test]
    fn feasibility_uses_fd_not_the_current_dist() {
        // Our dist grew to 30 ms after a switch, but we advertised 12 ms earlier in this
        // serial: a candidate at 20 ms may be our own descendant. Not feasible.
        let me = attached(30 * MS, 12 * MS);
        let c = cand(9, 5, 20 * MS, MS);
        assert!(!feasible(&me, id(ME), &c));
        assert_eq!(
            judge(&me, id(ME), Some(20 * MS), &c, TH),
            Judgement::NeedFresh
        );
        // Same candidate with a newer serial: feasible.
        let c2 = cand(9, 6, 20 * MS, MS);
        assert!(feasible(&me, id(ME), &c2));
        // fd restarts when the serial advances.
        let mut me2 = me.clone();
        assert!(me2.adopt_serial(6));
        me2.set_dist(30 * MS);
        assert_eq!(me2.fd_us, 30 * MS);
        me2.set_dist(31 * MS);
        assert_eq!(me2.fd_us, 30 * MS, "fd is the minimum over the serial");
    }

    #[test]
    fn shortcut_takes_a_farther_parent_when_dist_shrinks_by_more_than_the_threshold() {
        // Fig. 2: B (me) under A at dist 180 ms; root is 100 ms away.
        let me = attached(180 * MS, 180 * MS);
        let root = cand(1, 5, 0, 100 * MS);
        assert_eq!(
            judge(&me, id(ME), Some(90 * MS), &root, TH),
            Judgement::Switch(SwitchReason::Shortcut)
        );
        // A gain of exactly the threshold is not enough.
        let me = attached(110 * MS, 110 * MS);
        assert_eq!(judge(&me, id(ME), Some(90 * MS), &root, TH), Judgement::No);
    }

    #[test]
    fn oscillation_guard_keeps_b_under_the_root_in_fig2() {
        // B under the root at 100 ms; A is at dist 90 and 90 ms from B: (1)-(4) hold, but
        // B would end 80 ms farther from the root, which the shortcut would undo.
        let mut me = attached(100 * MS, 100 * MS);
        me.parent = Some(id(1));
        let a = cand(3, 5, 90 * MS, 90 * MS);
        assert_eq!(judge(&me, id(ME), Some(100 * MS), &a, TH), Judgement::No);
        // A small lengthening, within half the threshold, is allowed.
        let near = cand(4, 5, 99 * MS, 4 * MS);
        assert_eq!(
            judge(&me, id(ME), Some(100 * MS), &near, TH),
            Judgement::Switch(SwitchReason::Rules)
        );
    }

    #[test]
    fn oscillation_guard_bounds_a_chain_of_switches_by_the_best_recent_dist() {
        // A shortcut brought us to 56 ms; a closer candidate would take us to 60.5 ms,
        // within half the threshold of our dist and of the best: taken.
        let mut me = attached(56 * MS, 56 * MS);
        me.track_best(true);
        let c = cand(9, 5, 51 * MS, 9 * MS + 500);
        assert_eq!(
            judge(&me, id(ME), Some(13 * MS), &c, TH),
            Judgement::Switch(SwitchReason::Rules)
        );
        // After that switch (60.5 ms), the next closer candidate would take us to 65 ms:
        // within half the threshold of the current dist, but 9 ms above the best. The
        // shortcut would undo the chain; not taken.
        let mut me2 = me.clone();
        me2.dist_us = 60 * MS + 500;
        me2.fd_us = 60 * MS + 500;
        let c2 = cand(10, 5, 59 * MS, 6 * MS);
        assert_eq!(
            judge(&me2, id(ME), Some(9 * MS + 500), &c2, TH),
            Judgement::No
        );
        // The best is not forgotten with time, only restarted by a repair: the same switch
        // is taken then.
        me2.track_best(false);
        assert_eq!(me2.best_us, 56 * MS);
        assert_eq!(
            judge(&me2, id(ME), Some(9 * MS + 500), &c2, TH),
            Judgement::No
        );
        me2.track_best(true);
        assert_eq!(me2.best_us, 60 * MS + 500);
        assert_eq!(
            judge(&me2, id(ME), Some(9 * MS + 500), &c2, TH),
            Judgement::Switch(SwitchReason::Rules)
        );
        // A switch that does not lengthen our dist is never held back by the best.
        let c3 = cand(11, 5, 50 * MS, 6 * MS);
        assert_eq!(
            judge(&me, id(ME), Some(13 * MS), &c3, TH),
            Judgement::Switch(SwitchReason::Rules)
        );
        // Nor is a move to a cluster neighbour at our dist (two entries into one cluster
        // merging), however far the best is.
        let mut entry = attached(18 * MS, 18 * MS);
        entry.best_us = 11 * MS;
        let mate = cand(12, 5, 18 * MS - 10, 140);
        assert_eq!(
            judge(&entry, id(ME), Some(6 * MS), &mate, TH),
            Judgement::Switch(SwitchReason::Rules)
        );
    }

    #[test]
    fn repair_takes_any_feasible_connected_candidate() {
        let mut me = attached(30 * MS, 30 * MS);
        me.parent = None;
        me.connected = false;
        me.dist_us = INFINITE;
        // Same serial, below fd: feasible.
        let sibling = cand(9, 5, 28 * MS, 40 * MS);
        assert_eq!(
            judge(&me, id(ME), None, &sibling, TH),
            Judgement::Switch(SwitchReason::Repair)
        );
        // Same serial, above fd (possibly our old descendant): ask for a newer serial.
        let desc = cand(10, 5, 35 * MS, MS);
        assert_eq!(judge(&me, id(ME), None, &desc, TH), Judgement::NeedFresh);
        // Newer serial: feasible whatever its dist.
        let fresh = cand(10, 6, 35 * MS, MS);
        assert_eq!(
            judge(&me, id(ME), None, &fresh, TH),
            Judgement::Switch(SwitchReason::Repair)
        );
        // A parent that lost its own path counts as no path.
        let mut orphan = attached(30 * MS, 30 * MS);
        orphan.connected = false;
        assert_eq!(
            judge(&orphan, id(ME), Some(MS), &sibling, TH),
            Judgement::Switch(SwitchReason::Repair)
        );
    }

    #[test]
    fn a_much_closer_candidate_that_is_not_better_is_asked_for_its_parent() {
        // We entered a cluster over a 15 ms link (dist 15.0 ms); a cluster neighbour 0.1 ms
        // away hangs under the cluster's better entry at 15.1 ms.
        let me = attached(15 * MS, 15 * MS);
        let c = cand(90, 5, 15 * MS + 100, 100);
        assert_eq!(
            judge(&me, id(ME), Some(15 * MS), &c, TH),
            Judgement::AskParent
        );
        // Our own child is never asked.
        let mut me2 = me.clone();
        me2.children.insert(id(90));
        assert_eq!(judge(&me2, id(ME), Some(15 * MS), &c, TH), Judgement::No);
        // A neighbour several hops deep is asked only by a leaf (a second entry into the
        // cluster); a node with children of its own is likely that neighbour's ancestor.
        let deep = cand(91, 5, 15 * MS + 400, 100);
        let search = |t: &TreeState, on| judge_with(t, id(ME), Some(15 * MS), &deep, TH, on);
        assert_eq!(search(&me, true), Judgement::AskParent);
        assert_eq!(search(&me, false), Judgement::No);
        let mut inner = me.clone();
        inner.children.insert(id(92));
        assert_eq!(search(&inner, true), Judgement::No);
    }

    #[test]
    fn the_root_never_switches() {
        let me = TreeState::new_root(id(ME), Time::ZERO);
        let c = cand(9, 9, 0, 1);
        assert_eq!(judge(&me, id(ME), None, &c, TH), Judgement::No);
    }

    #[test]
    fn advert_due_ignores_jitter_but_not_connectivity() {
        let mut t = attached(30 * MS, 30 * MS);
        t.advertised = (30 * MS, true);
        t.dist_us = 30 * MS + 25;
        assert!(!t.advert_due());
        t.dist_us = 31 * MS;
        assert!(t.advert_due());
        t.dist_us = 30 * MS;
        t.connected = false;
        assert!(t.advert_due());
    }
}
