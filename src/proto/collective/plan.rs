//! Spreading inside a cluster: the node where an operation enters a low-latency cluster
//! plans who sends to whom among the cluster's nodes below it, instead of following the
//! tree there (where the paper lost to a static binomial tree).
//!
//! The plan is the greedy schedule of the per-send cost model: every node that has the
//! message is free again `send_cost` after each send; the next recipient goes to the node
//! that can send soonest, and has the message one latency (plus its receive cost) later.
//! With a latency of a few send costs this is much wider than a binomial tree and faster;
//! with a negligible latency it is close to binomial (a little wider, since receiving costs
//! as much as sending: a node that just got the message is not ready at once). Each recipient gets the set of nodes it is to
//! cover (its *delegation*) and plans that set the same way. The trees themselves, and so
//! wide-area optimality and loop freedom, are untouched: only the order and the relays of
//! sends inside a cluster change, and every node still answers, once, whoever reached it.

use crate::proto::id::NodeId;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// The first sends of `me`'s plan over `set`: each recipient with the nodes it covers.
/// `latency_us(x)` is the one-way latency to `x`; `send_cost_us` the cost of one send.
pub(crate) fn schedule(
    me: NodeId,
    set: &[NodeId],
    latency_us: impl Fn(NodeId) -> u32,
    send_cost_us: u32,
) -> Vec<(NodeId, Vec<NodeId>)> {
    let send = send_cost_us.max(1) as u64;
    let mut parent: HashMap<NodeId, NodeId> = HashMap::new();
    let mut children: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    // (time the node can start its next send, tie-break order, node)
    let mut ready: BinaryHeap<Reverse<(u64, usize, NodeId)>> = BinaryHeap::new();
    ready.push(Reverse((0, 0, me)));
    for (i, &x) in set.iter().enumerate() {
        let Reverse((t, order, u)) = ready.pop().expect("the planner is always there");
        parent.insert(x, u);
        children.entry(u).or_default().push(x);
        ready.push(Reverse((t + send, order, u)));
        ready.push(Reverse((t + send + latency_us(x) as u64 + send, i + 1, x)));
    }
    let mut out = Vec::new();
    for &c in children.get(&me).map(Vec::as_slice).unwrap_or(&[]) {
        let mut covered = Vec::new();
        let mut stack: Vec<NodeId> = children.get(&c).cloned().unwrap_or_default();
        while let Some(v) = stack.pop() {
            covered.push(v);
            stack.extend(children.get(&v).into_iter().flatten().copied());
        }
        out.push((c, covered));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u64) -> Vec<NodeId> {
        (1..=n).map(|i| NodeId::from_seed(9, i)).collect()
    }

    #[test]
    fn plans_cover_everyone_once() {
        let me = NodeId::from_seed(9, 0);
        let set = ids(99);
        let plan = schedule(me, &set, |_| 100, 30);
        let mut all: Vec<NodeId> = plan
            .iter()
            .flat_map(|(c, d)| std::iter::once(*c).chain(d.iter().copied()))
            .collect();
        all.sort();
        let mut want = set.clone();
        want.sort();
        assert_eq!(all, want);
    }

    #[test]
    fn negligible_latency_gives_a_near_binomial_tree_and_long_latency_a_wider_one() {
        let me = NodeId::from_seed(9, 0);
        let set = ids(63);
        let narrow = schedule(me, &set, |_| 0, 30);
        // Largest subtree first, halving roughly as in a binomial tree (receiving costs one
        // send here, so each subtree is a bit smaller than half the rest).
        let sizes: Vec<usize> = narrow.iter().map(|(_, d)| d.len() + 1).collect();
        assert_eq!(sizes, vec![24, 15, 9, 6, 4, 2, 1, 1, 1]);
        assert_eq!(sizes.iter().sum::<usize>(), 63);
        let wide = schedule(me, &set, |_| 300, 30);
        assert!(wide.len() > 2 * narrow.len(), "{} sends", wide.len());
    }
}
