//! Allgather of large pieces: every member's piece reaches every other member. Each
//! chunk of each piece travels its own tree of members rooted at the piece's owner, given
//! in the plan as edges, so every algorithm runs on one executor and one check.
//!
//! - [`Algorithm::Relayed`] (ours): each chunk enters every other cluster once, at the
//!   member of that cluster with the least planned so far, over the cluster link that
//!   finishes it soonest given what is already planned: straight from the owner, or from
//!   a cluster the chunk has already reached (greedy widest-path packing over the measured
//!   rates, chunk by chunk, so the pieces of a cluster behind slow links also leave over
//!   the links around them). Inside each cluster the chunk flows from its entry in the
//!   pattern the model predicts soonest for that cluster ([`Inside`]): a star (the entry
//!   sends it to every other member; entries rotate with the load, so each member sends
//!   about one copy of every chunk in all, in one hop), a binomial tree rooted at the entry
//!   (`ceil(log2 m)` hops; wins when a cluster has few chunks to spread, so a star could
//!   not balance its senders), or a chain from the entry (`m - 1` hops). Ties go to the
//!   star.
//! - [`Algorithm::Direct`]: every owner sends its piece to every member (flat).
//! - [`Algorithm::Hierarchical`] (static, MagPIe style): to the owner's cluster's first
//!   member, from it to every other cluster's first member, and from each first member to
//!   its cluster.
//! - [`Algorithm::Ring`] (Gloo): around a ring of all members in id order, pipelined.
//! - [`Algorithm::Tree`]: whole pieces up a binary tree in id order and back down.

use super::model::{Network, TRANSFER_OVERHEAD_S};
use super::paths::{Direction, Load, chunk_bytes};
use super::{Algorithm, Inside, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One edge of a chunk's tree: (from, to) as indices into the plan's members.
pub type Edge = (u32, u32);

/// What every participant of one allgather attempt follows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpreadPlan {
    /// As in [`super::BulkPlan::attempt`].
    pub attempt: u32,
    /// How the chunks travel.
    pub algorithm: Algorithm,
    /// The participants, in id order.
    pub members: Vec<NodeId>,
    /// As in [`super::BulkPlan::missing`].
    pub missing: Vec<NodeId>,
    /// Bytes of each member's piece.
    pub sizes: Vec<u64>,
    /// Bytes per chunk (a piece smaller than that is one chunk).
    pub chunk: u64,
    /// `trees[m][k]`: the edges chunk `k` of member `m`'s piece travels, a tree rooted at
    /// `m` that reaches every other member.
    pub trees: Vec<Vec<Vec<Edge>>>,
    /// What the model predicted, in seconds.
    pub predicted_s: f64,
    /// How chunks flow inside each of the planner's clusters (ours: the model's pick per
    /// cluster; empty: the algorithm's fixed shape). The edges of `trees` already say it
    /// all: this is what the decision table shows.
    pub inside: Vec<Inside>,
}

impl SpreadPlan {
    /// The chunks of member `m`'s piece: (number in tags, first byte, bytes).
    pub fn chunks(&self, m: usize) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        let first: u64 = self.trees[..m].iter().map(|p| p.len() as u64).sum();
        let size = self.sizes[m];
        let step = self.chunk.min(size).max(1);
        (0..self.trees[m].len() as u64).map(move |k| {
            let at = k * step;
            ((first + k) as u32, at, step.min(size - at))
        })
    }
}

/// An allgather planned on the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    /// Bytes per chunk.
    pub chunk: u64,
    /// As in [`SpreadPlan::trees`].
    pub trees: Vec<Vec<Vec<Edge>>>,
    /// As in [`SpreadPlan::inside`].
    pub inside: Vec<Inside>,
    /// Predicted seconds.
    pub seconds: f64,
}

/// Plans `algorithm` for pieces of `sizes[m]` bytes of `members[m]` (sorted). Ours tries,
/// cluster by cluster, the patterns inside ([`Inside`]) and keeps one only when the model
/// predicts the whole allgather sooner with it.
pub fn plan(net: &Network, algorithm: Algorithm, members: &[NodeId], sizes: &[u64]) -> Planned {
    if algorithm != Algorithm::Relayed {
        return plan_with(net, algorithm, members, sizes, &[]);
    }
    let k = net.groups.len();
    let mut best = plan_with(net, algorithm, members, sizes, &vec![Inside::Star; k]);
    for c in 0..k {
        // Below three members every pattern is the same one edge.
        let here = (net.groups[c].iter())
            .filter(|m| members.binary_search(m).is_ok())
            .count();
        if here < 3 {
            continue;
        }
        for alternative in [Inside::Binomial, Inside::Chain] {
            let mut inside = best.inside.clone();
            inside[c] = alternative;
            let tried = plan_with(net, algorithm, members, sizes, &inside);
            if tried.seconds < best.seconds {
                best = tried;
            }
        }
    }
    best
}

/// [`plan`] with the patterns inside fixed (`inside[c]` for cluster `c`; ours only).
pub fn plan_with(
    net: &Network,
    algorithm: Algorithm,
    members: &[NodeId],
    sizes: &[u64],
    inside: &[Inside],
) -> Planned {
    let total: u64 = sizes.iter().sum();
    let chunk = match algorithm {
        Algorithm::Tree => u64::MAX,
        _ => chunk_bytes(total),
    };
    let cluster: HashMap<NodeId, usize> = (net.groups.iter().enumerate())
        .flat_map(|(g, ms)| ms.iter().map(move |m| (*m, g)))
        .collect();
    let of: Vec<usize> = members.iter().map(|m| cluster[m]).collect();
    // Each cluster's members as indices, in id order.
    let mut groups: Vec<Vec<u32>> = vec![Vec::new(); net.groups.len()];
    for (i, g) in of.iter().enumerate() {
        groups[*g].push(i as u32);
    }
    let mut load = Load::new(net, Direction::Scatter, of.clone());
    let mut trees: Vec<Vec<Vec<Edge>>> = sizes.iter().map(|_| Vec::new()).collect();
    let counts: Vec<u64> = (sizes.iter())
        .map(|s| s.div_ceil(chunk.min(*s).max(1)))
        .collect();
    let rounds = counts.iter().copied().max().unwrap_or(0);
    let n = members.len() as u32;
    // Round robin over the members, so every piece makes progress from the start.
    for k in 0..rounds {
        for (m, &count) in counts.iter().enumerate() {
            if k >= count {
                continue;
            }
            let bits = 8.0 * chunk.min(sizes[m] - k * chunk) as f64;
            let m = m as u32;
            let edges = match algorithm {
                Algorithm::Relayed => relayed(&load, &groups, &of, inside, m, bits),
                Algorithm::Hierarchical => hierarchical(&groups, &of, m),
                Algorithm::Ring => (0..n - 1).map(|s| ((m + s) % n, (m + s + 1) % n)).collect(),
                Algorithm::Tree => tree(n, m),
                _ => (0..n).filter(|j| *j != m).map(|j| (m, j)).collect(),
            };
            let (depth, latency) = reach(&edges, m, net, &of);
            for (a, b) in &edges {
                load.add_hop(*a, *b, bits);
            }
            load.deepest = load.deepest.max(depth);
            load.latency = load.latency.max(latency);
            trees[m as usize].push(edges);
        }
    }
    let chunk_s = if algorithm == Algorithm::Tree || load.slowest_rate.is_infinite() {
        0.0
    } else {
        8.0 * chunk as f64 / load.slowest_rate
    };
    let seconds = load.busiest() + load.deepest * (chunk_s + TRANSFER_OVERHEAD_S) + load.latency;
    Planned {
        chunk,
        trees,
        inside: inside.to_vec(),
        seconds,
    }
}

/// The tree's depth in hops and its longest path's latency.
fn reach(edges: &[Edge], root: u32, net: &Network, of: &[usize]) -> (f64, f64) {
    let parent: HashMap<u32, u32> = edges.iter().map(|(a, b)| (*b, *a)).collect();
    let mut worst = (0.0f64, 0.0f64);
    for (_, b) in edges {
        let (mut at, mut hops, mut latency) = (*b, 0.0, 0.0);
        while at != root {
            let Some(p) = parent.get(&at) else { break };
            latency += net.latency(of[*p as usize], of[at as usize]);
            hops += 1.0;
            at = *p;
        }
        worst = (worst.0.max(hops), worst.1.max(latency));
    }
    worst
}

/// Ours: the chunk enters every other cluster once, over the cheapest link from a cluster
/// it has reached, at that cluster's least loaded member; then it flows from each
/// cluster's holder to the rest of its cluster in that cluster's pattern.
fn relayed(
    load: &Load,
    groups: &[Vec<u32>],
    of: &[usize],
    inside: &[Inside],
    m: u32,
    bits: f64,
) -> Vec<Edge> {
    let home = of[m as usize];
    // The member holding the chunk in each cluster reached so far.
    let mut holder: Vec<Option<u32>> = vec![None; groups.len()];
    holder[home] = Some(m);
    let mut edges = Vec::new();
    // Bits each member is planned to send more for this chunk (a relay sends it twice).
    let mut extra: HashMap<u32, f64> = HashMap::new();
    loop {
        let mut best: Option<(f64, u32, u32, usize)> = None;
        for (d, members) in groups.iter().enumerate() {
            if holder[d].is_some() || members.is_empty() {
                continue;
            }
            let entry = *members
                .iter()
                .min_by(|a, b| load.planned(**a).total_cmp(&load.planned(**b)))
                .expect("not empty");
            // The owner first: a relay replaces it only when strictly better.
            let sources =
                std::iter::once(m).chain(holder.iter().flatten().copied().filter(|h| *h != m));
            for x in sources {
                let more = extra.get(&x).copied().unwrap_or(0.0);
                let cost = load.hop_cost(x, entry, bits + more);
                if best.is_none_or(|b| cost < b.0) {
                    best = Some((cost, x, entry, d));
                }
            }
        }
        let Some((_, x, entry, d)) = best else { break };
        holder[d] = Some(entry);
        *extra.entry(x).or_default() += bits;
        edges.push((x, entry));
    }
    for (d, members) in groups.iter().enumerate() {
        let Some(h) = holder[d] else { continue };
        let pattern = inside.get(d).copied().unwrap_or(Inside::Star);
        edges.extend(inside_edges(pattern, h, members));
    }
    edges
}

/// The edges that take a chunk from `holder` to the rest of `members` (in id order) in
/// `pattern`, each sender listed before it sends. Chains and trees run over the members
/// from the holder on, wrapping around, so rotating holders rotate the senders too.
fn inside_edges(pattern: Inside, holder: u32, members: &[u32]) -> Vec<Edge> {
    let at = members.iter().position(|j| *j == holder).unwrap_or(0);
    let order: Vec<u32> = members[at..]
        .iter()
        .chain(&members[..at])
        .copied()
        .collect();
    let parent = |i: usize| match pattern {
        Inside::Star => 0,
        Inside::Chain => i - 1,
        // Position i's highest bit cleared: round r sends from 0..2^r to 2^r..2^(r+1).
        Inside::Binomial => i & !(1 << i.ilog2()),
    };
    (1..order.len())
        .map(|i| (order[parent(i)], order[i]))
        .collect()
}

/// Static: the owner's cluster's first member, every other cluster's first member, each
/// to its cluster.
fn hierarchical(groups: &[Vec<u32>], of: &[usize], m: u32) -> Vec<Edge> {
    let home = of[m as usize];
    let coord = |g: usize| groups[g][0];
    let mut edges = Vec::new();
    if coord(home) != m {
        edges.push((m, coord(home)));
    }
    for (g, members) in groups.iter().enumerate() {
        if members.is_empty() {
            continue;
        }
        if g != home {
            edges.push((coord(home), coord(g)));
        }
        let from = coord(g);
        edges.extend(
            (members.iter())
                .filter(|j| **j != from && **j != m)
                .map(|j| (from, *j)),
        );
    }
    edges
}

/// The binary tree in id order (0 at the top): up from `m` to the top, then down every
/// edge not on that path.
fn tree(n: u32, m: u32) -> Vec<Edge> {
    let mut up = Vec::new();
    let mut at = m;
    while at > 0 {
        let p = (at - 1) / 2;
        up.push((at, p));
        at = p;
    }
    let on_path = |c: u32| up.iter().any(|(a, _)| *a == c);
    let mut edges = up.clone();
    for c in 1..n {
        if c != m && !on_path(c) {
            edges.push(((c - 1) / 2, c));
        }
    }
    edges
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::bulk::paths::tests::das4;

    /// Every chunk's edges form a tree rooted at its owner that reaches every member once.
    fn spanning(plan_trees: &[Vec<Vec<Edge>>], n: usize) {
        for (m, chunks) in plan_trees.iter().enumerate() {
            for edges in chunks {
                let mut has = vec![false; n];
                has[m] = true;
                // Edges are listed so that a sender always has the chunk already.
                for (a, b) in edges {
                    assert!(has[*a as usize], "piece {m}: {a} sends before it has");
                    assert!(!has[*b as usize], "piece {m}: {b} gets it twice");
                    has[*b as usize] = true;
                }
                assert!(has.iter().all(|h| *h), "piece {m} reached everyone");
            }
        }
    }

    #[test]
    fn every_algorithm_spans_every_member_and_relayed_beats_the_others() {
        let (net, members) = das4();
        let sizes: Vec<u64> = (0..8).map(|i| if i == 5 { 0 } else { 2 << 20 }).collect();
        let mut t = HashMap::new();
        for a in Algorithm::ALLGATHER {
            let Planned {
                chunk,
                trees,
                seconds,
                ..
            } = plan(&net, a, &members, &sizes);
            spanning(&trees, members.len());
            assert!(trees[5].is_empty(), "an empty piece has no chunks");
            let want = (2u64 << 20).div_ceil(chunk.min(2 << 20));
            assert_eq!(trees[0].len() as u64, want, "{a:?}");
            t.insert(a, seconds);
        }
        let relayed = t[&Algorithm::Relayed];
        for a in [Algorithm::Direct, Algorithm::Hierarchical, Algorithm::Ring] {
            assert!(relayed < t[&a], "{t:?}");
        }
        // Leiden (members 2, 3) sends slowly: some of its chunks leave through a relay.
        let trees = plan_trees(&net, Algorithm::Relayed, &members, &sizes);
        let relayed_out = trees[2].iter().any(|edges| {
            edges
                .iter()
                .any(|(a, b)| *a != 2 && net_cluster(*a) != net_cluster(*b))
        });
        assert!(relayed_out, "{:?}", trees[2][0]);
    }

    fn plan_trees(
        net: &Network,
        a: Algorithm,
        members: &[NodeId],
        sizes: &[u64],
    ) -> Vec<Vec<Vec<Edge>>> {
        plan(net, a, members, sizes).trees
    }

    fn net_cluster(i: u32) -> u32 {
        i / 2
    }

    /// Two clusters, 16 members and 2, joined by a fast link; a slow LAN in the large one.
    fn slow_lan() -> (Network, Vec<NodeId>) {
        let mut members: Vec<NodeId> = (0..18).map(|i| NodeId::from_seed(5, i)).collect();
        members.sort();
        let groups = vec![members[..16].to_vec(), members[16..].to_vec()];
        let net = Network {
            groups,
            wide_bps: vec![vec![0.0, 1e9], vec![1e9, 0.0]],
            lan_bps: vec![50e6, 1e9],
            latency_s: vec![vec![1e-4, 2e-3], vec![2e-3, 1e-4]],
        };
        (net, members)
    }

    #[test]
    fn the_pattern_inside_a_cluster_is_the_models_pick_and_every_one_spans() {
        let (net, members) = slow_lan();
        // One small piece, from the small cluster: the large one has a single chunk to
        // spread, which a star could not share among its senders.
        let mut sizes = vec![0; 18];
        sizes[17] = 64 << 10;
        let one = plan(&net, Algorithm::Relayed, &members, &sizes);
        assert_eq!(one.inside[0], Inside::Binomial, "{:?}", one.inside);
        assert_eq!(
            one.inside[1],
            Inside::Star,
            "two members: nothing to choose"
        );
        spanning(&one.trees, 18);
        // Everyone's piece, many chunks: the star balances and takes one hop.
        let many = plan(&net, Algorithm::Relayed, &members, &[1 << 20; 18]);
        assert_eq!(many.inside[0], Inside::Star, "{:?}", many.inside);
        // Forced patterns span too, and the pick is never predicted slower than them.
        for pattern in [Inside::Star, Inside::Chain, Inside::Binomial] {
            let forced = plan_with(&net, Algorithm::Relayed, &members, &sizes, &[pattern; 2]);
            spanning(&forced.trees, 18);
            assert!(one.seconds <= forced.seconds, "{pattern:?}");
        }
        let holder = 5;
        let cluster: Vec<u32> = (0..16).collect();
        let chain = inside_edges(Inside::Chain, holder, &cluster);
        assert_eq!(chain[..2], [(5, 6), (6, 7)], "from the holder on");
        assert_eq!(chain.last(), Some(&(3, 4)), "wrapping around");
        let tree = inside_edges(Inside::Binomial, holder, &cluster);
        assert_eq!(tree[..3], [(5, 6), (5, 7), (6, 8)], "round by round");
        assert_eq!(tree.iter().filter(|(a, _)| *a == holder).count(), 4);
    }

    #[test]
    fn shapes_of_the_static_contenders() {
        let (net, members) = das4();
        let sizes = vec![1000; 8];
        let trees = plan_trees(&net, Algorithm::Hierarchical, &members, &sizes);
        // Member 3's piece: to 2 (its cluster's first), then to 0, 4 and 6, each to its mate.
        let mut e = trees[3][0].clone();
        e.sort();
        assert_eq!(
            e,
            vec![(0, 1), (2, 0), (2, 4), (2, 6), (3, 2), (4, 5), (6, 7)]
        );
        let trees = plan_trees(&net, Algorithm::Ring, &members, &sizes);
        assert_eq!(trees[6][0][..2], [(6, 7), (7, 0)]);
        let Planned { chunk, trees, .. } = plan(&net, Algorithm::Tree, &members, &sizes);
        assert_eq!(chunk, u64::MAX);
        assert_eq!(trees[4][0][..2], [(4, 1), (1, 0)], "up from 4 first");
    }
}
