//! Operations scoped to a group: members deliver and contribute, the others only relay.

use super::*;

/// `members` join group "g" in every view.
fn with_group(net: &mut Net, members: &[usize]) {
    let table: HashMap<NodeId, Vec<String>> = (members.iter())
        .map(|i| (net.ids[*i], vec!["g".to_string()]))
        .collect();
    for v in &mut net.views {
        v.groups = table.clone();
    }
}

fn ids(net: &Net, idx: &[usize]) -> Vec<NodeId> {
    let mut v: Vec<NodeId> = idx.iter().map(|i| net.ids[*i]).collect();
    v.sort_unstable();
    v
}

#[test]
fn a_group_broadcast_is_delivered_by_the_members_only_and_relayed_by_the_others() {
    // Root 0 and relays 1 and 3 are outside the group; 2, 4 and 5 are in it (5 below 3).
    let mut net = Net::new(6, TREE);
    with_group(&mut net, &[2, 4, 5]);
    let what = StartKind::Broadcast { payload: vec![7] };
    net.start_scoped(0, 1, Some("g"), what);
    assert!(net.run(Duration::from_secs(5)));
    assert_eq!(net.deliveries(DeliveryKind::Broadcast), vec![2, 4, 5]);
    let groups: Vec<Option<String>> = (net.events.iter())
        .filter_map(|(_, e)| match e {
            Event::Delivered(d) => Some(d.group.clone()),
            _ => None,
        })
        .collect();
    assert!(
        groups.iter().all(|g| g.as_deref() == Some("g")),
        "{groups:?}"
    );
    let r = net.report();
    assert_eq!(r.expected, ids(&net, &[2, 4, 5]));
    assert_eq!(r.reached, ids(&net, &[2, 4, 5]));
    assert!(r.missing.is_empty(), "{:?}", r.missing);
    // Still one message down and one up per tree edge: the tree carried it.
    assert_eq!(net.sent, 10);
}

#[test]
fn a_group_reduce_counts_the_members_values_only() {
    let mut net = Net::new(6, TREE);
    with_group(&mut net, &[0, 3, 4]);
    for i in 0..6 {
        // Everyone publishes under the key; only the group's members are asked.
        net.engines[i].publish(net.now, &net.views[i], "v".into(), u64s(&[1 << i]));
    }
    let what = StartKind::Reduce {
        key: "v".into(),
        request: vec![],
        reducer: Reducer::Sum(NumKind::U64),
    };
    net.start_scoped(0, 1, Some("g"), what);
    assert!(net.run(Duration::from_secs(5)));
    let r = net.report();
    assert_eq!(r.contributors, ids(&net, &[0, 3, 4]));
    assert_eq!(r.value, Some(u64s(&[1 + 8 + 16])));
    assert!(r.declined.is_empty() && r.missing.is_empty(), "{r:?}");
}

#[test]
fn a_dead_member_is_missing_and_one_below_a_dead_relay_is_asked_directly() {
    // 3 (a member) is gone without a word; 5 below it is reached by the root's retry.
    let mut net = Net::new(6, TREE);
    with_group(&mut net, &[3, 5]);
    net.alive[3] = false;
    net.start_scoped(0, 1, Some("g"), StartKind::Broadcast { payload: vec![1] });
    assert!(net.run(Duration::from_secs(5)));
    assert_eq!(net.deliveries(DeliveryKind::Broadcast), vec![5]);
    let r = net.report();
    assert_eq!(r.reached, ids(&net, &[5]));
    assert_eq!(r.missing, ids(&net, &[3]));
}

#[test]
fn an_allreduce_in_a_group_spreads_its_result_to_the_members_only() {
    let mut net = Net::new(6, TREE);
    with_group(&mut net, &[1, 2, 5]);
    for i in 0..6 {
        net.engines[i].publish(net.now, &net.views[i], "v".into(), u64s(&[i as u64]));
    }
    let what = StartKind::AllReduce {
        key: "v".into(),
        request: vec![],
        reducer: Reducer::Sum(NumKind::U64),
    };
    net.start_scoped(1, 1, Some("g"), what);
    assert!(net.run(Duration::from_secs(5)));
    assert_eq!(net.deliveries(DeliveryKind::AllReduce), vec![1, 2, 5]);
}

#[test]
fn scopes_that_make_no_sense_are_refused_at_once() {
    let mut net = Net::new(3, &[(0, 1), (0, 2)]);
    with_group(&mut net, &[1]);
    let items = vec![(net.ids[1], vec![1])];
    net.start_scoped(0, 1, Some("g"), StartKind::Scatter { items });
    let r = net.report();
    assert_eq!(r.error, Some(OpRefused::Unscoped));
    assert_eq!(net.sent, 0);
}
