//! A flood of operations from one root: bounded per root, refusals answered at once, and
//! the other roots' operations unharmed, whatever roots a forger names.

use super::*;
use crate::proto::collective::engine::admit_limits;
use crate::proto::message::{DownBody, OpId, UpPart};

/// Node 1 relays for roots 0 and 3; node 2, below it in both trees, stopped silently (not
/// yet known dead), so every operation at node 1 stays running until its budget.
fn two_roots_over_a_stalled_relay() -> Net {
    let mut net = Net::new(4, &[(0, 1), (1, 2), (1, 3)]);
    let (r0, r3) = (net.ids[0], net.ids[3]);
    let (n0, n1, n2) = (net.ids[0], net.ids[1], net.ids[2]);
    for v in &mut net.views {
        v.children.insert(r0, Vec::new());
        v.children.insert(r3, Vec::new());
    }
    net.views[0].children.insert(r0, vec![n1]);
    net.views[1].children.insert(r0, vec![n2, r3]);
    net.views[3].children.insert(r3, vec![n1]);
    net.views[1].children.insert(r3, vec![n0, n2]);
    net.alive[2] = false;
    net
}

fn down(op: OpId) -> CollectiveMessage {
    CollectiveMessage::Down {
        op,
        budget_us: 5_000_000,
        direct: false,
        more: false,
        plan: Vec::new(),
        hoisted: Vec::new(),
        covered: Vec::new(),
        body: DownBody::Broadcast {
            payload: b"flood".to_vec(),
            purpose: Purpose::Data,
        },
        route: Vec::new(),
        group: None,
    }
}

#[test]
fn a_forged_flood_from_one_root_is_answered_at_once_and_another_root_still_gets_through() {
    let (per_root, _, _) = admit_limits();
    let mut net = two_roots_over_a_stalled_relay();
    let (r0, n1) = (net.ids[0], 1);
    // More operations of root 0 than node 1 keeps for one root, all still running.
    let flood = per_root + 500;
    for nonce in 0..flood as u64 {
        let op = OpId { root: r0, nonce };
        net.engines[n1].handle_message(net.now, &net.views[n1], r0, down(op));
    }
    let mut refused = 0;
    while let Some(t) = net.engines[n1].poll_transmit() {
        if let Message::Collective(CollectiveMessage::Up { part, .. }) = &t.msg {
            assert_eq!(t.to, r0);
            assert_eq!(*part, UpPart::default(), "a refusal reaches nothing");
            refused += 1;
        }
    }
    assert_eq!(refused, 500, "every refused operation answered at once");
    assert_eq!(net.engines[n1].refused_operations(), 500);
    while net.engines[n1].poll_event().is_some() {}

    // Root 3 has its own share at node 1: its broadcast reaches node 0 and node 1.
    net.start(
        3,
        StartKind::Broadcast {
            payload: b"mine".to_vec(),
        },
    );
    net.run(Duration::from_secs(5));
    let got: Vec<usize> = net.deliveries(DeliveryKind::Broadcast);
    assert_eq!(
        got,
        vec![0, 1, 3],
        "root 3's broadcast, not blocked by root 0's flood"
    );
    let r = net.report();
    assert_eq!(r.missing, vec![net.ids[2]], "{r:?}");
}

#[test]
fn a_root_over_its_share_is_told_busy_at_once_and_finished_operations_make_room() {
    let (per_root, _, _) = admit_limits();
    let mut net = two_roots_over_a_stalled_relay();
    for nonce in 0..per_root as u64 + 3 {
        net.start_op(
            0,
            nonce,
            StartKind::Broadcast {
                payload: b"x".to_vec(),
            },
        );
    }
    let busy = (net.events.iter())
        .filter(|(i, e)| {
            *i == 0
                && matches!(e, Event::Report(r) if matches!(r.error, Some(OpRefused::Busy { .. })))
        })
        .count();
    assert_eq!(
        busy, 3,
        "the three over the share are refused as busy, not left to time out"
    );
    // Once they finished (node 2 reported missing), the next one runs: answered entries
    // are given up for it.
    net.run(Duration::from_secs(10));
    net.events.clear();
    net.start_op(
        0,
        per_root as u64 + 10,
        StartKind::Broadcast {
            payload: b"after".to_vec(),
        },
    );
    net.run(Duration::from_secs(20));
    let r = net.report();
    assert!(r.error.is_none(), "{r:?}");
    assert!(r.reached.contains(&net.ids[1]), "{r:?}");
}

/// Node 1 takes `count` still-running operations from node `sender`, each naming root
/// `root(k)`: how many it refused (answered at once with an empty part).
fn flood_from(net: &mut Net, sender: usize, count: usize, root: impl Fn(u64) -> NodeId) -> usize {
    let from = net.ids[sender];
    for k in 0..count as u64 {
        // Nonces apart from the one `Net::start` uses.
        let op = OpId {
            root: root(k),
            nonce: 1_000_000 + k,
        };
        net.engines[1].handle_message(net.now, &net.views[1], from, down(op));
    }
    let mut refused = 0;
    while let Some(t) = net.engines[1].poll_transmit() {
        if let Message::Collective(CollectiveMessage::Up { part, .. }) = &t.msg
            && *part == UpPart::default()
            && t.to == from
        {
            refused += 1;
        }
    }
    while net.engines[1].poll_event().is_some() {}
    refused
}

/// As [`two_roots_over_a_stalled_relay`], with four more members 4..=7 whose trees
/// also pass node 1 on to the stalled node 2.
fn six_roots_over_a_stalled_relay() -> Net {
    let mut net = Net::new(8, &[(0, 1), (1, 2), (1, 3)]);
    let ids = net.ids.clone();
    let (r0, r3, n0, n1, n2) = (ids[0], ids[3], ids[0], ids[1], ids[2]);
    for v in &mut net.views {
        for r in &ids {
            v.children.insert(*r, Vec::new());
        }
    }
    net.views[0].children.insert(r0, vec![n1]);
    net.views[1].children.insert(r0, vec![n2, r3]);
    net.views[3].children.insert(r3, vec![n1]);
    net.views[1].children.insert(r3, vec![n0, n2]);
    for r in &ids[4..] {
        net.views[1].children.insert(*r, vec![n2]);
    }
    net.alive[2] = false;
    net
}

#[test]
fn a_forger_naming_many_roots_gets_one_share_and_the_others_still_get_through() {
    let (per_root, per_sender, total) = admit_limits();
    let mut net = six_roots_over_a_stalled_relay();
    // Node 0 names each of the five roots it can (its own and 4..=7) for a full share:
    // under a share per claimed root alone, that filled the whole table.
    let ids = net.ids.clone();
    let named = [ids[0], ids[4], ids[5], ids[6], ids[7]];
    assert!(
        named.len() * per_root > total,
        "enough to fill the table per root"
    );
    let flood = named.len() * per_root;
    let refused = flood_from(&mut net, 0, flood, |k| named[k as usize / per_root]);
    assert_eq!(refused, flood - per_sender, "held to one sender's share");

    // Root 3's broadcast still gets through node 1 (the members outside the trees get
    // it directly).
    let before = net.engines[1].refused_operations();
    net.start(
        3,
        StartKind::Broadcast {
            payload: b"mine".to_vec(),
        },
    );
    net.run(Duration::from_secs(5));
    let got: Vec<usize> = net.deliveries(DeliveryKind::Broadcast);
    assert_eq!(net.engines[1].refused_operations(), before, "not refused");
    assert_eq!(
        got,
        vec![0, 1, 3, 4, 5, 6, 7],
        "root 3's broadcast, not blocked"
    );
}

#[test]
fn a_forger_naming_another_members_root_does_not_take_that_roots_share() {
    let (per_root, _, _) = admit_limits();
    let mut net = two_roots_over_a_stalled_relay();
    // Node 0 sends node 1 more operations than a share holds, all naming root 3.
    let r3 = net.ids[3];
    let refused = flood_from(&mut net, 0, per_root + 10, |_| r3);
    assert_eq!(refused, 10);
    // Root 3's own broadcast, arriving from root 3 itself, has its own share at node 1.
    net.start(
        3,
        StartKind::Broadcast {
            payload: b"mine".to_vec(),
        },
    );
    net.run(Duration::from_secs(5));
    let got: Vec<usize> = net.deliveries(DeliveryKind::Broadcast);
    assert_eq!(got, vec![0, 1, 3], "root 3's broadcast, not blocked");
}

/// The `Unsolicited` events so far: (at node, from, bytes).
fn unsolicited(net: &Net) -> Vec<(usize, NodeId, u64)> {
    (net.events.iter())
        .filter_map(|(i, e)| match e {
            Event::Unsolicited { from, bytes } => Some((*i, *from, *bytes)),
            _ => None,
        })
        .collect()
}

#[test]
fn answers_for_an_operation_nobody_here_knows_are_dropped_and_reported_not_passed_on() {
    let mut net = Net::new(3, &[(0, 1), (1, 2)]);
    let (r0, n2) = (net.ids[0], net.ids[2]);
    // Node 2 answers an operation of root 0 that node 1 never took part in (forged, or
    // over a minute late): were it passed on, any member could aim traffic at the root.
    let op = OpId {
        root: r0,
        nonce: 99,
    };
    let part = UpPart {
        items: vec![(n2, vec![7; 4000])],
        ..UpPart::default()
    };
    let up = CollectiveMessage::Up {
        op,
        last: true,
        part,
    };
    net.engines[1].handle_message(net.now, &net.views[1], n2, up);
    net.drain(1);
    assert_eq!(net.sent, 0, "not passed on");
    let got = unsolicited(&net);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].0, got[0].1), (1, n2));
    assert!(got[0].2 >= 4000, "counted by its size: {}", got[0].2);
    // An operation naming node 1 as its root that node 1 never started: the same.
    let forged = OpId {
        root: net.ids[1],
        nonce: 5,
    };
    net.engines[1].handle_message(net.now, &net.views[1], n2, down(forged));
    net.drain(1);
    assert_eq!(net.sent, 0);
    let got = unsolicited(&net);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[1].2, UNSOLICITED_MIN_BYTES,
        "a small one counts the minimum"
    );
}

#[test]
fn a_late_answer_for_an_operation_taken_part_in_still_goes_to_the_root_unreported() {
    let mut net = Net::new(3, &[(0, 1), (1, 2)]);
    net.start(0, StartKind::Broadcast { payload: vec![1] });
    assert!(net.run(Duration::from_secs(5)));
    let op = net.report().op.expect("the broadcast's id");
    let sent = net.sent;
    // Node 2's answer again, after node 1's went up: late news, for the root.
    let part = UpPart {
        reached: vec![net.ids[2]],
        ..UpPart::default()
    };
    let up = CollectiveMessage::Up {
        op,
        last: true,
        part,
    };
    net.engines[1].handle_message(net.now, &net.views[1], net.ids[2], up);
    net.drain(1);
    assert_eq!(net.sent, sent + 1, "passed on to the root");
    assert!(unsolicited(&net).is_empty(), "{:?}", unsolicited(&net));
}
