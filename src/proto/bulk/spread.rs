//! Allgather of large pieces: every member's piece reaches every other member. Each
//! chunk of each piece travels its own tree of members rooted at the piece's owner, given
//! in the plan as edges, so every algorithm runs on one executor and one check.
//!
//! - [`Algorithm::Relayed`] (ours): each chunk enters every other cluster once, at the
//!   member of that cluster with the least planned so far, over the cluster link that
//!   finishes it soonest given what is already planned: straight from the owner, or from
//!   a cluster the chunk has already reached (greedy widest-path packing over the measured
//!   rates, chunk by chunk, so the pieces of a cluster behind slow links also leave over
//!   the links around them). Inside a cluster the member that has the chunk sends it to
//!   the others: the entry rotates over the members with the load, so each member sends
//!   about one copy of every chunk in all, what a chain would have it send, in one hop
//!   instead of one per member.
//! - [`Algorithm::Direct`]: every owner sends its piece to every member (flat).
//! - [`Algorithm::Hierarchical`] (static, MagPIe style): to the owner's cluster's first
//!   member, from it to every other cluster's first member, and from each first member to
//!   its cluster.
//! - [`Algorithm::Ring`] (Gloo): around a ring of all members in id order, pipelined.
//! - [`Algorithm::Tree`]: whole pieces up a binary tree in id order and back down.

use super::model::{Network, TRANSFER_OVERHEAD_S};
use super::paths::{Direction, Load, chunk_bytes};
use super::{Algorithm, NodeId};
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

/// Plans `algorithm` for pieces of `sizes[m]` bytes of `members[m]` (sorted): the chunk
/// size, the trees and the predicted seconds.
pub fn plan(
    net: &Network,
    algorithm: Algorithm,
    members: &[NodeId],
    sizes: &[u64],
) -> (u64, Vec<Vec<Vec<Edge>>>, f64) {
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
                Algorithm::Relayed => relayed(&load, &groups, &of, m, bits),
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
    (chunk, trees, seconds)
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
/// it has reached, at that cluster's least loaded member; then each cluster's holder
/// sends it to the rest of its cluster.
fn relayed(load: &Load, groups: &[Vec<u32>], of: &[usize], m: u32, bits: f64) -> Vec<Edge> {
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
        edges.extend(members.iter().filter(|j| **j != h).map(|j| (h, *j)));
    }
    edges
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
            let (chunk, trees, seconds) = plan(&net, a, &members, &sizes);
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
        let (_, trees, _) = plan(&net, Algorithm::Relayed, &members, &sizes);
        let relayed_out = trees[2].iter().any(|edges| {
            edges
                .iter()
                .any(|(a, b)| *a != 2 && net_cluster(*a) != net_cluster(*b))
        });
        assert!(relayed_out, "{:?}", trees[2][0]);
    }

    fn net_cluster(i: u32) -> u32 {
        i / 2
    }

    #[test]
    fn shapes_of_the_static_contenders() {
        let (net, members) = das4();
        let sizes = vec![1000; 8];
        let (_, trees, _) = plan(&net, Algorithm::Hierarchical, &members, &sizes);
        // Member 3's piece: to 2 (its cluster's first), then to 0, 4 and 6, each to its mate.
        let mut e = trees[3][0].clone();
        e.sort();
        assert_eq!(
            e,
            vec![(0, 1), (2, 0), (2, 4), (2, 6), (3, 2), (4, 5), (6, 7)]
        );
        let (_, trees, _) = plan(&net, Algorithm::Ring, &members, &sizes);
        assert_eq!(trees[6][0][..2], [(6, 7), (7, 0)]);
        let (chunk, trees, _) = plan(&net, Algorithm::Tree, &members, &sizes);
        assert_eq!(chunk, u64::MAX);
        assert_eq!(trees[4][0][..2], [(4, 1), (1, 0)], "up from 4 first");
    }
}
