//! The in-cluster plan: it replaces the tree inside a cluster without sending anything
//! twice, and far sends leave first.

use super::*;

impl Net {
    /// Nodes 0..n, all in one cluster with planning on, over node 0's tree `edges`.
    fn one_cluster(n: usize, edges: &[(usize, usize)]) -> Net {
        let mut net = Net::new(n, edges);
        for v in &mut net.views {
            v.one_cluster = true;
        }
        net
    }

    /// A broadcast from node 0 run to its end, with `sent` and `events` counting only it.
    fn broadcast_alone(&mut self, nonce: u64) {
        self.sent = 0;
        self.events.clear();
        let payload = vec![nonce as u8];
        self.start_op(0, nonce, StartKind::Broadcast { payload });
        assert!(self.run(Duration::from_secs(5)));
    }
}

#[test]
fn inside_a_cluster_the_plan_replaces_the_tree_without_sending_twice() {
    let mut net = Net::one_cluster(9, CLUSTER_TREE);
    // The first operation follows the tree (nothing learned yet); the root learns its
    // cluster from the answers and plans the second.
    net.broadcast_alone(1);
    assert_eq!(
        net.sent, 16,
        "first operation: down and up each tree edge once"
    );
    net.broadcast_alone(2);
    assert_eq!(
        net.deliveries(DeliveryKind::Broadcast),
        (0..9).collect::<Vec<_>>()
    );
    let r = net.report();
    assert_eq!(r.reached.len(), 9);
    // Planned: each node is sent the operation once and answers once, so no tree parent
    // sends again what the plan already delivered.
    assert_eq!(
        net.sent, 16,
        "planned operation: one down and one up per node"
    );
    // The plan is wider than the chain: it finishes in fewer hops than the tree's depth (5).
    assert!(r.elapsed < Duration::from_millis(8), "{:?}", r.elapsed);
}

#[test]
fn a_node_new_below_a_plan_recipient_is_reached_by_the_tree() {
    let mut net = Net::one_cluster(10, CLUSTER_TREE);
    let (newcomer, root) = (net.ids[9], net.ids[0]);
    // Node 9 is not in the tree at first: nobody names it as a child.
    net.broadcast_alone(1);
    // It joins below node 5 (the end of the chain); the root's plan does not know it.
    net.views[5].children.get_mut(&root).unwrap().push(newcomer);
    net.broadcast_alone(2);
    assert_eq!(
        net.deliveries(DeliveryKind::Broadcast),
        (0..10).collect::<Vec<_>>()
    );
    let r = net.report();
    assert_eq!(r.reached.len(), 10);
    assert!(r.missing.is_empty());
    // Reached through the tree in the same pass, not by the root's direct retry.
    assert!(r.elapsed < Duration::from_millis(20), "{:?}", r.elapsed);
    assert_eq!(net.sent, 18, "one down and one up per node");
}

#[test]
fn far_sends_leave_before_the_cluster_part_is_worked_out() {
    // Node 0's cluster is 0..=4 (a chain below 1, and 2 directly); 5 and 6 are a far
    // cluster, entered at 5.
    let edges = &[(0, 1), (0, 2), (0, 5), (1, 3), (3, 4), (5, 6)];
    let mut net = Net::one_cluster(7, edges);
    let far = vec![net.ids[5], net.ids[6]];
    for v in &mut net.views {
        v.far = far.clone();
    }
    for nonce in 1..=2u64 {
        net.sent = 0;
        net.events.clear();
        let s = Start {
            group: None,
            nonce,
            timeout: Duration::from_secs(2),
            what: StartKind::Broadcast {
                payload: vec![nonce as u8],
            },
        };
        net.engines[0].start(net.now, &net.views[0], s);
        // Only the far child's copy is ready; the cluster's part waits until it is drained.
        let first = net.engines[0].poll_transmit().expect("the far send");
        assert_eq!(net.idx(first.to), 5);
        assert!(net.engines[0].poll_transmit().is_none());
        assert!(net.engines[0].has_deferred());
        let Message::Collective(m) = first.msg else {
            panic!("not collective")
        };
        net.queue
            .push_back((net.now + Duration::from_millis(1), 0, 5, m));
        net.sent += 1;
        net.drain(0); // runs the deferred part: the sends inside the cluster
        assert!(!net.engines[0].has_deferred());
        let mut near: Vec<usize> = net.queue.iter().skip(1).map(|(_, _, to, _)| *to).collect();
        near.sort_unstable();
        if nonce == 1 {
            // Nothing learned yet: the tree.
            assert_eq!(near, vec![1, 2]);
        } else {
            // Planned over the cluster the first operation's answers described.
            assert!(
                near.len() > 2 && near.iter().all(|i| (1..=4).contains(i)),
                "{near:?}"
            );
        }
        assert!(net.run(Duration::from_secs(5)));
        assert_eq!(
            net.deliveries(DeliveryKind::Broadcast),
            (0..7).collect::<Vec<_>>()
        );
        let r = net.report();
        assert_eq!((r.reached.len(), r.missing.len()), (7, 0));
        assert_eq!(net.sent, 12, "one down and one up per node");
    }
}
