//! What one participant sends and receives, derived from the plan alone.
//!
//! Clustered and hierarchical plans cut the vector into chunks; for each chunk every
//! cluster has a *gateway* (the member that talks across clusters for it) and the
//! clusters that *own* it (combine every cluster's partial). Inside a cluster a chunk's
//! partial sum runs along a chain that ends at the gateway, and the result runs back
//! along a chain that starts there. A non-owner's gateway sends its partial to every
//! owner and gets the result from one; an owner's gateway gets every other cluster's
//! partial and sends the result to the non-owners it serves.
//!
//! Inside a cluster the chunk follows the plan's [`Inside`] pattern for that cluster: a
//! chain (one member after the other), or a binomial tree rooted at the gateway (a member
//! combines its children's partials with its own, in their order, and passes the result
//! down to them).
//! - [`Algorithm::Clustered`]: one owner per chunk (the cluster whose share holds it), the
//!   gateway rotates over a cluster's members by owner, so a cluster's wide-area traffic
//!   leaves from several machines.
//! - [`Algorithm::Hierarchical`]: every cluster owns every chunk, the gateway is always
//!   the cluster's first member.
//!
//! - A clustered plan with relays ([`BulkPlan::relays`], [`super::relay`]): the gateway
//!   rotates by chunk; each gateway takes the partials of the clusters below it in the
//!   chunk's in-tree, combines them with its own and sends one partial a cluster up; the
//!   result comes from one cluster up the out-tree and goes to the clusters below.
//!
//! A reduce to a root ([`BulkPlan::root`]) is the first half: the chains reduce, the
//! gateways send their partials to the owners, and each owner sends the chunk's result
//! straight to the root; nothing comes back. Its hierarchical plan has one owner, the
//! root's cluster, whose gateway is the root.

use super::{Algorithm, BulkPlan, Inside, relay};
use crate::proto::NodeId;

/// A run of elements moved and combined as one unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Its number (in tags).
    pub index: u32,
    /// First element.
    pub start: u64,
    /// Elements.
    pub len: u64,
    /// The group whose share holds it.
    pub share: usize,
}

/// The chunks of a clustered or hierarchical plan, share by share.
pub fn chunks(plan: &BulkPlan) -> Vec<Chunk> {
    let step = plan.chunk.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    let shares: Vec<u64> = match plan.algorithm {
        Algorithm::Clustered => plan.shares.clone(),
        _ => vec![plan.len],
    };
    for (share, &len) in shares.iter().enumerate() {
        let end = start + len;
        let mut at = start;
        while at < end {
            let n = step.min(end - at);
            out.push(Chunk {
                index: out.len() as u32,
                start: at,
                len: n,
                share,
            });
            at += n;
        }
        start = end;
    }
    out
}

/// One participant's part in one chunk (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkRoute {
    /// This node's group (partials are combined in group order).
    pub group: usize,
    /// Where partial sums come from inside the cluster, combined in this order after
    /// this node's own (none: this node starts it).
    pub reduce_from: Vec<NodeId>,
    /// Where it goes next (none: this node is the gateway).
    pub reduce_to: Option<NodeId>,
    /// Gateways whose cluster partials this node combines (it owns the chunk).
    pub partials_from: Vec<NodeId>,
    /// Owners this gateway sends its cluster's partial to.
    pub partial_to: Vec<NodeId>,
    /// The owner this gateway gets the result from (none: it computes it).
    pub result_from: Option<NodeId>,
    /// Gateways this owner sends the result to.
    pub result_to: Vec<NodeId>,
    /// Where the result comes from along the chain (none: this node is the gateway).
    pub gather_from: Option<NodeId>,
    /// Where it goes next (none: this node ends it).
    pub gather_to: Vec<NodeId>,
    /// Whether this node combines the clusters' partials of the chunk.
    pub owner: bool,
}

impl ChunkRoute {
    /// Whether this node is its cluster's gateway for the chunk.
    pub fn gateway(&self) -> bool {
        self.reduce_to.is_none()
    }
}

/// The gateway of group `g` for `chunk`, as a position in the group: rotating by share
/// (clustered), by chunk (relayed clustered: a share may be the whole vector), or the
/// root or first member (hierarchical).
fn gateway_at(plan: &BulkPlan, g: usize, chunk: &Chunk) -> usize {
    match plan.algorithm {
        Algorithm::Clustered if plan.relays.is_empty() => chunk.share % plan.groups[g].len(),
        Algorithm::Clustered => chunk.index as usize % plan.groups[g].len(),
        _ => root_at(plan, g).unwrap_or(0),
    }
}

/// The root's position in group `g`, if it is there.
fn root_at(plan: &BulkPlan, g: usize) -> Option<usize> {
    let root = plan.root?;
    plan.groups[g]
        .iter()
        .position(|i| plan.members.get(*i as usize) == Some(&root))
}

fn member(plan: &BulkPlan, g: usize, pos: usize) -> NodeId {
    let group = &plan.groups[g];
    plan.members[group[pos % group.len()] as usize]
}

/// The groups that own a chunk of share `share`.
fn owners(plan: &BulkPlan, share: usize) -> Vec<usize> {
    match plan.algorithm {
        Algorithm::Clustered => vec![share],
        _ => match (0..plan.groups.len()).find(|g| root_at(plan, *g).is_some()) {
            Some(r) => vec![r],
            None => (0..plan.groups.len()).collect(),
        },
    }
}

/// `me`'s part in `chunk`; `None` if `me` is not a participant.
pub fn chunk_route(plan: &BulkPlan, me: NodeId, chunk: &Chunk) -> Option<ChunkRoute> {
    let index = plan.members.iter().position(|m| *m == me)? as u32;
    let g = plan.groups.iter().position(|grp| grp.contains(&index))?;
    let k = plan.groups[g].len();
    let pos = plan.groups[g].iter().position(|i| *i == index)?;
    let gate = gateway_at(plan, g, chunk);
    let mut r = ChunkRoute {
        group: g,
        ..ChunkRoute::default()
    };
    // Position from the gateway (0) on.
    let down = (pos + k - gate) % k;
    let at = |d: usize| member(plan, g, gate + d);
    let binomial = plan.inside(g) == Inside::Binomial;
    if binomial {
        // Parent: the position with its lowest set bit cleared; children: the position
        // plus each power of two below its lowest set bit (any, for the gateway).
        let low = if down == 0 {
            k.next_power_of_two()
        } else {
            1 << down.trailing_zeros()
        };
        let children: Vec<NodeId> = (0..usize::BITS)
            .map(|j| 1usize << j)
            .take_while(|b| *b < low)
            .filter(|b| down + b < k)
            .map(|b| at(down + b))
            .collect();
        r.reduce_from = children;
        if down > 0 {
            r.reduce_to = Some(at(down & (down - 1)));
        }
    } else {
        // Position along the reduce chain: gate+1, ..., gate+k-1, gate.
        let along = (pos + k - gate - 1) % k;
        if along > 0 {
            r.reduce_from = vec![member(plan, g, pos + k - 1)];
        }
        if along + 1 < k {
            r.reduce_to = Some(member(plan, g, pos + 1));
        }
    }
    let owners = owners(plan, chunk.share);
    let gateway_of = |h: usize| member(plan, h, gateway_at(plan, h, chunk));
    let relay = match plan.algorithm {
        Algorithm::Clustered => plan.relays.get(chunk.index as usize),
        _ => None,
    };
    if let (Some(relay), Some(_)) = (relay, plan.root) {
        relay::route(plan, relay, chunk.share, me, &gateway_of, &mut r);
        return Some(r);
    }
    if let Some(root) = plan.root {
        // A reduce: partials to the owner, its result to the root, nothing back.
        let owner = gateway_of(owners[0]);
        if r.gateway() {
            r.owner = owners.contains(&g);
            if r.owner {
                r.partials_from = (0..plan.groups.len())
                    .filter(|h| *h != g)
                    .map(gateway_of)
                    .collect();
                r.result_to = (me != root).then_some(root).into_iter().collect();
            } else {
                r.partial_to = owners.iter().map(|o| gateway_of(*o)).collect();
            }
        }
        if me == root && owner != me {
            r.result_from = Some(owner);
        }
        return Some(r);
    }
    if binomial {
        // The same tree the other way.
        r.gather_from = r.reduce_to;
        r.gather_to = r.reduce_from.clone();
    } else {
        // Position along the gather chain: gate, gate+1, ..., gate+k-1.
        if down > 0 {
            r.gather_from = Some(member(plan, g, pos + k - 1));
        }
        if down + 1 < k {
            r.gather_to = vec![member(plan, g, pos + 1)];
        }
    }
    if !r.gateway() {
        return Some(r);
    }
    if let Some(relay) = relay {
        relay::route(plan, relay, chunk.share, me, &gateway_of, &mut r);
        return Some(r);
    }
    // A non-owner is served by the owner its index picks (one owner: that one).
    let server = |h: usize| owners[h % owners.len()];
    let groups = plan.groups.len();
    if owners.contains(&g) {
        r.owner = true;
        r.partials_from = (0..groups).filter(|h| *h != g).map(gateway_of).collect();
        r.partial_to = owners
            .iter()
            .filter(|o| **o != g)
            .map(|o| gateway_of(*o))
            .collect();
        r.result_to = (0..groups)
            .filter(|h| !owners.contains(h) && server(*h) == g)
            .map(gateway_of)
            .collect();
    } else {
        r.partial_to = owners.iter().map(|o| gateway_of(*o)).collect();
        r.result_from = Some(gateway_of(server(g)));
    }
    Some(r)
}

/// The ring of a [`Algorithm::Ring`] plan: `me`'s position, predecessor and successor.
pub fn ring(plan: &BulkPlan, me: NodeId) -> Option<(usize, NodeId, NodeId)> {
    let n = plan.members.len();
    let i = plan.members.iter().position(|m| *m == me)?;
    Some((i, plan.members[(i + n - 1) % n], plan.members[(i + 1) % n]))
}

/// Segment `s` of `n` of a vector of `len` elements: (first element, elements).
pub fn segment(len: u64, n: usize, s: usize) -> (u64, u64) {
    let n = n as u64;
    let s = s as u64;
    let a = len * s / n;
    let b = len * (s + 1) / n;
    (a, b - a)
}

/// `me`'s parent and children in a [`Algorithm::Tree`] plan (binary, in id order; a
/// reduce's rooted at its root, the others after it in id order).
pub fn tree(plan: &BulkPlan, me: NodeId) -> Option<(Option<NodeId>, Vec<NodeId>)> {
    let mut order = plan.members.clone();
    if let Some(p) = plan.root.and_then(|r| order.iter().position(|m| *m == r)) {
        let root = order.remove(p);
        order.insert(0, root);
    }
    let n = order.len();
    let i = order.iter().position(|m| *m == me)?;
    let parent = (i > 0).then(|| order[(i - 1) / 2]);
    let children = [2 * i + 1, 2 * i + 2]
        .into_iter()
        .filter(|c| *c < n)
        .map(|c| order[c])
        .collect();
    Some((parent, children))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
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
}
