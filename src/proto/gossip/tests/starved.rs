//! A host short of CPU: a starved node stretches its own timings instead of accusing
//! healthy members, whether it alone is slow or every node is.

use super::*;

#[test]
fn a_starved_node_slows_its_own_probing_instead_of_accusing_healthy_members() {
    let mut net = Net::new(6);
    net.join_all();
    let healthy: Vec<NodeId> = (0..6).filter(|&i| i != 4).map(|i| net.id(i)).collect();
    let accusations = |net: &Net| {
        net.events[4]
            .iter()
            .filter(|e| matches!(e, GossipEvent::Suspect(id) if healthy.contains(id)))
            .count()
    };
    let before = accusations(&net);
    net.slow = Some((4, Duration::from_millis(1500)));
    net.run_for(Duration::from_secs(60));
    let during = accusations(&net) - before;
    // Unstretched, every one-second period would end before its ack: 60 accusations.
    assert!(during <= 25, "{during} suspicions of healthy members");
    assert!(
        net.nodes[0].local_health() <= 1,
        "healthy nodes stay (about) healthy"
    );
    net.slow = None;
    net.run_for(Duration::from_secs(60));
    assert_eq!(net.nodes[4].local_health(), 0, "recovered");
    assert!(MAX_LOCAL_HEALTH >= net.nodes[4].local_health());
}

#[test]
fn a_host_short_of_cpu_for_every_node_declares_nobody_dead_by_mistake() {
    let mut net = Net::new(8);
    net.join_all();
    let deaths = |net: &Net| {
        (net.events.iter().flatten())
            .filter(|e| matches!(e, GossipEvent::Down { .. }))
            .count()
    };
    // Every node reads its messages and wakes 1.2 s late: an exchange takes 2.4 s and a
    // refutation longer than the 3 s a suspect is given, unless the nodes see their own
    // lateness.
    net.starved = Some(Duration::from_millis(1200));
    net.run_for(Duration::from_secs(120));
    assert_eq!(deaths(&net), 0, "false deaths while every node was starved");
    assert!((0..8).all(|i| net.nodes[i].local_health() >= MAX_LOCAL_HEALTH / 2));
    // A real crash is still found, later.
    net.down[5] = true;
    net.run_for(Duration::from_secs(240));
    for i in (0..8).filter(|&i| i != 5) {
        assert_eq!(net.state_of(i, 5), Some(Liveness::Dead), "node {i}");
    }
    net.starved = None;
    net.run_for(Duration::from_secs(120));
    assert!(
        (0..8)
            .filter(|&i| i != 5)
            .all(|i| net.nodes[i].local_health() == 0)
    );
    assert_eq!(
        deaths(&net),
        7,
        "only the crashed member died, once at each node"
    );
}

#[test]
fn a_starved_node_does_not_suspect_on_a_failed_dial_and_waits_longer_on_a_suspect() {
    let mut net = Net::new(4);
    net.join_all();
    let (x, now) = (net.id(3), net.now);
    // Healthy, a failed dial is an unanswered period; starved, its own handshakes time out.
    net.nodes[0].health = 2;
    net.nodes[0].handle_unreachable(now, x);
    assert_eq!(net.state_of(0, 3), Some(Liveness::Alive));
    net.nodes[0].health = 0;
    net.nodes[0].handle_unreachable(now, x);
    assert_eq!(net.state_of(0, 3), Some(Liveness::Suspect));
    let base = net.nodes[0].suspicion_timeout();
    // It grew starved after hearing it: the suspect gets the longer time (the score may
    // fall by one with an ack still due from before).
    net.nodes[0].health = 4;
    let mut t = now;
    while net.state_of(0, 3) == Some(Liveness::Suspect) {
        t = net.nodes[0].poll_timeout().expect("a timer");
        net.nodes[0].handle_timeout(t);
        while net.nodes[0].poll_transmit().is_some() {}
    }
    assert!(t - now >= base * 4, "dead after {:?}", t - now);
    assert!(t - now <= base * 5, "dead after {:?}", t - now);
    assert_eq!(net.state_of(0, 3), Some(Liveness::Dead));
}
