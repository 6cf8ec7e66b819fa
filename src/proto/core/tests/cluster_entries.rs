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

/// The cluster summaries `mate` and `twin` send: each measured the other and `me` at
/// 0.1 ms and root `r` at `root_rtt_us`, so discovery puts the three together.
fn mates_with_us(me: NodeId, mate: NodeId, twin: NodeId, r: NodeId, root_rtt_us: u32) -> Message {
    use crate::proto::message::{ClusterEdge, ClusterMessage, ClusterSummary};
    use std::sync::Arc;
    let e = |peer, rtt_us| ClusterEdge { peer, rtt_us };
    let summary = |node, edges: Vec<ClusterEdge>| {
        Arc::new(ClusterSummary {
            node,
            version: 1,
            edges: edges.into(),
            bandwidth: Arc::from([]),
        })
    };
    let summaries = vec![
        summary(mate, vec![e(me, 200), e(twin, 200), e(r, root_rtt_us)]),
        summary(twin, vec![e(me, 200), e(mate, 200), e(r, root_rtt_us)]),
    ];
    Message::Cluster(ClusterMessage::Summaries { summaries })
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

#[test]
fn a_peer_that_becomes_a_cluster_neighbour_is_told_our_entries_once() {
    // `twin` was measured only in a rush (1.5 ms one way, more than a cluster
    // neighbour's); `mate` at 0.1 ms.
    let (r, mate, twin) = (id(1), id(2), id(3));
    let mut core = wan_core_with(&[(r, 40_000), (mate, 200), (twin, 3_000)]);
    core.probing.finish_sweep();
    // We enter our cluster straight from the root, 20 ms away.
    receive(&mut core, 10, r, advert(r, 4, 0));
    assert_eq!(core.parent(r), Some(r));
    core.handle(at(2_500), Input::Timeout); // a housekeeping round
    let sent = drain(&mut core);
    assert!(told(&sent, mate).contains(&r), "the neighbour is told");
    // (Both are candidates, so adverts tell them too: the notices are counted apart.)
    assert_eq!(core.stats().entry_notices, 1, "the far peer is not");
    // Good samples of `twin` replace the rush's: it is a cluster neighbour now.
    for k in 0..8 {
        let rtt = Duration::from_micros(200);
        core.handle(at(2_600 + k), Input::RttSample { peer: twin, rtt });
    }
    core.handle(at(3_600), Input::Timeout); // the next round
    let sent = drain(&mut core);
    assert!(told(&sent, twin).contains(&r), "the new neighbour is told");
    assert_eq!(core.stats().entry_notices, 2, "it alone");
    core.handle(at(4_700), Input::Timeout); // and the next: nothing new
    drain(&mut core);
    assert_eq!(core.stats().entry_notices, 2, "once");
}

#[test]
fn a_member_of_our_discovered_cluster_that_looks_far_is_measured_again_once() {
    // Our samples of `twin` all came from a rush (1.5 ms one way); `mate` and `twin`
    // measured each other and us at 0.1 ms, so discovery puts the three of us together.
    let (me, r, mate, twin) = (id(0), id(1), id(2), id(3));
    let mut core = wan_core_with(&[(r, 40_000), (mate, 200), (twin, 3_000)]);
    core.probing.finish_sweep();
    let msg = mates_with_us(me, mate, twin, r, 40_000);
    receive(&mut core, 10, mate, msg);
    core.handle(at(2_500), Input::Timeout); // a round: the view
    assert!(core.discovered_cluster().contains(&twin));
    drain(&mut core);
    core.handle(at(3_600), Input::Timeout); // the next round
    let sent = drain(&mut core);
    assert_eq!(core.stats().cluster_remeasures, 1, "the twin alone");
    assert!(!probes_to(&sent, twin).is_empty(), "is probed");
    core.handle(at(4_700), Input::Timeout);
    drain(&mut core);
    assert_eq!(
        core.stats().cluster_remeasures,
        1,
        "not again within a minute"
    );
}

#[test]
fn a_peer_that_tells_us_its_state_unasked_is_measured_again_when_our_samples_are_old() {
    // `twin` counts us a cluster neighbour and tells us its state; we have it at 1.5 ms
    // one way (a rush's samples), trade with it in no role, and would forget what it said.
    // No rule of the tree asks for it (its route is longer; our root is 1 ms away).
    let (r, twin) = (id(1), id(2));
    let mut core = wan_core_with(&[(r, 2_000), (twin, 3_000)]);
    core.probing.sampled_at.insert(twin, at(10));
    core.probing.finish_sweep();
    core.nbrs.cands.remove(&twin);
    receive(&mut core, 20, r, advert(r, 4, 0));
    assert_eq!(core.parent(r), Some(r));
    drain(&mut core);
    let pings = |sent: &[Transmit]| pings_to(sent, twin);
    receive(&mut core, 30, twin, advert(r, 4, 25_000));
    assert_eq!(pings(&drain(&mut core)), 0, "sampled lately: left alone");
    let stale = 10 + core.stale_after().as_millis() as u64;
    core.handle(at(stale), Input::Timeout); // the rounds due by then, apart
    drain(&mut core);
    core.nbrs.cands.remove(&twin); // (they may have picked it again)
    receive(&mut core, stale, twin, advert(r, 4, 25_000));
    let sent = drain(&mut core);
    assert_eq!(pings(&sent), 1, "old samples: measured again");
    assert!(core.nbrs.is_hinted(&twin), "and watched until it is");
    assert_eq!(core.parent(r), Some(r));
    // One we watch is measured by the rounds, not for this.
    core.nbrs.cands.remove(&twin);
    core.nbrs.cands.add_explorer(twin);
    core.measure_unwatched_sender(twin);
    assert_eq!(pings(&drain(&mut core)), 0, "we watch it");
}

#[test]
fn a_discovered_mate_tied_with_us_that_ranks_first_is_measured_again() {
    // `twin` and we both hang straight under the root at one dist; it ranks first by id,
    // so we should move under it, but we judge it by old samples (3 ms one way, too far
    // for the rules). Discovery puts it with us: our samples are suspect.
    let me = id(0);
    let twin = (3..).map(id).find(|t| *t < me).expect("an id below ours");
    let (r, mate) = (id(1), id(2));
    let mut core = wan_core_with(&[(r, 8_000), (mate, 200), (twin, 6_000)]);
    core.probing.finish_sweep();
    let msg = mates_with_us(me, mate, twin, r, 8_000);
    receive(&mut core, 10, mate, msg);
    core.handle(at(2_500), Input::Timeout); // a round: the view
    assert!(core.discovered_cluster().contains(&twin));
    receive(&mut core, 2_500, r, advert(r, 4, 0));
    assert_eq!(core.parent(r), Some(r));
    core.nbrs.cands.remove(&twin);
    core.nbrs.cands.note_inbound(twin, at(2_500)); // it watches us; we keep what it says
    core.probing.sampled_at.insert(twin, at(10));
    drain(&mut core);
    let hinted = core.stats().hinted;
    receive(&mut core, 4_000, twin, advert(r, 4, 4_000));
    assert_eq!(core.parent(r), Some(r), "not taken by the old samples");
    assert_eq!(core.stats().hinted, hinted + 1, "measured again");
    assert!(core.nbrs.is_hinted(&twin));
}
