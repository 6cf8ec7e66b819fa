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
//! - **Flat clusters** (an option, `Config::flatten_clusters`): inside a cluster every neighbour is about as close as the parent,
//!   so (2) never moves a node there and the cluster's part of a tree keeps the shape the
//!   cold start gave it: each change of the cluster's entry hangs the old entry, and all
//!   below it, one level deeper (scale-1000 at 5000 nodes: trees 42 levels deep, and the
//!   deepest nodes' dists more than the shortcut threshold above the entry's route, so
//!   they took shortcuts out of a cluster entered once). A node under a cluster neighbour
//!   moves to another cluster neighbour not clearly farther when that shortens its dist
//!   by more than two of its hops and 450 µs ([`flatten_margin`]). The rules cannot undo
//!   it: under (3) a move lengthens dist by less than the new parent's latency `c`, and
//!   under (2) the latency falls by over a quarter of the old one `p` and 100 µs, so
//!   `dist + 4 * lat` falls by over `p - c + 400`; a flattening raises the latency by at
//!   most `c / 4 + 100` (not clearly farther), so the sum falls by over `c + 50`. A
//!   flattening only shortens dist, so the bound between two shortcuts above still holds.
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

    /// Whether the change [`Self::advert_due`] found is only drift: still connected, the
    /// dist moved by at most a twentieth plus 250 µs (a re-measured hop, a parent moved
    /// inside its cluster). Candidates may learn of drift later (see
    /// `Config::advert_drift_interval`): no choice between two routes into a cluster turns
    /// on it, and each change of one tree costs a message to every candidate.
    pub fn advert_is_drift(&self) -> bool {
        let (d, c) = self.advertised;
        c == self.connected
            && d != INFINITE
            && self.dist_us != INFINITE
            && d.abs_diff(self.dist_us) <= d / 20 + 250
    }

    fn differs_from(&self, (d, c): (u32, bool)) -> bool {
        if c != self.connected {
            return true;
        }
        if d == INFINITE || self.dist_us == INFINITE {
            return d != self.dist_us;
        }
        dist_moved(d, self.dist_us)
    }
}

/// Whether a dist moved from `old_us` to `new_us` by more than 0.1% and 20 µs: the change
/// adverts and pushes carry (smaller moves are RTT jitter).
pub(crate) fn dist_moved(old_us: u32, new_us: u32) -> bool {
    let delta = old_us.abs_diff(new_us);
    delta > 20 && delta as u64 * 1000 > old_us as u64
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
    /// From one cluster neighbour to another no farther, shortening dist by more than
    /// [`flatten_margin`].
    Flatten,
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
    let rules = Rules {
        threshold_us,
        leaf_search: false,
        flatten: false,
    };
    judge_with(me, my_id, parent_lat_us, c, rules)
}

/// The settings of [`judge_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The shortcut threshold, µs.
    pub threshold_us: u32,
    /// The leaf's walk up a far neighbour's ancestry (see the end of [`judge_with`]). The
    /// core sets it once it has met its peers: a node still meeting them is a leaf in
    /// almost every tree, and the walk would only add traffic then.
    pub leaf_search: bool,
    /// Flat clusters (see the module docs; `Config::flatten_clusters`).
    pub flatten: bool,
}

/// [`judge`] with every setting of [`Rules`].
pub fn judge_with(
    me: &TreeState,
    my_id: NodeId,
    parent_lat_us: Option<u32>,
    c: &CandidateView,
    rules: Rules,
) -> Judgement {
    let Rules {
        threshold_us,
        leaf_search,
        flatten,
    } = rules;
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
    let near = threshold_us / 10;
    let best = me.best_us.min(me.dist_us);
    let rules = clearly_closer(c.lat_us, parent_lat)
        && (c.dist_us, c.id) < (me.dist_us, my_id)
        && through <= me.dist_us.saturating_add(threshold_us / 2)
        && (c.lat_us <= near || through <= me.dist_us.max(best.saturating_add(threshold_us / 2)));
    let mut v = verdict(rules, SwitchReason::Rules);
    if v == Judgement::No
        && flatten
        && parent_lat <= near
        && !clearly_closer(parent_lat, c.lat_us)
        && through.saturating_add(flatten_margin(c.lat_us)) < me.dist_us
    {
        // Only when feasible as heard: a flattening is worth no request for fresh state.
        v = if is_feasible {
            Judgement::Switch(SwitchReason::Flatten)
        } else {
            Judgement::No
        };
    }
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

/// How much shorter a dist through cluster neighbour `lat_us` away must be to move there
/// from another cluster neighbour (see the module docs): three such hops and 150 µs, well
/// above the 20 µs of jitter adverts ignore.
pub fn flatten_margin(lat_us: u32) -> u32 {
    lat_us.saturating_mul(2).saturating_add(450)
}

/// Among switchable candidates, the one to take: for repair, shortcuts and flattening the
/// shortest resulting dist; under the rules the closest candidate (the spirit of
/// condition (2)).
pub fn preference(reason: SwitchReason, c: &CandidateView) -> (SwitchReason, u32, u32, NodeId) {
    match reason {
        SwitchReason::Rules => (reason, c.lat_us, c.dist_through(), c.id),
        _ => (reason, c.dist_through(), c.lat_us, c.id),
    }
}

#[cfg(test)]
mod tests;
