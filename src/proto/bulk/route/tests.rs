//! Every participant's part, derived from plans of every shape, simulated: each contribution
//! counted once, every result where it belongs.

use super::*;
use crate::proto::bulk::relay::Relay;
use crate::proto::bulk::{Elem, ReduceOp};
use std::collections::HashMap;

/// A plan over clusters of `sizes` members (in id order), 10 elements per cluster,
/// chunks of 4; a reduce to member `root` if given.
pub(crate) fn plan(algorithm: Algorithm, sizes: &[usize], root: Option<usize>) -> BulkPlan {
    let n: usize = sizes.iter().sum();
    let mut members: Vec<NodeId> = (0..n as u64).map(|i| NodeId::from_seed(1, i)).collect();
    members.sort();
    let mut groups = Vec::new();
    let mut at = 0u32;
    for s in sizes {
        groups.push((at..at + *s as u32).collect());
        at += *s as u32;
    }
    BulkPlan {
        attempt: 0,
        algorithm,
        root: root.map(|r| members[r]),
        members,
        missing: Vec::new(),
        groups,
        shares: vec![10; sizes.len()],
        len: 10 * sizes.len() as u64,
        elem: Elem::F32,
        op: ReduceOp::Sum,
        chunk: 4,
        predicted_s: 0.0,
        inside: Vec::new(),
        relays: Vec::new(),
    }
}

/// The same plan with `inside` in every group.
pub(crate) fn with_inside(mut plan: BulkPlan, inside: Inside) -> BulkPlan {
    plan.inside = vec![inside; plan.groups.len()];
    plan
}

/// Every member's part in `chunk`.
pub(crate) fn routes_of(plan: &BulkPlan, chunk: &Chunk) -> HashMap<NodeId, ChunkRoute> {
    (plan.members.iter())
        .map(|m| (*m, chunk_route(plan, *m, chunk).unwrap()))
        .collect()
}

/// Follows each cluster's reduce chain or tree to its gateway (every member's value
/// is 1): the partial count at each gateway.
pub(crate) fn chain_partials(routes: &HashMap<NodeId, ChunkRoute>) -> HashMap<NodeId, usize> {
    fn count(routes: &HashMap<NodeId, ChunkRoute>, m: NodeId) -> usize {
        let from = &routes[&m].reduce_from;
        let below: usize = from
            .iter()
            .map(|c| {
                assert_eq!(routes[c].reduce_to, Some(m));
                count(routes, *c)
            })
            .sum();
        1 + below
    }
    (routes.iter())
        .filter(|(_, r)| r.gateway())
        .map(|(m, _)| (*m, count(routes, *m)))
        .collect()
}

/// Simulates the routes: every node's value is 1; counts, per chunk, how many
/// contributions each node ends up with. Exact allreduce: all of them, everywhere.
fn check(plan: &BulkPlan) {
    let n = plan.members.len();
    for chunk in chunks(plan) {
        let routes = routes_of(plan, &chunk);
        let partial = chain_partials(&routes);
        let mut result: HashMap<NodeId, usize> = HashMap::new();
        for (m, r) in &routes {
            if r.gateway() && r.result_from.is_none() {
                let mut sum = partial[m];
                for p in &r.partials_from {
                    assert!(routes[p].partial_to.contains(m));
                    sum += partial[p];
                }
                result.insert(*m, sum);
            }
        }
        for (m, r) in &routes {
            if let Some(from) = r.result_from {
                assert!(routes[&from].result_to.contains(m));
                result.insert(*m, result[&from]);
            }
        }
        for (m, r) in &routes {
            if r.gather_from.is_none() {
                let mut next = vec![*m];
                while let Some(at) = next.pop() {
                    for to in &routes[&at].gather_to {
                        assert_eq!(routes[to].gather_from, Some(at));
                        assert!(result.insert(*to, result[m]).is_none(), "reached twice");
                        next.push(*to);
                    }
                }
            }
        }
        assert_eq!(result.len(), n, "chunk {} reached everyone", chunk.index);
        assert!(result.values().all(|v| *v == n), "{result:?}");
    }
}

#[test]
fn clustered_and_hierarchical_routes_reduce_everything_exactly_once() {
    for algorithm in [Algorithm::Clustered, Algorithm::Hierarchical] {
        for inside in [Inside::Chain, Inside::Binomial] {
            for sizes in [&[4, 2, 3, 1][..], &[1], &[5], &[1, 1, 1], &[16, 7, 13]] {
                check(&with_inside(plan(algorithm, sizes, None), inside));
            }
        }
    }
}

/// Simulates a reduce's routes: the root, and only the root, ends with every
/// contribution of every chunk, each counted once.
fn check_reduce(plan: &BulkPlan) {
    let n = plan.members.len();
    let root = plan.root.unwrap();
    for chunk in chunks(plan) {
        let routes = routes_of(plan, &chunk);
        let nothing_back = routes
            .values()
            .all(|r| r.gather_from.is_none() && r.gather_to.is_empty());
        assert!(nothing_back);
        let partial = chain_partials(&routes);
        let owners: Vec<&NodeId> = routes
            .iter()
            .filter(|(_, r)| r.owner)
            .map(|(m, _)| m)
            .collect();
        assert_eq!(owners.len(), 1, "one owner per chunk of a reduce");
        let owner = *owners[0];
        let mut total = partial[&owner];
        for p in &routes[&owner].partials_from {
            assert_eq!(routes[p].partial_to, vec![owner]);
            total += partial[p];
        }
        assert_eq!(total, n, "chunk {}", chunk.index);
        if owner == root {
            assert!(routes[&root].result_from.is_none());
        } else {
            assert_eq!(routes[&owner].result_to, vec![root]);
            assert_eq!(routes[&root].result_from, Some(owner));
        }
        let fed: usize = routes.values().map(|r| r.result_to.len()).sum();
        assert!(fed <= 1, "results go to the root alone");
    }
}

#[test]
fn reduce_routes_bring_every_contribution_to_the_root_once() {
    for (algorithm, inside) in [Algorithm::Clustered, Algorithm::Hierarchical]
        .into_iter()
        .flat_map(|a| [(a, Inside::Chain), (a, Inside::Binomial)])
    {
        for sizes in [&[4, 2, 3, 1][..], &[1], &[5], &[1, 1, 1], &[9, 2]] {
            let mut p = with_inside(plan(algorithm, sizes, None), inside);
            for root in [0, p.members.len() - 1, p.members.len() / 2] {
                p.root = Some(p.members[root]);
                check_reduce(&p);
            }
        }
    }
}

#[test]
fn a_binomial_tree_takes_log2_hops_and_a_chain_every_member() {
    let depth = |p: &BulkPlan| {
        let c = chunks(p)[0];
        let routes = routes_of(p, &c);
        let hops = |m: NodeId| {
            let (mut at, mut n) = (m, 0);
            while let Some(up) = routes[&at].reduce_to {
                (at, n) = (up, n + 1);
            }
            n
        };
        p.members.iter().map(|m| hops(*m)).max().unwrap()
    };
    let p = plan(Algorithm::Hierarchical, &[16], None);
    assert_eq!(depth(&p), 15);
    assert_eq!(depth(&with_inside(p, Inside::Binomial)), 4);
    // 13 members: the gateway has four children, the deepest member (position 7 or
    // 11) is three hops away.
    let p = with_inside(plan(Algorithm::Clustered, &[13, 3], None), Inside::Binomial);
    assert_eq!(depth(&p), 3);
}

#[test]
fn chunks_cover_the_shares_in_order() {
    let p = plan(Algorithm::Clustered, &[2, 2, 2], None);
    let c = chunks(&p);
    assert_eq!(c.len(), 9);
    assert_eq!(c[2].start, 8);
    assert_eq!(c[2].len, 2);
    assert_eq!(c[3].share, 1);
    assert_eq!(c.iter().map(|c| c.len).sum::<u64>(), p.len);
    let s: u64 = (0..7).map(|s| segment(100, 7, s).1).sum();
    assert_eq!(s, 100);
}

// Relayed clustered plans.

/// `p` with relays along chains of groups: up from each group to the next (wrapping) until the
/// owner, down the other way; none down in a reduce.
pub(crate) fn chained(mut p: BulkPlan) -> BulkPlan {
    let k = p.groups.len() as u32;
    p.relays = chunks(&p)
        .iter()
        .map(|c| {
            let o = c.share as u32;
            let next = |step: u32| (0..k).map(move |g| if g == o { o } else { (g + step) % k });
            Relay {
                up: next(1).collect(),
                down: match p.root {
                    Some(_) => Vec::new(),
                    None => next(k - 1).collect(),
                },
            }
        })
        .collect();
    p
}

/// Simulates a relayed plan (every member's value 1): the owner's combined partial
/// counts every member once; its result reaches every member once (a reduce: the
/// root alone).
fn exact(plan: &BulkPlan) {
    let n = plan.members.len();
    for chunk in chunks(plan) {
        let routes = routes_of(plan, &chunk);
        let chain = chain_partials(&routes);
        fn total(
            routes: &HashMap<NodeId, ChunkRoute>,
            chain: &HashMap<NodeId, usize>,
            m: NodeId,
        ) -> usize {
            let below = routes[&m].partials_from.iter().map(|p| {
                assert_eq!(routes[p].partial_to, vec![m], "one partial, one way");
                total(routes, chain, *p)
            });
            chain[&m] + below.sum::<usize>()
        }
        let owners: Vec<NodeId> = (routes.iter().filter(|(_, r)| r.owner))
            .map(|(m, _)| *m)
            .collect();
        assert_eq!(owners.len(), 1, "chunk {}", chunk.index);
        let owner = owners[0];
        assert_eq!(total(&routes, &chain, owner), n, "chunk {}", chunk.index);
        let mut got: HashMap<NodeId, usize> = HashMap::from([(owner, n)]);
        let mut next = vec![owner];
        while let Some(at) = next.pop() {
            for to in (routes[&at].result_to.iter()).chain(&routes[&at].gather_to) {
                let from = routes[to].result_from.or(routes[to].gather_from);
                assert_eq!(from, Some(at), "{to:?} expects it from {at:?}");
                assert!(got.insert(*to, n).is_none(), "reached twice");
                next.push(*to);
            }
        }
        match plan.root {
            Some(root) => assert!(got.contains_key(&root) && got.len() <= 2),
            None => assert_eq!(got.len(), n, "chunk {} reached everyone", chunk.index),
        }
    }
}

#[test]
fn relayed_routes_reduce_everything_exactly_once() {
    for inside in [Inside::Chain, Inside::Binomial] {
        for sizes in [
            &[4, 2, 3, 1][..],
            &[1, 1, 1],
            &[16, 7, 13],
            &[2, 5, 1, 3, 2],
        ] {
            let p = with_inside(plan(Algorithm::Clustered, sizes, None), inside);
            let relayed = chained(p.clone());
            assert_eq!(relayed.check(p.members[0]), Ok(()));
            exact(&relayed);
            for root in [0, p.members.len() - 1, p.members.len() / 2] {
                let mut reduce = p.clone();
                reduce.root = Some(p.members[root]);
                let reduce = chained(reduce);
                assert_eq!(reduce.check(p.members[0]), Ok(()));
                exact(&reduce);
            }
        }
    }
}

#[test]
fn a_relay_that_is_not_a_tree_to_the_owner_is_refused() {
    let p = chained(plan(Algorithm::Clustered, &[2, 2, 2], None));
    let me = p.members[0];
    let bad = |f: &dyn Fn(&mut BulkPlan)| {
        let mut q = p.clone();
        f(&mut q);
        q.check(me)
    };
    assert!(bad(&|q| q.relays[0].up = vec![1, 0, 2]).is_err(), "a cycle");
    assert!(
        bad(&|q| q.relays[0].up = vec![0, 9, 0]).is_err(),
        "out of range"
    );
    assert!(bad(&|q| q.relays[0].down.pop().map(drop).unwrap_or(())).is_err());
    assert!(bad(&|q| q.relays.pop().map(drop).unwrap_or(())).is_err());
    assert!(bad(&|q| q.algorithm = Algorithm::Hierarchical).is_err());
}
