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

use super::relay::Relay;
use super::{Algorithm, BulkPlan, Inside};
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
        relayed(plan, relay, chunk.share, me, &gateway_of, &mut r);
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
        relayed(plan, relay, chunk.share, me, &gateway_of, &mut r);
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

/// Fills in the wide-area part of `r`, `me`'s route in a chunk of group `owner` that
/// crosses the clusters along `relay` ([`super::relay`]): a gateway takes the partials of the groups below it
/// in the in-tree, sends its combined partial one group up, and passes the result it gets
/// from one group up the out-tree to the groups below (a reduce: the owner's gateway sends
/// the result to the root).
fn relayed(
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
pub(crate) mod tests;
