//! A cluster with a long way out: a member that finds a shortcut out of it tells its
//! cluster neighbours at once.

use super::*;

/// The roots whose state `sent` tells `peer` in adverts.
fn told(sent: &[Transmit], peer: NodeId) -> Vec<NodeId> {
    (sent.iter().filter(|t| t.to == peer))
        .flat_map(|t| match &t.msg {
            Message::Advert { entries } => entries.iter().map(|e| e.root).collect(),
            _ => vec![],
        })
        .collect()
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
    assert!(told(&sent, mate).contains(&r), "so is the old parent");
    assert_eq!(core.stats().switches_shortcut, 1);
}
