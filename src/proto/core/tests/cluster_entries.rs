//! A cluster with a long way out: its members leave the shortcut to its entry, and a
//! member that takes one anyway tells its cluster neighbours at once.

use super::*;

/// Whether `sent` holds an advert request to `peer` for `root`'s state.
fn asks_for(sent: &[Transmit], peer: NodeId, root: NodeId) -> bool {
    sent.iter().any(|t| {
        t.to == peer
            && matches!(&t.msg, Message::AdvertRequest { roots }
                if roots.iter().any(|&(r, _)| r == root))
    })
}

/// The roots whose state `sent` tells `peer` in adverts.
fn told(sent: &[Transmit], peer: NodeId) -> Vec<NodeId> {
    (sent.iter().filter(|t| t.to == peer))
        .flat_map(|t| match &t.msg {
            Message::Advert { entries } => entries.iter().map(|e| e.root).collect(),
            _ => vec![],
        })
        .collect()
}

/// The housekeeping rounds `core` runs until it asks `r` for its state in its tree
/// (counting the round that asks), within ten serial periods from `from_ms`.
fn rounds_until_root_asked(core: &mut Core, r: NodeId, from_ms: u64) -> Option<u64> {
    let period = core.config.serial_period.as_millis() as u64;
    let before = core.schedule.housekeeping_rounds;
    (from_ms..from_ms + 10 * period).step_by(50).find_map(|ms| {
        core.handle(at(ms), Input::Timeout);
        asks_for(&drain(core), r, r).then(|| core.schedule.housekeeping_rounds - before)
    })
}

#[test]
fn a_member_far_from_the_root_asks_it_only_once_its_entry_had_two_rounds() {
    // The root is 20 ms away; our parent `mate`, a cluster neighbour (0.1 ms), is 40 ms
    // from the root: the shortcut threshold (10 ms) over the direct link.
    let (r, mate) = (id(1), id(2));
    let mut core = wan_core_with(&[(r, 40_000), (mate, 200)]);
    receive(&mut core, 20, mate, advert(r, 4, 40_000));
    assert_eq!(core.parent(r), Some(mate));
    // The first round sees the detour; the entry has that round and two more.
    assert_eq!(rounds_until_root_asked(&mut core, r, 100), Some(3));
    receive(&mut core, 20_000, r, advert(r, 4, 0));
    assert_eq!(core.parent(r), Some(r), "its answer is taken");
}

#[test]
fn an_entry_far_from_the_root_asks_it_at_its_first_round() {
    // The same detour, but our parent is the far node: we are our cluster's entry.
    let (r, far) = (id(1), id(2));
    let mut core = wan_core_with(&[(r, 40_000), (far, 20_000)]);
    receive(&mut core, 20, far, advert(r, 4, 30_000));
    assert_eq!(core.parent(r), Some(far));
    assert_eq!(rounds_until_root_asked(&mut core, r, 100), Some(1));
}

#[test]
fn a_member_that_takes_a_shortcut_out_tells_its_cluster_neighbours_at_once() {
    // Under `mate` (0.1 ms) at 40.1 ms from the root; `far` (10 ms away, 5 ms from the
    // root) is a shortcut out of the cluster. `other` is a cluster neighbour too.
    let (r, mate, other, far) = (id(1), id(2), id(3), id(4));
    let mut core = wan_core_with(&[(r, 40_000), (mate, 200), (other, 200), (far, 20_000)]);
    core.probing.finish_sweep();
    receive(&mut core, 20, mate, advert(r, 4, 40_000));
    assert_eq!(core.parent(r), Some(mate));
    drain(&mut core);
    receive(&mut core, 30, far, advert(r, 4, 5_000));
    assert_eq!(core.parent(r), Some(far), "the shortcut is taken");
    let sent = drain(&mut core);
    assert!(
        told(&sent, other).contains(&r),
        "the other neighbour is told"
    );
    assert!(
        told(&sent, mate).contains(&r),
        "so is the old parent, the entry"
    );
    assert_eq!(core.stats().switches_shortcut, 1);
}
