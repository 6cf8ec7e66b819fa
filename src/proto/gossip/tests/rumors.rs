//! Rumors held back within `rumor_gap` of the last push: a join storm costs a node one push
//! per gap, and news after a quiet spell still goes out at once.

use super::*;

const JOINERS: usize = 60;

/// `JOINERS` nodes join through node 0 at once with `rumor_gap` `gap`; the net after
/// `secs` seconds.
fn storm(gap: Duration, secs: u64) -> Net {
    let config = GossipConfig {
        rumor_gap: gap,
        ..GossipConfig::default()
    };
    let mut net = Net::with_config(JOINERS + 1, config);
    net.join_all();
    net.run_for(Duration::from_secs(secs.saturating_sub(3)));
    net
}

fn everyone_knows_everyone(net: &Net) -> bool {
    (0..net.nodes.len()).all(|i| net.nodes[i].live_members().count() == net.nodes.len() - 1)
}

#[test]
fn a_join_storm_sends_a_fraction_of_the_rumors_and_everyone_still_learns_everyone() {
    let held = storm(Duration::from_millis(100), 4);
    let at_once = storm(Duration::ZERO, 4);
    assert!(everyone_knows_everyone(&held), "with the gap");
    assert!(everyone_knows_everyone(&at_once), "without the gap");
    assert!(
        held.rumors * 3 < at_once.rumors,
        "rumors with the gap: {}, without: {}",
        held.rumors,
        at_once.rumors
    );
}

/// After a storm with `rumor_gap` `gap` has settled, one more member joins through node 0:
/// how many members know it 100 ms later.
fn knowing_a_late_joiner(gap: Duration) -> usize {
    let mut net = storm(gap, 10);
    let config = GossipConfig {
        rumor_gap: gap,
        ..GossipConfig::default()
    };
    let late = JOINERS + 1;
    net.nodes.push(Gossip::new(
        NodeId::from_seed(9, late as u64),
        format!("n{late}"),
        addr(late),
        1,
        config,
        late as u64,
        net.now,
    ));
    net.down.push(false);
    net.events.push(Vec::new());
    net.sync_records.push(0);
    let via = net.id(0);
    let now = net.now;
    net.nodes[late].join(now, via);
    net.drain(late);
    net.run_for(Duration::from_millis(100));
    let new_id = net.id(late);
    (0..late)
        .filter(|&i| net.nodes[i].record(&new_id).is_some())
        .count()
}

#[test]
fn news_after_a_quiet_spell_goes_out_at_once() {
    // The seed's push of the news, and every forward of it, go out at once (5 ms a hop
    // here), about as with no gap at all (the two storms before differ, so the counts
    // may too); held back a gap at each hop, only the seed would know after 100 ms.
    // (Rumors alone miss a few members, which probes and anti-entropy reach later.)
    let held = knowing_a_late_joiner(Duration::from_millis(100));
    let at_once = knowing_a_late_joiner(Duration::ZERO);
    assert!(
        held * 10 >= at_once * 9 && held > JOINERS / 2,
        "members that know the newcomer after 100 ms: {held} with the gap, {at_once} without"
    );
}

/// Every rumor node 0 sends until `now`, as (to, records) pairs.
fn rumors_sent(net: &mut Net) -> Vec<(NodeId, Vec<NodeId>)> {
    let mut out = Vec::new();
    while let Some(t) = net.nodes[0].poll_transmit() {
        if let GossipMessage::Rumor { updates } = t.msg {
            out.push((t.to, updates.iter().map(|r| r.id).collect()));
        }
    }
    out
}

#[test]
fn news_held_within_the_gap_goes_out_in_one_rumor_when_the_gap_ends() {
    let gap = Duration::from_millis(100);
    let mut net = storm(gap, 10);
    let newcomer = |k: u64| {
        let g = Gossip::new(
            NodeId::from_seed(77, k),
            format!("new{k}"),
            addr(100 + k as usize),
            1,
            GossipConfig::default(),
            k,
            Time::ZERO,
        );
        g.me().clone()
    };
    let (a, b, c) = (newcomer(1), newcomer(2), newcomer(3));
    let from = net.id(1);
    let t0 = net.now;
    let _ = rumors_sent(&mut net);
    // Node 0 hears `record` from node 1 at `at`.
    let hear = |net: &mut Net, at: Time, record: MemberRecord| {
        let msg = GossipMessage::Rumor {
            updates: vec![record.into()],
        };
        net.nodes[0].handle_message(at, from, msg);
    };
    // After a quiet spell, news goes out at once.
    hear(&mut net, t0, a.clone());
    let first = rumors_sent(&mut net);
    assert!(!first.is_empty(), "news after a quiet spell waits");
    assert!(
        first
            .iter()
            .all(|(to, ids)| *ids == vec![a.id] && *to != from)
    );
    // Within the gap, news waits ...
    let t1 = t0 + Duration::from_millis(10);
    hear(&mut net, t1, b.clone());
    let t2 = t0 + Duration::from_millis(20);
    hear(&mut net, t2, c.clone());
    assert!(
        rumors_sent(&mut net).is_empty(),
        "news within the gap went out at once"
    );
    let due = net.nodes[0].poll_timeout().expect("a flush is armed");
    assert!(due <= t0 + gap, "the flush comes after the gap: {due:?}");
    // ... and goes out in one rumor per member when the gap ends.
    net.nodes[0].handle_timeout(t0 + gap);
    let batch = rumors_sent(&mut net);
    assert!(!batch.is_empty(), "the held news never went out");
    for (to, ids) in &batch {
        assert_eq!(
            *ids,
            vec![b.id, c.id],
            "one rumor to {to:?} with both records"
        );
    }
    let mut targets: Vec<NodeId> = batch.iter().map(|(to, _)| *to).collect();
    targets.sort_unstable();
    targets.dedup();
    assert_eq!(targets.len(), batch.len(), "one rumor per member");
}
