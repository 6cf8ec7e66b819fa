//! Scatter and gather of large pieces: the path every chunk of every piece takes, and the
//! predicted completion.
//!
//! A scatter's chunk goes from the root to its destination, a gather's from its source to
//! the root, directly or through other members:
//! - [`Algorithm::Relayed`] (ours): each chunk on the path that finishes it soonest given
//!   what is already planned: directly, or through a member of a third cluster, so a
//!   cluster behind a slow direct link is also fed over the links around it (the max-flow
//!   routes of the bandwidth matrix). Resources are the directed cluster links at their
//!   measured rates and each member's sending and receiving at its cluster's rate.
//! - [`Algorithm::Direct`]: every piece straight between the root and its member (flat).
//! - [`Algorithm::Hierarchical`]: through the first member of the other cluster (static).
//! - [`Algorithm::Tree`]: whole pieces along a binary tree in id order rooted at the root.

use super::Algorithm;
use super::model::{Network, TRANSFER_OVERHEAD_S};
use crate::proto::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Which way the pieces flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Direction {
    /// From the root to every member.
    Scatter,
    /// From every member to the root.
    Gather,
}

/// The chunk size for pieces of `bytes` in all: about a 128th, 16 KiB to 1 MiB.
pub fn chunk_bytes(bytes: u64) -> u64 {
    (bytes / 128).clamp(16 * 1024, 1024 * 1024)
}

/// Paths of every chunk: `paths[m][k]` are the members (indices into `members`) that
/// chunk `k` of member `m`'s piece passes through, in the order it flows.
pub type Paths = Vec<Vec<Vec<u32>>>;

/// Plans `algorithm` for pieces of `sizes[m]` bytes of `members[m]` (sorted) with `root`:
/// the chunk size, the paths and the predicted seconds.
pub fn plan(
    net: &Network,
    direction: Direction,
    algorithm: Algorithm,
    root: NodeId,
    members: &[NodeId],
    sizes: &[u64],
) -> (u64, Paths, f64) {
    let total: u64 = sizes.iter().sum();
    let chunk = match algorithm {
        Algorithm::Tree => u64::MAX,
        _ => chunk_bytes(total),
    };
    let cluster: HashMap<NodeId, usize> = net
        .groups
        .iter()
        .enumerate()
        .flat_map(|(g, ms)| ms.iter().map(move |m| (*m, g)))
        .collect();
    let index: HashMap<NodeId, u32> = (members.iter().enumerate())
        .map(|(i, m)| (*m, i as u32))
        .collect();
    let r = index[&root];
    let of: Vec<usize> = members.iter().map(|m| cluster[m]).collect();
    let mut load = Load::new(net, direction, of);
    let mut paths: Paths = sizes.iter().map(|_| Vec::new()).collect();
    let counts: Vec<u64> = sizes
        .iter()
        .map(|s| s.div_ceil(chunk.min(*s).max(1)))
        .collect();
    let rounds = counts.iter().copied().max().unwrap_or(0);
    // Round robin over the members, so every piece makes progress from the start.
    for k in 0..rounds {
        for (m, &count) in counts.iter().enumerate() {
            if k >= count || m as u32 == r {
                continue;
            }
            let bits = 8.0 * chunk.min(sizes[m] - k * chunk) as f64;
            let inner = match algorithm {
                Algorithm::Tree => tree_hops(members, r, m as u32),
                Algorithm::Hierarchical => {
                    let g = cluster[&members[m]];
                    let first = net.groups[g][0];
                    if g == cluster[&root] || first == members[m] {
                        Vec::new()
                    } else {
                        vec![index[&first]]
                    }
                }
                Algorithm::Relayed => load.best_relay(members, r, m as u32, bits),
                _ => Vec::new(),
            };
            load.add(r, m as u32, &inner, bits);
            paths[m].push(inner);
        }
    }
    // Scatter paths run root -> member, gather paths member -> root.
    if direction == Direction::Gather {
        for p in paths.iter_mut().flatten() {
            p.reverse();
        }
    }
    let chunk_s = if algorithm == Algorithm::Tree {
        0.0
    } else {
        8.0 * chunk as f64 / load.slowest_rate
    };
    let seconds = load.busiest() + load.deepest * (chunk_s + TRANSFER_OVERHEAD_S) + load.latency;
    (chunk, paths, seconds)
}

/// The members between the root and `m` on the binary tree in id order rooted at the root
/// (position 0 is the root, then the others in id order).
fn tree_hops(members: &[NodeId], root: u32, m: u32) -> Vec<u32> {
    let order: Vec<u32> = std::iter::once(root)
        .chain((0..members.len() as u32).filter(|i| *i != root))
        .collect();
    let pos = order.iter().position(|i| *i == m).expect("a member");
    let mut up = Vec::new();
    let mut p = pos;
    while p > 0 {
        p = (p - 1) / 2;
        if p > 0 {
            up.push(order[p]);
        }
    }
    up.reverse();
    up
}

/// Bits planned on each resource (also what an allgather's trees plan on, [`super::spread`]).
pub(super) struct Load<'a> {
    net: &'a Network,
    direction: Direction,
    /// Each member's cluster, by index.
    of: Vec<usize>,
    /// Directed cluster links.
    links: HashMap<(usize, usize), f64>,
    /// Members' sending and receiving.
    out: HashMap<u32, f64>,
    inn: HashMap<u32, f64>,
    pub(super) slowest_rate: f64,
    /// Hops on the longest path planned.
    pub(super) deepest: f64,
    /// The longest path's latency.
    pub(super) latency: f64,
}

impl<'a> Load<'a> {
    pub(super) fn new(net: &'a Network, direction: Direction, of: Vec<usize>) -> Self {
        Load {
            net,
            direction,
            of,
            links: HashMap::new(),
            out: HashMap::new(),
            inn: HashMap::new(),
            slowest_rate: f64::INFINITY,
            deepest: 0.0,
            latency: 0.0,
        }
    }

    /// The hops of a chunk between the root and `m` through `inner`, as they flow.
    fn hops(&self, r: u32, m: u32, inner: &[u32]) -> Vec<(u32, u32)> {
        let mut nodes = vec![r];
        nodes.extend_from_slice(inner);
        nodes.push(m);
        if self.direction == Direction::Gather {
            nodes.reverse();
        }
        nodes.windows(2).map(|w| (w[0], w[1])).collect()
    }

    /// Bits planned through member `i` (sent and received).
    pub(super) fn planned(&self, i: u32) -> f64 {
        self.out.get(&i).unwrap_or(&0.0) + self.inn.get(&i).unwrap_or(&0.0)
    }

    /// When a chunk of `bits` over `inner` would finish, on its busiest resource.
    fn cost(&self, r: u32, m: u32, inner: &[u32], bits: f64) -> f64 {
        (self.hops(r, m, inner).into_iter())
            .map(|(a, b)| self.hop_cost(a, b, bits))
            .fold(0.0, f64::max)
    }

    /// When `bits` more from member `a` to `b` would finish, on the busiest resource.
    pub(super) fn hop_cost(&self, a: u32, b: u32, bits: f64) -> f64 {
        let (ca, cb) = (self.of[a as usize], self.of[b as usize]);
        let mut worst = (self.out.get(&a).unwrap_or(&0.0) + bits) / self.net.lan(ca);
        worst = worst.max((self.inn.get(&b).unwrap_or(&0.0) + bits) / self.net.lan(cb));
        if ca != cb {
            let l = self.links.get(&(ca, cb)).unwrap_or(&0.0);
            worst = worst.max((l + bits) / self.net.wide(ca, cb));
        }
        worst
    }

    /// Plans `bits` from member `a` to `b`; returns the hop's latency.
    pub(super) fn add_hop(&mut self, a: u32, b: u32, bits: f64) -> f64 {
        let (ca, cb) = (self.of[a as usize], self.of[b as usize]);
        *self.out.entry(a).or_default() += bits;
        *self.inn.entry(b).or_default() += bits;
        let rate = if ca != cb {
            *self.links.entry((ca, cb)).or_default() += bits;
            self.net.wide(ca, cb)
        } else {
            self.net.lan(ca)
        };
        self.slowest_rate = self.slowest_rate.min(rate);
        self.net.latency(ca, cb)
    }

    /// The direct path or the relay through another cluster that finishes soonest.
    fn best_relay(&self, members: &[NodeId], r: u32, m: u32, bits: f64) -> Vec<u32> {
        let (cr, cm) = (self.of[r as usize], self.of[m as usize]);
        let mut best = (self.cost(r, m, &[], bits), Vec::new());
        if cr == cm {
            return best.1;
        }
        for (g, group) in self.net.groups.iter().enumerate() {
            if g == cr || g == cm {
                continue;
            }
            // The member of that cluster with the least planned so far.
            let relay = group
                .iter()
                .filter_map(|id| members.binary_search(id).ok().map(|i| i as u32))
                .min_by(|a, b| self.planned(*a).total_cmp(&self.planned(*b)));
            if let Some(x) = relay {
                let c = self.cost(r, m, &[x], bits);
                if c < best.0 {
                    best = (c, vec![x]);
                }
            }
        }
        best.1
    }

    fn add(&mut self, r: u32, m: u32, inner: &[u32], bits: f64) {
        let hops = self.hops(r, m, inner);
        self.deepest = self.deepest.max(hops.len() as f64);
        let latency: f64 = hops
            .into_iter()
            .map(|(a, b)| self.add_hop(a, b, bits))
            .sum();
        self.latency = self.latency.max(latency);
    }

    /// The busiest resource's planned bits over its rate.
    pub(super) fn busiest(&self) -> f64 {
        let nic = (self.out.iter().chain(self.inn.iter()))
            .map(|(i, b)| b / self.net.lan(self.of[*i as usize]))
            .fold(0.0, f64::max);
        let links = (self.links.iter())
            .map(|((a, b), bits)| bits / self.net.wide(*a, *b))
            .fold(0.0, f64::max);
        nic.max(links)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// das-4's clusters, two members each, with the file's rates as measured figures.
    pub(crate) fn das4() -> (Network, Vec<NodeId>) {
        let mut members: Vec<NodeId> = (0..8).map(|i| NodeId::from_seed(4, i)).collect();
        members.sort();
        let groups: Vec<Vec<NodeId>> = members.chunks(2).map(<[NodeId]>::to_vec).collect();
        let wide = [
            [0.0, 5.0, 26.0, 7.0],
            [3.5, 0.0, 4.0, 3.0],
            [28.0, 6.0, 0.0, 7.5],
            [7.0, 4.0, 7.5, 0.0],
        ];
        let net = Network {
            groups,
            wide_bps: wide
                .iter()
                .map(|r| r.iter().map(|m| m * 1e6).collect())
                .collect(),
            lan_bps: vec![400e6; 4],
            latency_s: vec![vec![3e-3; 4]; 4],
        };
        (net, members)
    }

    #[test]
    fn relayed_paths_beat_direct_ones_into_and_out_of_a_slow_cluster() {
        let (net, members) = das4();
        let root = members[0];
        let sizes = vec![2 << 20; 8];
        for direction in [Direction::Scatter, Direction::Gather] {
            let t = |a| plan(&net, direction, a, root, &members, &sizes).2;
            let relayed = t(Algorithm::Relayed);
            assert!(relayed < 0.8 * t(Algorithm::Direct), "{direction:?}");
            assert!(relayed < t(Algorithm::Hierarchical), "{direction:?}");
            assert!(relayed < t(Algorithm::Tree), "{direction:?}");
        }
        let (_, paths, _) = plan(
            &net,
            Direction::Scatter,
            Algorithm::Relayed,
            root,
            &members,
            &sizes,
        );
        // Leiden (members 2, 3) is fed through other clusters too.
        assert!(paths[2].iter().any(|p| !p.is_empty()), "{:?}", paths[2]);
        assert!(paths[0].is_empty(), "the root's own piece does not travel");
    }

    #[test]
    fn tree_and_hierarchical_paths_follow_their_shapes() {
        let (net, members) = das4();
        let root = members[0];
        let sizes = vec![1000; 8];
        let (_, paths, _) = plan(
            &net,
            Direction::Scatter,
            Algorithm::Tree,
            root,
            &members,
            &sizes,
        );
        // Order: root, then 1..7; member 7 sits at position 7, its parent 3, then 1.
        assert_eq!(paths[7], vec![vec![1, 3]]);
        assert_eq!(paths[1], vec![Vec::<u32>::new()]);
        let (_, paths, _) = plan(
            &net,
            Direction::Gather,
            Algorithm::Hierarchical,
            root,
            &members,
            &sizes,
        );
        assert_eq!(
            paths[5],
            vec![vec![4]],
            "through its cluster's first member"
        );
        assert_eq!(paths[4], vec![Vec::<u32>::new()]);
        assert_eq!(
            paths[1],
            vec![Vec::<u32>::new()],
            "the root's cluster goes direct"
        );
    }
}
