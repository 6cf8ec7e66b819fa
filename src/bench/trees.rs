//! Broadcast trees to compare against, and the cost model every contender is timed with.
//!
//! The model: a node that has handled a message at time `t` sends to its children one after
//! the other, in the tree's order; the `k`-th send leaves at
//! `t + k * cpu_send + (bytes of the k sends) / bandwidth`, arrives one link latency later,
//! and is handled `cpu_recv` after that. It is the simulator's model (which has no
//! bandwidth) plus serialization at the sender's link, so the live trees measured in the
//! simulator and the static trees computed here are timed alike.

use crate::topology::Topology;
use std::time::Duration;

/// A broadcast tree over nodes `0..n`: each node's children, in sending order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    /// The root.
    pub root: usize,
    /// Children of every node, first sent first.
    pub children: Vec<Vec<usize>>,
}

/// Per-message costs of the model.
#[derive(Clone, Copy, Debug)]
pub struct CostModel {
    /// CPU time per message sent.
    pub cpu_send: Duration,
    /// CPU time per message received.
    pub cpu_recv: Duration,
    /// Message size in bytes (serialized at the link's bandwidth).
    pub bytes: usize,
}

/// Node `i`'s cluster, for every node of the topology (the simulator's numbering: the
/// initial nodes cluster by cluster).
pub fn clusters_of(topo: &Topology) -> Vec<usize> {
    topo.node_clusters()
}

/// When every node has the message, under `model`, for `tree` (µs from the root's start;
/// `None` for nodes the tree does not reach).
pub fn completion_times(tree: &Tree, topo: &Topology, model: CostModel) -> Vec<Option<f64>> {
    let cl = clusters_of(topo);
    let mut t = vec![None; tree.children.len()];
    t[tree.root] = Some(0.0);
    let mut stack = vec![tree.root];
    while let Some(u) = stack.pop() {
        let tu = t[u].expect("set before pushed");
        let mut cursor = tu;
        for &c in &tree.children[u] {
            let bw = topo.bandwidth_mbit(cl[u], cl[c]).unwrap_or(f64::INFINITY);
            cursor += model.cpu_send.as_secs_f64() * 1e6 + model.bytes as f64 * 8.0 / bw;
            let arrive = cursor + topo.latency(cl[u], cl[c]).as_secs_f64() * 1e6;
            t[c] = Some(arrive + model.cpu_recv.as_secs_f64() * 1e6);
            stack.push(c);
        }
    }
    t
}

/// The lower bound: the shortest one-way latency path from `root` to every node (µs),
/// with no CPU or serialization cost.
pub fn lower_bound(root: usize, topo: &Topology) -> Vec<f64> {
    let cl = clusters_of(topo);
    let k = topo.clusters.len();
    // Shortest paths between clusters (Floyd-Warshall over a handful of clusters).
    let mut d = vec![vec![f64::INFINITY; k]; k];
    for (a, row) in d.iter_mut().enumerate() {
        for (b, x) in row.iter_mut().enumerate() {
            *x = if a == b {
                0.0
            } else {
                topo.latency(a, b).as_secs_f64() * 1e6
            };
        }
    }
    for m in 0..k {
        for a in 0..k {
            for b in 0..k {
                if d[a][m] + d[m][b] < d[a][b] {
                    d[a][b] = d[a][m] + d[m][b];
                }
            }
        }
    }
    (0..cl.len())
        .map(|v| {
            if v == root {
                0.0
            } else if cl[v] == cl[root] {
                topo.latency(cl[v], cl[v]).as_secs_f64() * 1e6
            } else {
                d[cl[root]][cl[v]]
            }
        })
        .collect()
}

/// A binomial tree over `order` (the root first), MPICH style: relative rank `r` receives
/// from `r - lowbit(r)` and sends to `r + m` for `m = lowbit(r) / 2, ..., 1` (largest
/// subtree first).
fn binomial_over(order: &[usize], children: &mut [Vec<usize>]) {
    let n = order.len();
    for r in 0..n {
        let mut mask = if r == 0 {
            n.next_power_of_two()
        } else {
            r & r.wrapping_neg()
        };
        mask >>= 1;
        while mask > 0 {
            if r + mask < n {
                children[order[r]].push(order[r + mask]);
            }
            mask >>= 1;
        }
    }
}

/// A topology-unaware binomial tree over node ids (`ids[i]` is node `i`'s id), rotated so
/// `root` has rank 0, as MPICH builds it.
pub fn binomial_unaware<T: Ord>(root: usize, ids: &[T]) -> Tree {
    let mut by_id: Vec<usize> = (0..ids.len()).collect();
    by_id.sort_by(|a, b| ids[*a].cmp(&ids[*b]));
    let pos = by_id.iter().position(|&v| v == root).expect("root present");
    let order: Vec<usize> = (0..by_id.len())
        .map(|r| by_id[(pos + r) % by_id.len()])
        .collect();
    let mut children = vec![Vec::new(); ids.len()];
    binomial_over(&order, &mut children);
    Tree { root, children }
}

/// The static MagPIe tree, configured from the topology as a hand-made tree would be: the
/// root sends to one coordinator per other cluster (the farthest first, a flat tree over
/// the wide area), then every coordinator, the root included, spreads the message
/// binomially inside its own cluster.
pub fn magpie<T: Ord>(root: usize, ids: &[T], topo: &Topology) -> Tree {
    let cl = clusters_of(topo);
    let mut children = vec![Vec::new(); ids.len()];
    let k = topo.clusters.len();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); k];
    for (v, &c) in cl.iter().enumerate() {
        members[c].push(v);
    }
    let mut coordinators: Vec<(usize, usize)> = Vec::new(); // (cluster, node)
    for (c, m) in members.iter_mut().enumerate() {
        m.sort_by(|a, b| ids[*a].cmp(&ids[*b]));
        let coord = if c == cl[root] {
            root
        } else {
            m.first().copied().unwrap_or(root)
        };
        if let Some(i) = m.iter().position(|&v| v == coord) {
            m[..=i].rotate_right(1); // coordinator first, the rest in id order
        }
        if c != cl[root] && !m.is_empty() {
            coordinators.push((c, coord));
        }
    }
    coordinators.sort_by(|a, b| {
        topo.latency(cl[root], b.0)
            .cmp(&topo.latency(cl[root], a.0))
    });
    children[root].extend(coordinators.iter().map(|(_, v)| *v));
    for m in &members {
        binomial_over(m, &mut children);
    }
    Tree { root, children }
}

/// The tree a broadcast actually took: each node under the node it first received it from,
/// the children of a node in the order it sent to them (receipt time minus the link's
/// latency).
pub fn from_receipts(
    root: usize,
    first_from: &[Option<usize>],
    received_us: &[f64],
    topo: &Topology,
) -> Tree {
    let cl = clusters_of(topo);
    let mut children = vec![Vec::new(); first_from.len()];
    for (v, p) in first_from.iter().enumerate() {
        if let Some(p) = p
            && v != root
        {
            children[*p].push(v);
        }
    }
    for (u, c) in children.iter_mut().enumerate() {
        let sent = |v: usize| received_us[v] - topo.latency(cl[u], cl[v]).as_secs_f64() * 1e6;
        c.sort_by(|a, b| sent(*a).total_cmp(&sent(*b)));
    }
    Tree { root, children }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_trees_span_and_have_log_depth() {
        let ids: Vec<u32> = (0..100).rev().collect();
        let t = binomial_unaware(7, &ids);
        let mut seen = [false; 100];
        let mut stack = vec![(7, 0)];
        let mut depth = 0;
        while let Some((u, d)) = stack.pop() {
            assert!(!seen[u]);
            seen[u] = true;
            depth = depth.max(d);
            stack.extend(t.children[u].iter().map(|c| (*c, d + 1)));
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(depth, 6); // the most one-bits of a rank below 100 (63, 95)
        assert_eq!(t.children[7].len(), 7);
    }

    #[test]
    fn magpie_enters_each_cluster_once_and_costs_as_modelled() {
        let topo = Topology::builtin("phoenix-27").expect("embedded");
        let cl = clusters_of(&topo);
        let ids: Vec<usize> = (0..cl.len()).collect();
        let t = magpie(0, &ids, &topo);
        let mut entries = vec![0; topo.clusters.len()];
        for (u, cs) in t.children.iter().enumerate() {
            for &c in cs {
                if cl[u] != cl[c] {
                    entries[cl[c]] += 1;
                }
            }
        }
        assert!(
            entries
                .iter()
                .enumerate()
                .all(|(c, e)| *e == usize::from(c != cl[0]))
        );
        let model = CostModel {
            cpu_send: Duration::from_micros(20),
            cpu_recv: Duration::from_micros(20),
            bytes: 0,
        };
        let times = completion_times(&t, &topo, model);
        let bound = lower_bound(0, &topo);
        for (v, x) in times.iter().enumerate() {
            assert!(x.expect("spans") >= bound[v]);
        }
    }
}
