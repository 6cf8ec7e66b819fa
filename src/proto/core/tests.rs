//! A core driven alone, its peers played by hand: what it does when a tree's root is
//! declared dead and comes back, how it probes, and how it walks to a second entry into
//! its cluster.

use super::*;
use crate::proto::DownReason;
use crate::proto::message::AdvertEntry;
use crate::proto::tree::CandidateView;
use std::time::Duration;

mod cluster_entries;

fn at(ms: u64) -> Time {
    Time::ZERO + Duration::from_millis(ms)
}

/// Node `i` of a test overlay.
fn id(i: u64) -> NodeId {
    NodeId::from_seed(7, i)
}

/// A core for node 0 that knows `peers` and has measured each at 2 ms.
fn core_with(peers: &[NodeId]) -> Core {
    let measured: Vec<(NodeId, u64)> = peers.iter().map(|&p| (p, 2_000)).collect();
    core_measuring(Config::test(), &measured)
}

/// A core for node 0 with `config`, that knows each of `peers` and has measured it at its
/// RTT (µs), 8 samples each.
fn core_measuring(config: Config, peers: &[(NodeId, u64)]) -> Core {
    let mut core = Core::new(id(0), config, 1, at(0));
    for &(p, _) in peers {
        core.handle(at(1), Input::MemberUp { id: p });
    }
    for k in 0..8 {
        for &(p, rtt_us) in peers {
            let rtt = Duration::from_micros(rtt_us);
            core.handle(at(2 + k), Input::RttSample { peer: p, rtt });
        }
    }
    drain(&mut core);
    core
}

/// `core` receives `msg` from `from` at `ms`.
fn receive(core: &mut Core, ms: u64, from: NodeId, msg: Message) {
    core.handle(at(ms), Input::Received { from, msg });
}

/// `core` is told at `ms` that `id` was declared dead.
fn declare_dead(core: &mut Core, ms: u64, id: NodeId) {
    let reason = DownReason::Dead;
    core.handle(at(ms), Input::MemberDown { id, reason });
}

fn drain(core: &mut Core) -> Vec<Transmit> {
    std::iter::from_fn(|| core.poll_transmit()).collect()
}

/// The tree entries `core` pushed to `peer` among `sent`.
fn pushed_to(sent: &[Transmit], peer: NodeId) -> Vec<AdvertEntry> {
    sent.iter()
        .filter(|t| t.to == peer)
        .flat_map(|t| match &t.msg {
            Message::TreeUpdate(e) => vec![*e],
            Message::TreeUpdates(es) => es.clone(),
            _ => vec![],
        })
        .collect()
}

fn advert(root: NodeId, serial: u32, dist_us: u32) -> Message {
    Message::Advert {
        entries: vec![AdvertEntry {
            root,
            serial,
            dist_us,
            connected: true,
        }],
    }
}

#[test]
fn a_dropped_tree_comes_back_with_its_serial_and_feasibility_distance() {
    let (b, c, r) = (id(1), id(2), id(3));
    let mut core = core_with(&[b, c, r]);
    receive(&mut core, 20, b, advert(r, 7, 1_000));
    assert_eq!(core.parent(r), Some(b), "took the only connected candidate");
    let held = core.tree(r).expect("tracked");
    declare_dead(&mut core, 30, r);
    assert!(core.tree(r).is_none(), "dropped with its root");
    core.handle(at(40), Input::MemberUp { id: r });
    let back = core.tree(r).expect("tracked again");
    assert_eq!((back.serial, back.fd), (held.serial, held.fd));
    assert_eq!(back.parent, None);
    // c still advertises the path it had through us: same serial, longer than our fd.
    let stale = held.fd.as_micros() as u32 + 500;
    receive(&mut core, 50, c, advert(r, 7, stale));
    assert_eq!(
        core.parent(r),
        None,
        "a stale path through ourselves is not feasible"
    );
    // A newer serial is.
    receive(&mut core, 60, c, advert(r, 8, stale));
    assert_eq!(core.parent(r), Some(c));
}

#[test]
fn children_of_a_dropped_tree_are_told_there_is_no_path() {
    let (b, r) = (id(1), id(3));
    let mut core = core_with(&[b, r]);
    receive(&mut core, 20, r, advert(r, 3, 0));
    receive(&mut core, 21, b, Message::Attach { root: r });
    drain(&mut core);
    declare_dead(&mut core, 30, r);
    let told = pushed_to(&drain(&mut core), b);
    assert!(
        told.iter().any(|e| e.root == r && !e.connected),
        "the child hears the tree is gone: {told:?}"
    );
    // A late attach in the dropped tree gets the same answer, not silence.
    receive(&mut core, 40, b, Message::Attach { root: r });
    let told = pushed_to(&drain(&mut core), b);
    assert!(told.iter().any(|e| e.root == r && !e.connected), "{told:?}");
}

#[test]
fn a_parent_without_a_path_is_believed_whatever_its_serial() {
    let (b, r) = (id(1), id(3));
    let mut core = core_with(&[b, r]);
    receive(&mut core, 20, b, advert(r, 9, 1_000));
    assert_eq!(core.parent(r), Some(b));
    let gone = AdvertEntry {
        root: r,
        serial: 0,
        dist_us: crate::proto::tree::INFINITE,
        connected: false,
    };
    receive(&mut core, 30, b, Message::TreeUpdate(gone));
    assert!(!core.is_connected(r));
}

#[test]
fn a_restarted_root_jumps_to_the_serial_a_member_remembers() {
    let b = id(1);
    let mut core = core_with(&[b]);
    let ask = |serial| Message::SerialRequest {
        root: id(0),
        serial,
    };
    receive(&mut core, 20, b, ask(500));
    core.handle(at(2_000), Input::Timeout);
    assert_eq!(core.tree(id(0)).expect("own").serial, 500);
    // One request moves it at most `MAX_SERIAL_JUMP`.
    receive(&mut core, 3_000, b, ask(u32::MAX));
    core.handle(at(5_000), Input::Timeout);
    let serial = core.tree(id(0)).expect("own").serial;
    assert_eq!(serial, 500 + (1 << 16));
}

#[test]
fn a_member_back_after_we_declared_it_dead_is_asked_to_resync() {
    let b = id(1);
    let mut core = core_with(&[b]);
    declare_dead(&mut core, 30, b);
    drain(&mut core);
    core.handle(at(40), Input::MemberUp { id: b });
    let sent = drain(&mut core);
    assert!(
        sent.iter().any(|t| t.to == b && t.msg == Message::Resync),
        "{sent:?}"
    );
}

#[test]
fn a_resync_from_our_parent_repeats_our_attach() {
    let (b, r) = (id(1), id(3));
    let mut core = core_with(&[b, r]);
    receive(&mut core, 20, b, advert(r, 7, 1_000));
    assert_eq!(core.parent(r), Some(b));
    drain(&mut core);
    receive(&mut core, 30, b, Message::Resync);
    let attached = drain(&mut core).into_iter().any(|t| {
        t.to == b
            && match t.msg {
                Message::Attach { root } => root == r,
                Message::Links { ref attach, .. } => attach.contains(&r),
                _ => false,
            }
    });
    assert!(
        attached,
        "the parent, which may have dropped us, hears our attach again"
    );
}

/// How many pings to `peer` are among `sent`.
fn pings_to(sent: &[Transmit], peer: NodeId) -> usize {
    (probes_to(sent, peer).iter())
        .filter(|m| matches!(m, Message::Ping { .. }))
        .count()
}

/// The probe-shaped messages `core` sent to `peer` among `sent`.
fn probes_to(sent: &[Transmit], peer: NodeId) -> Vec<Message> {
    sent.iter()
        .filter(|t| t.to == peer)
        .filter(|t| {
            let m = &t.msg;
            matches!(
                m,
                Message::Ping { .. } | Message::Pong { .. } | Message::PongPing { .. }
            )
        })
        .map(|t| t.msg.clone())
        .collect()
}

#[test]
fn our_probe_rides_on_the_answer_to_a_watched_peers_probe_once_per_period() {
    let b = id(1);
    let mut core = core_with(&[b]);
    // Rounds until b is watched (the candidate set is filled from the members).
    core.handle(at(1_500), Input::Timeout);
    drain(&mut core);
    assert!(core.nbrs.cands.role(&b).is_some(), "b is watched");
    let ping = |sent_us| Message::Ping {
        sent_us,
        rtt_hint_us: None,
        watch: true,
    };
    receive(&mut core, 1_600, b, ping(7));
    let sent = drain(&mut core);
    let Some(Message::PongPing {
        sent_us: 7,
        ping_sent_us,
        watch: true,
    }) = probes_to(&sent, b).first().cloned()
    else {
        panic!("our probe rides on the answer: {:?}", probes_to(&sent, b));
    };
    // b answers our part: that is our sample, and b's next probe soon after gets a plain
    // answer, and our own round skips b while the sample is fresh.
    receive(
        &mut core,
        1_602,
        b,
        Message::Pong {
            sent_us: ping_sent_us,
        },
    );
    assert_eq!(core.probing.sampled_at.get(&b), Some(&at(1_602)));
    receive(&mut core, 1_700, b, ping(8));
    let sent = drain(&mut core);
    assert_eq!(probes_to(&sent, b), vec![Message::Pong { sent_us: 8 }]);
    // An answer to our probe never carries a probe back.
    receive(
        &mut core,
        1_750,
        b,
        Message::PongPing {
            sent_us: ping_sent_us,
            ping_sent_us: 9,
            watch: true,
        },
    );
    let sent = drain(&mut core);
    assert_eq!(probes_to(&sent, b), vec![Message::Pong { sent_us: 9 }]);
}

/// [`core_measuring`] with the WAN settings.
fn wan_core_with(peers: &[(NodeId, u64)]) -> Core {
    core_measuring(Config::wan(), peers)
}

#[test]
fn a_leaf_entry_walking_a_cluster_neighbours_ancestry_asks_again_soon_and_backs_off() {
    let (r, p, near, mid, near2) = (id(1), id(2), id(3), id(4), id(5));
    // Our parent p is 20 ms away, `near` a cluster neighbour (0.2 ms), `mid` 3 ms away.
    let mut core = wan_core_with(&[
        (r, 60_000),
        (p, 40_000),
        (near, 400),
        (mid, 6_000),
        (near2, 400),
    ]);
    receive(&mut core, 20, p, advert(r, 3, 10_000));
    assert_eq!(core.parent(r), Some(p));
    let ri = core.trees.live_root(r).expect("tracked");
    let view = |c: NodeId, lat_us: u32| CandidateView {
        id: c,
        serial: 3,
        dist_us: 30_100,
        connected: true,
        lat_us,
    };
    let period = core.config.serial_period.as_millis() as u64;
    let asked_at = |core: &mut Core, c: NodeId, lat_us: u32, times: &[u64]| -> Vec<u64> {
        let mut asked = Vec::new();
        for &ms in times {
            core.now = at(ms);
            if core.query_parent(ri, &view(c, lat_us)) {
                asked.push(ms);
            }
        }
        asked
    };
    // The same answer is expected while nothing changes: asked again after one serial
    // period, then two, four, eight...
    let times: Vec<u64> = (0..=40).map(|k| 100 + k * period / 2).collect();
    let expect: Vec<u64> = [0, 1, 3, 7, 15].map(|k| 100 + k * period).to_vec();
    assert_eq!(asked_at(&mut core, near, 200, &times), expect);
    // A peer that is not a cluster neighbour: once a minute.
    assert_eq!(asked_at(&mut core, mid, 3_000, &times), vec![100]);
    let minute = 100 + 60_000;
    assert_eq!(
        asked_at(&mut core, mid, 3_000, &[minute - 1, minute]),
        vec![minute]
    );
    // An entry with children: its walk may lead back into its own subtree, once a minute.
    core.trees.live_mut(ri).children.insert(id(6));
    assert_eq!(asked_at(&mut core, near2, 200, &times), vec![100]);
}

#[test]
fn a_peer_measured_long_ago_is_measured_again_when_asked_for() {
    let b = id(1);
    let mut core = wan_core_with(&[(b, 3_500)]);
    core.nbrs.cands.remove(&b);
    core.probing.sampled_at.insert(b, at(9));
    let pings = |sent: &[Transmit]| {
        probes_to(sent, b)
            .iter()
            .filter(|m| matches!(m, Message::Ping { .. }))
            .count()
    };
    // Eight samples a moment ago: judged by them.
    core.now = at(100);
    core.measure(b);
    assert_eq!(pings(&drain(&mut core)), 0);
    // Eight samples from a cold start's rush, three serial periods ago: measured again.
    let stale = 9 + 3 * core.config.serial_period.as_millis() as u64;
    core.now = at(stale);
    core.measure(b);
    assert_eq!(pings(&drain(&mut core)), 1);
    assert!(core.nbrs.is_hinted(&b));
}

#[test]
fn messages_from_a_peer_that_is_no_member_are_dropped_and_reported_by_their_size() {
    let mut core = core_with(&[id(1)]);
    std::iter::from_fn(|| core.poll_event()).for_each(drop);
    let stranger = id(9);
    let big = Message::Advert {
        entries: vec![
            AdvertEntry {
                root: id(1),
                serial: 1,
                dist_us: 10,
                connected: true,
            };
            500
        ],
    };
    let size = big.encoded_len() as u64;
    receive(&mut core, 100, stranger, big);
    receive(&mut core, 101, id(1), advert(id(1), 2, 10));
    assert!(
        drain(&mut core).iter().all(|t| t.to != stranger),
        "no answer to it"
    );
    let events: Vec<Event> = std::iter::from_fn(|| core.poll_event()).collect();
    let reported: Vec<_> = (events.iter())
        .filter(|e| matches!(e, Event::Unsolicited { .. }))
        .collect();
    assert_eq!(
        reported,
        vec![&Event::Unsolicited {
            from: stranger,
            bytes: size
        }],
        "the stranger's message, not the member's"
    );
    assert!(size > super::inputs::NON_MEMBER_MIN_BYTES);
}

#[test]
fn a_peer_judged_by_one_old_sample_is_measured_again_and_then_taken() {
    let (r, p, x) = (id(1), id(2), id(3));
    let mut core = wan_core_with(&[(r, 60_000), (p, 40_000)]);
    core.handle(at(10), Input::MemberUp { id: x });
    // The one sample the sweep took of x in a cold start's rush: 24 ms for a cluster
    // neighbour really 560 µs away.
    let sample = |core: &mut Core, ms: u64, rtt_us: u64| {
        let rtt = Duration::from_micros(rtt_us);
        core.handle(at(ms), Input::RttSample { peer: x, rtt });
    };
    sample(&mut core, 11, 24_000);
    core.probing.sampled_at.insert(x, at(11));
    core.probing.finish_sweep();
    // x watches us (it is sent our adverts and sends us its own); we do not watch it.
    core.nbrs.cands.remove(&x);
    receive(&mut core, 20, p, advert(r, 3, 10_000));
    assert_eq!(core.parent(r), Some(p));
    drain(&mut core);
    let pings = |sent: &[Transmit]| pings_to(sent, x);
    // x tells us its state: by that sample, no better parent and not worth asking.
    receive(&mut core, 30, x, advert(r, 3, 29_000));
    assert_eq!(pings(&drain(&mut core)), 0, "its sample is recent");
    let stale = 11 + 3 * core.config.serial_period.as_millis() as u64;
    receive(&mut core, stale, x, advert(r, 3, 29_000));
    assert_eq!(pings(&drain(&mut core)), 1, "measured again");
    assert!(core.nbrs.is_hinted(&x));
    // Measured right, x is the better parent.
    for k in 1..=3 {
        sample(&mut core, stale + k, 560);
    }
    assert_eq!(core.parent(r), Some(x));
}

#[test]
fn with_the_far_budget_spent_cluster_neighbours_still_hear_changes_and_the_far_catch_up() {
    let (r1, r2, near, far) = (id(1), id(2), id(3), id(4));
    let mut config = Config::wan();
    // Room for about one advert a second to far peers.
    config.advert_budget = 40;
    let mut core = core_measuring(
        config,
        &[(r1, 60_000), (r2, 70_000), (near, 400), (far, 30_000)],
    );
    for peer in [near, far] {
        core.nbrs.cands.note_inbound(peer, at(20));
    }
    let heard_by = |sent: &[Transmit], peer: NodeId| -> Vec<NodeId> {
        (sent.iter().filter(|t| t.to == peer))
            .flat_map(|t| match &t.msg {
                Message::Advert { entries } => entries.iter().map(|e| e.root).collect(),
                _ => vec![],
            })
            .collect()
    };
    let flush = |core: &mut Core, ms: u64| {
        core.now = at(ms);
        core.on_flush();
        drain(core)
    };
    drain(&mut core);
    receive(&mut core, 30, r1, advert(r1, 1, 0));
    let sent = flush(&mut core, 40);
    assert!(heard_by(&sent, near).contains(&r1));
    assert!(
        heard_by(&sent, far).contains(&r1),
        "the first advert fits the far budget"
    );
    // The far budget is spent ahead: the next change reaches the cluster neighbour only.
    receive(&mut core, 50, r2, advert(r2, 1, 0));
    let sent = flush(&mut core, 60);
    assert!(heard_by(&sent, near).contains(&r2));
    assert!(heard_by(&sent, far).is_empty());
    // Paid back, the far peer gets the change it missed.
    let sent = flush(&mut core, 3_000);
    assert!(heard_by(&sent, far).contains(&r2));
}

#[test]
fn a_node_whose_route_leaves_the_roots_own_cluster_asks_the_root() {
    // r is a cluster neighbour (100 µs away), f far (3 ms); our route to r runs through
    // f, 6 ms, within the shortcut threshold of the direct link, so only the detour out
    // of r's cluster and back says something is wrong.
    let (f, r) = (id(1), id(3));
    let mut core = core_measuring(Config::test(), &[(f, 6_000), (r, 200)]);
    receive(&mut core, 20, f, advert(r, 4, 3_000));
    assert_eq!(core.parent(r), Some(f));
    let mut asked = false;
    for ms in (100..3_000).step_by(50) {
        core.handle(at(ms), Input::Timeout);
        asked |= drain(&mut core).iter().any(|t| {
            t.to == r
                && matches!(&t.msg, Message::AdvertRequest { roots }
                    if roots.iter().any(|&(root, _)| root == r))
        });
    }
    assert!(asked, "the root is asked for its state in its tree");
    receive(&mut core, 3_000, r, advert(r, 4, 0));
    assert_eq!(core.parent(r), Some(r), "its answer is taken");
}
