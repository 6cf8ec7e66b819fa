//! Unit tests of the tree protocol.

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
    let search = |t: &TreeState, on| {
        let rules = Rules {
            threshold_us: TH,
            leaf_search: on,
            flatten: false,
        };
        judge_with(t, id(ME), Some(15 * MS), &deep, rules)
    };
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

#[test]
fn small_moves_of_a_connected_tree_are_drift_new_routes_and_connectivity_are_not() {
    let mut t = attached(30 * MS, 30 * MS);
    t.advertised = (30 * MS, true);
    t.dist_us = 30 * MS + 1_700; // a twentieth of 30 ms plus 250 µs is 1.75 ms
    assert!(t.advert_due() && t.advert_is_drift());
    t.dist_us = 30 * MS - 1_700;
    assert!(t.advert_is_drift());
    t.dist_us = 30 * MS + 1_800;
    assert!(
        !t.advert_is_drift(),
        "a route 1.8 ms longer goes out at once"
    );
    t.dist_us = 30 * MS;
    t.connected = false;
    assert!(!t.advert_is_drift(), "losing the path is never drift");
    let mut near = attached(100, 100);
    near.advertised = (100, true);
    near.dist_us = 340; // a parent moved inside the cluster
    assert!(near.advert_due() && near.advert_is_drift());
}

/// [`judge`] with flat clusters on.
fn judge_flat(me: &TreeState, my: NodeId, parent_lat: Option<u32>, c: &CandidateView) -> Judgement {
    let rules = Rules {
        threshold_us: TH,
        leaf_search: false,
        flatten: true,
    };
    judge_with(me, my, parent_lat, c, rules)
}

#[test]
fn a_deep_node_flattens_under_a_shallower_cluster_neighbour() {
    // Eight hops of 140 µs below the cluster's entry; the entry itself is a neighbour:
    // under it, 980 µs shorter.
    let entry = 30 * MS;
    let me = attached(entry + 8 * 140, entry + 8 * 140);
    let c = cand(9, 5, entry, 140);
    assert_eq!(
        judge_flat(&me, id(ME), Some(140), &c),
        Judgement::Switch(SwitchReason::Flatten)
    );
    // Under a node two hops below the entry, 700 µs shorter: not more than the margin
    // (2 x 140 + 450).
    let c = cand(9, 5, entry + 2 * 140, 140);
    assert_eq!(judge_flat(&me, id(ME), Some(140), &c), Judgement::No);
    // Clearly farther than our parent: not a flattening (the rules may bring us back).
    let c = cand(9, 5, entry, 400);
    assert_eq!(judge_flat(&me, id(ME), Some(140), &c), Judgement::No);
    // The cluster's entry (its parent across the wide area) never flattens.
    let c = cand(9, 5, entry - 5 * MS, 140);
    assert_ne!(
        judge_flat(&me, id(ME), Some(8 * MS), &c),
        Judgement::Switch(SwitchReason::Flatten)
    );
    // What we heard is older than our serial: no move, and no request for fresh state
    // (a flattening is not worth one).
    let c = cand(9, 4, entry, 140);
    assert_eq!(judge_flat(&me, id(ME), Some(140), &c), Judgement::No);
    // Off (the default): the rules alone never move a node between equally close
    // cluster neighbours.
    let c = cand(9, 5, entry, 140);
    assert_eq!(judge(&me, id(ME), Some(140), &c, TH), Judgement::No);
}

/// Between cluster neighbours, the rules and flattening cannot undo each other: over many
/// random states, every move either of them makes from one cluster neighbour to another
/// lowers `dist + 4 * lat` (the argument of the module docs).
#[test]
fn rules_and_flattening_between_cluster_neighbours_never_cycle() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |m: u32| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % u64::from(m)) as u32
    };
    let (mut rules, mut flat) = (0, 0);
    for _ in 0..200_000 {
        let dist = 20 * MS + next(4 * MS);
        let me = attached(dist, dist);
        let parent_lat = 1 + next(TH / 10);
        let c = cand(9, 5, 20 * MS + next(4 * MS), 1 + next(TH / 10));
        if let Judgement::Switch(why) = judge_flat(&me, id(ME), Some(parent_lat), &c) {
            let before = u64::from(dist) + 4 * u64::from(parent_lat);
            let after = u64::from(c.dist_through()) + 4 * u64::from(c.lat_us);
            assert!(
                after < before,
                "{why:?}: {me:?} parent {parent_lat} µs, {c:?}"
            );
            match why {
                SwitchReason::Rules => rules += 1,
                SwitchReason::Flatten => flat += 1,
                _ => {}
            }
        }
    }
    assert!(rules > 1000 && flat > 1000, "rules {rules}, flatten {flat}");
}
