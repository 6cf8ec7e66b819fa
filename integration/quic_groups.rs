//! Groups and rendezvous on real nodes over QUIC (das-4, two nodes per cluster, in one
//! process): a group's broadcast reaches all and only its members; a group reduce counts
//! its members once each; rendezvous rounds agree (one member list per epoch) under
//! concurrent joins and with the coordinator crashed between rounds.

use futures::StreamExt;
use overlay::api::{Group, RendezvousOptions, Round};
use overlay::bulk::ReduceOp;
use overlay::local::LocalOverlay;
use overlay::topology::Topology;
use overlay::{Config, Node, NodeId, NumKind, Reducer};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

async fn das4_pairs() -> LocalOverlay {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/das-4.toml");
    let mut topo = Topology::load(&path).unwrap_or_else(|e| panic!("{e}"));
    for c in &mut topo.clusters {
        c.nodes = 2;
    }
    LocalOverlay::start(topo, Config::wan())
        .await
        .expect("overlay starts")
}

/// Every node in `at` knows `members` as the group's members, within 20 s.
async fn agree(nodes: &[Node], at: &[usize], group: &str, members: &[NodeId]) {
    for &i in at {
        let g = nodes[i].group(group).expect("name");
        let deadline = Instant::now() + Duration::from_secs(20);
        while g.members() != members {
            assert!(
                Instant::now() < deadline,
                "node {i} sees {:?}, not {members:?}",
                g.members()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_broadcast_reaches_all_and_only_its_members() {
    let _net = crate::common::real_network();
    let overlay = das4_pairs().await;
    let nodes = overlay.nodes.clone();
    let inside = [1, 3, 4, 6];
    for &i in &inside {
        nodes[i]
            .group("g")
            .expect("name")
            .join()
            .await
            .expect("join");
    }
    let mut members: Vec<NodeId> = inside.iter().map(|i| nodes[*i].id()).collect();
    members.sort();
    agree(&nodes, &(0..nodes.len()).collect::<Vec<_>>(), "g", &members).await;
    let mut inboxes: Vec<_> = nodes.iter().map(|n| n.deliveries()).collect();
    // From outside the group, then from a member.
    for from in [0, 3] {
        let g = nodes[from].group("g").expect("name");
        let report = g
            .broadcast(format!("from {from}"))
            .await
            .expect("broadcast");
        assert_eq!(report.delivered, members, "from {from}");
        assert!(report.missing.is_empty(), "{:?}", report.missing);
    }
    for (i, inbox) in inboxes.iter_mut().enumerate() {
        let mut got = Vec::new();
        while let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(500), inbox.next()).await
        {
            let d = d.expect("no lag");
            got.push((
                d.group.clone(),
                String::from_utf8_lossy(&d.payload).to_string(),
            ));
        }
        let want: Vec<(Option<String>, String)> = if inside.contains(&i) {
            ["from 0", "from 3"]
                .map(|p| (Some("g".to_string()), p.to_string()))
                .into()
        } else {
            Vec::new()
        };
        got.sort();
        assert_eq!(got, want, "node {i}");
    }
    // A payload too large for the control messages is streamed down the tree, through
    // members and others alike; only the members deliver it, whole.
    let mut inboxes: Vec<_> = nodes.iter().map(|n| n.deliveries()).collect();
    let big: Vec<u8> = (0..2usize << 20).map(|i| (i % 251) as u8).collect();
    let g = nodes[0].group("g").expect("name");
    let report = g
        .broadcast(big.clone())
        .await
        .expect("large group broadcast");
    assert_eq!(report.delivered, members);
    for (i, inbox) in inboxes.iter_mut().enumerate() {
        let got = tokio::time::timeout(Duration::from_millis(500), inbox.next()).await;
        match got {
            Ok(Some(Ok(d))) => {
                assert!(inside.contains(&i), "node {i} is not in the group");
                assert_eq!(d.group.as_deref(), Some("g"));
                assert!(d.payload == big, "node {i}: payload differs");
            }
            _ => assert!(!inside.contains(&i), "member {i} got nothing"),
        }
    }
    // A scatter to the group sends nothing to a node outside it.
    let items = [
        (nodes[1].id(), b"a".to_vec()),
        (nodes[2].id(), b"b".to_vec()),
    ]
    .into();
    let s = nodes[0]
        .group("g")
        .expect("name")
        .scatter(items)
        .await
        .expect("scatter");
    assert_eq!(s.delivered, vec![nodes[1].id()]);
    assert_eq!(s.unknown, vec![nodes[2].id()], "node 2 is not in the group");
    // A reduce over the group counts its members once each, and nobody else.
    for n in &nodes {
        n.publish_value("one", &vec![1u64]).await.expect("publish");
    }
    let g = nodes[0].group("g").expect("name");
    let r = g
        .reduce("one", Reducer::Sum(NumKind::U64))
        .await
        .expect("reduce");
    assert_eq!(r.values::<Vec<u64>>().expect("decode"), Some(vec![4]));
    assert_eq!(r.contributors, members);
    // A large allreduce over the group: only its members call, and each gets their sum.
    let calls = inside.iter().map(|&i| {
        let g = nodes[i].group("g").expect("name");
        async move {
            let mut v = vec![i as f64; 50_000];
            let report = g.allreduce_slice("v", &mut v, ReduceOp::Sum).await;
            (v, report)
        }
    });
    let want = inside.iter().sum::<usize>() as f64;
    for (v, report) in futures::future::join_all(calls).await {
        let report = report.expect("group allreduce");
        assert_eq!(report.contributors, members);
        assert!(v.iter().all(|x| *x == want), "{} != {want}", v[0]);
    }
    // Leaving takes a member out everywhere.
    nodes[4]
        .group("g")
        .expect("name")
        .leave()
        .await
        .expect("leave");
    members.retain(|m| *m != nodes[4].id());
    agree(&nodes, &[0, 1, 7], "g", &members).await;
    overlay.shutdown().await;
}

/// Each caller's round (`None`: its call failed), checked: one member list per epoch,
/// every member's rank its index, every caller of a round in it.
fn check_rounds(rounds: &[(NodeId, Option<Round>)]) -> BTreeMap<u64, Vec<NodeId>> {
    let mut by_epoch: BTreeMap<u64, Vec<NodeId>> = BTreeMap::new();
    for (id, round) in rounds {
        let Some(r) = round else { continue };
        assert_eq!(r.members[r.rank], *id, "rank is the index of the caller");
        let seen = by_epoch.entry(r.epoch).or_insert_with(|| r.members.clone());
        assert_eq!(*seen, r.members, "epoch {} has two member lists", r.epoch);
    }
    by_epoch
}

async fn call_all(
    groups: &[(NodeId, Group)],
    opts: &RendezvousOptions,
) -> Vec<(NodeId, Option<Round>)> {
    let started = Instant::now();
    let calls = groups.iter().map(|(id, g)| {
        let (id, g, opts) = (*id, g.clone(), opts.clone());
        async move {
            let round = g.rendezvous(opts).await.ok();
            if round.is_some() {
                // The longest a caller that got a round waited, for the figures.
                let ms = started.elapsed().as_millis() as u64;
                LONGEST.fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
            }
            (id, round)
        }
    });
    LONGEST.store(0, std::sync::atomic::Ordering::Relaxed);
    futures::future::join_all(calls).await
}

static LONGEST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn longest() -> Duration {
    Duration::from_millis(LONGEST.load(std::sync::atomic::Ordering::Relaxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendezvous_rounds_agree_under_concurrent_joins_and_a_coordinator_crash() {
    let _net = crate::common::real_network();
    let overlay = das4_pairs().await;
    let nodes = overlay.nodes.clone();
    // Long enough for a crashed coordinator to be declared dead first (up to 8 s seen).
    let opts = RendezvousOptions::new(3..=8, Duration::from_secs(20));
    // Round 1: six members call at once while two more join the group and call, staggered.
    let mut groups = Vec::new();
    for n in &nodes[..6] {
        let g = n.group("r").expect("name");
        g.join().await.expect("join");
        groups.push((n.id(), g));
    }
    let late: Vec<(NodeId, Group)> = nodes[6..]
        .iter()
        .map(|n| (n.id(), n.group("r").expect("name")))
        .collect();
    let latecomers = late.iter().enumerate().map(|(k, (id, g))| {
        let (id, g, opts) = (*id, g.clone(), opts.clone());
        async move {
            tokio::time::sleep(Duration::from_millis(150 * k as u64)).await;
            g.join().await.expect("join");
            (id, g.rendezvous(opts).await.ok())
        }
    });
    let (mut first, more) = tokio::join!(
        call_all(&groups, &opts),
        futures::future::join_all(latecomers)
    );
    first.extend(more);
    let epochs = check_rounds(&first);
    // A latecomer the round formed without waits for the next one (its call times out);
    // nobody is listed in a round it did not get.
    let got = first.iter().filter(|(_, r)| r.is_some()).count();
    let listed: usize = epochs.values().map(Vec::len).sum();
    assert_eq!(listed, got, "{first:?}");
    assert!(
        got >= 6,
        "the six that called at once are in a round: {first:?}"
    );
    println!(
        "round 1 (epoch, size): {:?}, formed within {:?} of the calls",
        epochs.iter().map(|(e, m)| (e, m.len())).collect::<Vec<_>>(),
        longest()
    );
    groups.extend(late);
    // Round 2: round 1's coordinator (its smallest member; not the latecomer, even when
    // the latecomer's id is smaller) crashes; the others agree on a new round without it,
    // with a higher epoch.
    let smallest = first
        .iter()
        .find_map(|(_, r)| r.as_ref().map(|r| r.coordinator))
        .expect("round 1");
    let victim = nodes
        .iter()
        .position(|n| n.id() == smallest)
        .expect("a node");
    overlay.crash(victim);
    groups.retain(|(id, _)| *id != smallest);
    let second = call_all(&groups, &opts).await;
    println!(
        "round 2 after the coordinator crashed: formed within {:?}",
        longest()
    );
    let later = check_rounds(&second);
    assert!(
        second.iter().all(|(_, r)| r.is_some()),
        "every survivor got a round"
    );
    let (epoch, members) = later.iter().next_back().expect("a round");
    assert!(*epoch > *epochs.keys().next_back().expect("round 1"));
    assert!(
        !members.contains(&smallest),
        "the crashed node is not in it"
    );
    let survivors: Vec<NodeId> = groups.iter().map(|(id, _)| *id).collect();
    let covered: usize = later.values().map(Vec::len).sum();
    assert_eq!(
        covered,
        survivors.len(),
        "each survivor in exactly one round"
    );
    println!(
        "round 2 after the crash: epochs {:?}",
        later.keys().collect::<Vec<_>>()
    );
    // An old round knows what changed since: the crashed coordinator is gone from it.
    let old = first
        .iter()
        .find_map(|(id, r)| r.as_ref().filter(|_| *id != smallest))
        .expect("a round-1 member that survived");
    // Each node declares the crash on its own: this one may have accepted round 2 from
    // the new coordinator a moment before its own view drops the crashed member.
    let seen_by = Instant::now() + Duration::from_secs(10);
    let changes = loop {
        let changes = old.node().group("r").map(|_| old.changes()).expect("name");
        if changes.left.contains(&smallest) || Instant::now() > seen_by {
            break changes;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(changes.left.contains(&smallest), "{changes:?}");
    assert!(old.check().is_err(), "a member of round 1 is gone");
    // Round 3: a member crashes while the others are calling (it may be in a proposal
    // already): the others still agree, without it.
    let victim_id = groups[groups.len() / 2].0;
    let victim = nodes
        .iter()
        .position(|n| n.id() == victim_id)
        .expect("a node");
    let callers: Vec<(NodeId, Group)> = groups.clone();
    groups.retain(|(id, _)| *id != victim_id);
    let crash = async {
        // Its call has started (its ready may be in), but it cannot accept anything yet.
        tokio::task::yield_now().await;
        overlay.crash(victim);
    };
    let (third, ()) = tokio::join!(call_all(&callers, &opts), crash);
    println!(
        "round 3 with a member crashed mid-call: formed within {:?}",
        longest()
    );
    let third: Vec<_> = third
        .into_iter()
        .filter(|(id, _)| *id != victim_id)
        .collect();
    let last = check_rounds(&third);
    assert!(
        third.iter().all(|(_, r)| r.is_some()),
        "every survivor got a round: {third:?}"
    );
    assert!(last.values().all(|m| !m.contains(&victim_id)), "{last:?}");
    assert!(last.keys().all(|e| e > epoch));
    overlay.shutdown().await;
}
