//! Clustered reductions that relay through third clusters: each chunk's cluster partials
//! travel an in-tree of clusters to the chunk's owner, combined wherever two meet (a
//! reduce is the tree reversed), and an allreduce's result travels an out-tree back.
//!
//! Every cluster but the owner sends exactly one partial of each chunk, whatever the tree,
//! so a tree moves no more wide-area bytes than partials sent straight to their owner: it
//! only picks the links. The planner packs the chunks one by one (greedy widest-path
//! packing over the measured rates, as the relayed scatter and allgather do): for each it
//! tries every cluster as the owner (a reduce: the root's cluster), grows the in-tree and
//! the out-tree a link at a time, each time the link that would finish soonest given what
//! is already planned on it, and keeps the owner whose trees leave the busiest link least
//! loaded. The model ([`super::model::predict_to`]) keeps the trees only when they beat
//! the direct shares of [`super::model::shares_to`].

use super::model::Network;
use super::route::ChunkRoute;
use super::{BulkPlan, NodeId};
use serde::{Deserialize, Serialize};

/// Above this many clusters the trees are not tried (the packing grows as the cube).
pub const MAX_CLUSTERS: usize = 12;

/// How one chunk crosses the clusters of a relayed clustered plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relay {
    /// Each group's next group towards the chunk's owner (the owner's: itself).
    pub up: Vec<u32>,
    /// Each group's group its result comes from (the owner's: itself; empty in a reduce).
    pub down: Vec<u32>,
}

/// A relayed clustered plan's wide-area part.
#[derive(Clone, Debug, PartialEq)]
pub struct Relayed {
    /// Elements each group owns, whole chunks in group order (the last chunk may be short).
    pub shares: Vec<u64>,
    /// One per chunk, in [`super::route::chunks`] order.
    pub relays: Vec<Relay>,
    /// Bits planned on each link, `load[c][d]` from group `c` to `d`.
    pub load: Vec<Vec<f64>>,
    /// The most wide-area hops a chunk takes up and (allreduce) down.
    pub hops: usize,
}

/// Packs `len` elements of `elem_size` bytes in chunks of `chunk` elements (see the module
/// docs); `root`: a reduce's root group.
pub fn plan(net: &Network, len: u64, chunk: u64, elem_size: usize, root: Option<usize>) -> Relayed {
    let k = net.groups.len();
    let chunk = chunk.max(1);
    let count = len.div_ceil(chunk);
    let mut load = vec![vec![0.0f64; k]; k];
    let mut owned: Vec<(usize, u64, Relay)> = Vec::with_capacity(count as usize);
    let mut hops = 0;
    for i in 0..count {
        let bits = 8.0 * (chunk.min(len - i * chunk) * elem_size as u64) as f64;
        let owners: Vec<usize> = match root {
            Some(r) => vec![r],
            None => (0..k).collect(),
        };
        // Ties on the busiest link go to the owner whose trees take the least time in all.
        let mut best: Option<Pick> = None;
        for o in owners {
            let mut trial = load.clone();
            let up = grow(net, &mut trial, o, bits, Way::In);
            let down = match root {
                Some(_) => Vec::new(),
                None => grow(net, &mut trial, o, bits, Way::Out),
            };
            let cost = (busiest(net, &trial), total(net, &trial));
            if best.as_ref().is_none_or(|b| cost < b.cost) {
                let relay = Relay { up, down };
                best = Some(Pick {
                    cost,
                    owner: o,
                    relay,
                    load: trial,
                });
            }
        }
        let Some(Pick {
            owner: o,
            relay,
            load: trial,
            ..
        }) = best
        else {
            break;
        };
        load = trial;
        hops = hops.max(depth(&relay.up) + depth(&relay.down));
        owned.push((o, i, relay));
    }
    // Chunks in group order, as the shares lay them out.
    owned.sort_by_key(|(o, i, _)| (*o, *i));
    let mut shares = vec![0u64; k];
    for (o, i, _) in &owned {
        shares[*o] += chunk.min(len - i * chunk);
    }
    Relayed {
        shares,
        relays: owned.into_iter().map(|(_, _, r)| r).collect(),
        load,
        hops,
    }
}

/// One owner's trees for a chunk, as the packing weighs them.
struct Pick {
    /// The busiest link's seconds, then every link's added up.
    cost: (f64, f64),
    owner: usize,
    relay: Relay,
    /// The links' bits with these trees.
    load: Vec<Vec<f64>>,
}

#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// Partials towards the owner.
    In,
    /// Results from it.
    Out,
}

/// Grows a tree of every group around `owner`, a link at a time, the link that would
/// finish soonest with `bits` more on it; adds the bits to `load` and returns each
/// group's neighbour towards the owner.
fn grow(net: &Network, load: &mut [Vec<f64>], owner: usize, bits: f64, way: Way) -> Vec<u32> {
    let k = net.groups.len();
    let mut next = vec![u32::MAX; k];
    next[owner] = owner as u32;
    for _ in 1..k {
        let mut best: Option<(f64, usize, usize)> = None;
        for c in (0..k).filter(|c| next[*c] == u32::MAX) {
            for x in (0..k).filter(|x| next[*x] != u32::MAX) {
                let (a, b) = if way == Way::In { (c, x) } else { (x, c) };
                let t = (load[a][b] + bits) / net.wide(a, b);
                // The owner first: a relay replaces it only when strictly sooner.
                if best.is_none_or(|(bt, _, _)| t < bt) {
                    best = Some((t, c, x));
                }
            }
        }
        let Some((_, c, x)) = best else { break };
        next[c] = x as u32;
        let (a, b) = if way == Way::In { (c, x) } else { (x, c) };
        load[a][b] += bits;
    }
    next
}

/// The busiest link's seconds.
pub fn busiest(net: &Network, load: &[Vec<f64>]) -> f64 {
    let k = load.len();
    (0..k)
        .flat_map(|c| (0..k).filter(move |d| *d != c).map(move |d| (c, d)))
        .map(|(c, d)| load[c][d] / net.wide(c, d))
        .fold(0.0, f64::max)
}

/// Every link's seconds, added up.
fn total(net: &Network, load: &[Vec<f64>]) -> f64 {
    let k = load.len();
    (0..k)
        .flat_map(|c| (0..k).filter(move |d| *d != c).map(move |d| (c, d)))
        .map(|(c, d)| load[c][d] / net.wide(c, d))
        .sum()
}

/// The most links from any group to the owner (0 for an empty tree).
fn depth(next: &[u32]) -> usize {
    (0..next.len())
        .map(|mut g| {
            let mut n = 0;
            while (next[g] as usize) != g && n <= next.len() {
                g = next[g] as usize;
                n += 1;
            }
            n
        })
        .max()
        .unwrap_or(0)
}

/// Whether `relay` is a pair of trees over `groups` groups rooted at `owner` (no `down`
/// in a reduce).
pub fn well_formed(relay: &Relay, groups: usize, owner: usize, reduce: bool) -> bool {
    let tree = |next: &[u32]| {
        next.len() == groups
            && next.get(owner) == Some(&(owner as u32))
            && (0..groups).all(|g| {
                let (mut at, mut n) = (g, 0);
                while at != owner {
                    match next.get(at) {
                        Some(x) if (*x as usize) < groups && n < groups => at = *x as usize,
                        _ => return false,
                    }
                    n += 1;
                }
                true
            })
    };
    tree(&relay.up)
        && if reduce {
            relay.down.is_empty()
        } else {
            tree(&relay.down)
        }
}

/// Fills in the wide-area part of `r`, `me`'s route in a chunk of group `owner` that
/// crosses the clusters along `relay`: a gateway takes the partials of the groups below it
/// in the in-tree, sends its combined partial one group up, and passes the result it gets
/// from one group up the out-tree to the groups below (a reduce: the owner's gateway sends
/// the result to the root).
pub(super) fn route(
    plan: &BulkPlan,
    relay: &Relay,
    owner: usize,
    me: NodeId,
    gateway_of: &dyn Fn(usize) -> NodeId,
    r: &mut ChunkRoute,
) {
    let g = r.group;
    let below = |next: &[u32]| -> Vec<NodeId> {
        (0..plan.groups.len())
            .filter(|h| *h != g && next.get(*h).is_some_and(|x| *x as usize == g))
            .map(gateway_of)
            .collect()
    };
    if r.gateway() {
        r.owner = g == owner;
        r.partials_from = below(&relay.up);
        if !r.owner {
            r.partial_to = vec![gateway_of(relay.up[g] as usize)];
        }
        match plan.root {
            Some(root) => {
                if r.owner && me != root {
                    r.result_to = vec![root];
                }
            }
            None => {
                r.result_to = below(&relay.down);
                if !r.owner {
                    r.result_from = Some(gateway_of(relay.down[g] as usize));
                }
            }
        }
    }
    if let Some(root) = plan.root
        && me == root
        && gateway_of(owner) != me
    {
        r.result_from = Some(gateway_of(owner));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::bulk::route::tests::{chain_partials, plan, routes_of, with_inside};
    use crate::proto::bulk::route::{ChunkRoute, chunks};
    use crate::proto::bulk::{Algorithm, Inside, model};
    use std::collections::HashMap;

    /// Relays along chains of groups: up from each group to the next (wrapping) until the
    /// owner, down the other way; none down in a reduce.
    fn chained(mut p: BulkPlan) -> BulkPlan {
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

    /// The simulator's graph of a relayed plan: each transfer waits only for earlier ones
    /// into its sender, and a chunk crosses clusters once per tree link (plus a reduce's
    /// result to a root outside the owner's cluster).
    #[test]
    fn relayed_graphs_cross_each_tree_link_once() {
        let p = plan(Algorithm::Clustered, &[4, 2, 3, 1], None);
        let group_of = |m: u32| p.groups.iter().position(|g| g.contains(&m)).unwrap();
        for root in [None, Some(2usize), Some(9)] {
            let mut q = p.clone();
            q.root = root.map(|r| q.members[r]);
            let q = chained(q);
            let t = crate::proto::bulk::dag::of_bulk(&q);
            for (i, x) in t.iter().enumerate() {
                assert!(x.after.iter().all(|a| *a < i && t[*a].to == x.from), "{i}");
            }
            let crossing = t
                .iter()
                .filter(|x| group_of(x.from) != group_of(x.to))
                .count();
            let per_chunk: usize = chunks(&q)
                .iter()
                .map(|c| match root {
                    None => 2 * 3,
                    Some(r) => 3 + usize::from(group_of(r as u32) != c.share),
                })
                .sum();
            assert_eq!(crossing, per_chunk, "reduce to {root:?}");
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

    /// das-4's four clusters as measured (the file's figures typed here: the model is
    /// arithmetic over whatever was measured).
    fn das4() -> Network {
        let sizes = [16u64, 8, 8, 8];
        let mut next = 0;
        let groups = (sizes.iter())
            .map(|s| {
                let g = (next..next + s).map(|i| NodeId::from_seed(9, i)).collect();
                next += s;
                g
            })
            .collect();
        let wide = [
            [0.0, 5.0, 26.0, 7.0],
            [3.5, 0.0, 4.0, 3.0],
            [28.0, 6.0, 0.0, 7.5],
            [6.0, 4.5, 6.5, 0.0],
        ];
        Network {
            groups,
            wide_bps: (wide.iter())
                .map(|r| r.iter().map(|m| m * 1e6).collect())
                .collect(),
            lan_bps: vec![400e6; 4],
            latency_s: vec![vec![3e-3; 4]; 4],
        }
    }

    #[test]
    fn a_reduce_into_a_poorly_connected_cluster_relays_and_das4_allreduce_does_not() {
        let net = das4();
        let len = 4 << 20;
        let bits = len as f64 * 32.0;
        // Leiden takes 5 + 6 + 4.5 Mbit/s in: no reduce into it can beat that.
        let bound = bits / 15.5e6;
        let leiden = Some(net.groups[1][0]);
        let p = model::predict_to(&net, Algorithm::Clustered, len, 4, leiden);
        assert!(!p.relays.is_empty(), "{p:?}");
        assert_eq!(p.shares[1], len, "Leiden owns every chunk");
        let trees = super::plan(&net, len, p.chunk, 4, Some(1));
        assert!(busiest(&net, &trees.load) < 1.05 * bound);
        // Straight to the owners, the best shares still leave a link far busier: a link
        // c -> d carries d's partials, and c's results when d is the root's cluster.
        let f = model::shares_to(&net, Some(1));
        let straight = (0..4)
            .flat_map(|c| (0..4).filter(move |d| *d != c).map(move |d| (c, d)))
            .map(|(c, d)| {
                let carried = f[d] + if d == 1 { f[c] } else { 0.0 };
                bits * carried / net.wide(c, d)
            })
            .fold(0.0, f64::max);
        assert!(straight > 1.2 * bound, "{straight} against {bound}");
        // An allreduce on das-4 gains too little from trees: straight to the owners.
        let p = model::predict_to(&net, Algorithm::Clustered, len, 4, None);
        assert!(p.relays.is_empty());
        // Two clusters: nothing to relay through.
        let two = Network {
            groups: net.groups[..2].to_vec(),
            wide_bps: vec![vec![0.0, 1e6], vec![1e6, 0.0]],
            lan_bps: vec![400e6; 2],
            latency_s: vec![vec![1e-3; 2]; 2],
        };
        let p = model::predict_to(&two, Algorithm::Clustered, len, 4, Some(net.groups[1][0]));
        assert!(p.relays.is_empty());
    }
}
