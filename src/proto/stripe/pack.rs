//! Packing spanning arborescences: the bound, the widest single tree and the packing.
//!
//! All functions read capacities through [`ClusterGraph::cap`], so NaN, negative, infinite
//! or missing entries count as "no link", and none of them panics on any input.

use super::algo::max_flow;
use super::lp;
use super::{Arborescence, ClusterGraph};

pub use super::algo::min_arborescence;

/// How far below the bound the packing may stop looking for better trees.
const TARGET_GAP: f64 = 0.002;
/// A top-up tree must add at least this fraction of the current total to be worth a stripe.
const MIN_GAIN: f64 = 0.005;

/// The best rate a broadcast from `root` can reach (Edmonds): the minimum over clusters
/// `j != root` of the maximum flow from `root` to `j`.
///
/// A single cluster has no receiver: `f64::INFINITY`. An unreachable cluster, or a `root`
/// that is not a cluster, gives 0.
pub fn max_flow_bound(g: &ClusterGraph, root: usize) -> f64 {
    let n = g.n();
    if root >= n {
        return 0.0;
    }
    let caps = g.cap_matrix();
    (0..n)
        .filter(|&j| j != root)
        .map(|j| max_flow(&caps, root, j))
        .fold(f64::INFINITY, f64::min)
}

/// The single arborescence with the largest bottleneck, its rate being that bottleneck:
/// the best one tree can do, what striping is measured against.
///
/// `None` if some cluster is unreachable (or `root` is not a cluster). A single cluster
/// gives the trivial tree with rate `f64::INFINITY` (nothing crosses the wide area).
pub fn widest_tree(g: &ClusterGraph, root: usize) -> Option<Arborescence> {
    widest_on(&g.cap_matrix(), root)
}

/// Single trees worth comparing for a given size: for each capacity level, the tree of
/// shortest latency (depth) among those using only arcs at least that wide, with its
/// bottleneck as rate. The widest tree is the last of them; the first is the
/// shortest-latency tree. A small payload wants a shallow tree, a large one a wide tree,
/// and a tree both wide and deep (a 150 ms detour with a hair more capacity than the
/// direct link) is only worth it for payloads large enough to amortise the detour, which
/// the model, comparing these, decides. Sorted by rate, deduplicated.
pub fn single_trees(g: &ClusterGraph, root: usize) -> Vec<Arborescence> {
    let caps = g.cap_matrix();
    let n = caps.len();
    if root >= n {
        return Vec::new();
    }
    let mut levels: Vec<f64> = caps
        .iter()
        .flatten()
        .copied()
        .filter(|c| *c > 0.0)
        .collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    let mut out: Vec<Arborescence> = Vec::new();
    for level in levels {
        // Dijkstra by latency over the arcs at least `level` wide.
        let mut dist = vec![u64::MAX; n];
        let mut parent: Vec<Option<usize>> = vec![None; n];
        let mut done = vec![false; n];
        dist[root] = 0;
        while let Some(u) = (0..n)
            .filter(|&u| !done[u] && dist[u] < u64::MAX)
            .min_by_key(|&u| (dist[u], u))
        {
            done[u] = true;
            for v in 0..n {
                if !done[v] && caps[u][v] >= level {
                    let d = dist[u] + u64::from(g.latency(u, v));
                    if d < dist[v] {
                        dist[v] = d;
                        parent[v] = Some(u);
                    }
                }
            }
        }
        if !done.iter().all(|d| *d) {
            break;
        }
        let rate = (0..n)
            .filter_map(|v| parent[v].map(|p| caps[p][v]))
            .fold(f64::INFINITY, f64::min);
        if !out.iter().any(|t| t.parent == parent) {
            out.push(Arborescence {
                parent,
                rate_bps: rate,
            });
        }
    }
    out.sort_by(|a, b| a.rate_bps.total_cmp(&b.rate_bps));
    out
}

/// Prim-like maximum-bottleneck arborescence on a sanitized capacity matrix: grow from the
/// root, always adding the widest arc from the tree to a cluster outside it.
fn widest_on(caps: &[Vec<f64>], root: usize) -> Option<Arborescence> {
    let n = caps.len();
    if root >= n {
        return None;
    }
    let mut parent = vec![None; n];
    let mut inside = vec![false; n];
    let mut best: Vec<(f64, usize)> = vec![(0.0, usize::MAX); n];
    let mut rate = f64::INFINITY;
    let mut at = root;
    inside[root] = true;
    for _ in 1..n {
        for v in 0..n {
            if !inside[v] && caps[at][v] > best[v].0 {
                best[v] = (caps[at][v], at);
            }
        }
        let (v, &(w, p)) = best
            .iter()
            .enumerate()
            .filter(|&(v, &(w, _))| !inside[v] && w > 0.0)
            .max_by(|a, b| a.1.0.total_cmp(&b.1.0).then(b.0.cmp(&a.0)))?;
        inside[v] = true;
        parent[v] = Some(p);
        rate = rate.min(w);
        at = v;
    }
    Some(Arborescence {
        parent,
        rate_bps: rate,
    })
}

/// A fractional packing of at most `max_trees` spanning arborescences rooted at `root`,
/// close to [`max_flow_bound`]: every arc carries at most its capacity in total, every rate
/// is positive. Empty if some cluster is unreachable, `root` is not a cluster or
/// `max_trees` is 0; a single cluster gives its trivial tree at `f64::INFINITY`.
///
/// The packing LP solved by column generation (Chu-Liu/Edmonds prices the next tree; an
/// optimal basis holds at most one tree per arc, so no merging is needed), the `max_trees`
/// largest kept and re-optimized if there were more, rescaled so that no arc is over its
/// capacity whatever the rounding, then topped up with widest trees on what is left.
pub fn pack(g: &ClusterGraph, root: usize, max_trees: usize) -> Vec<Arborescence> {
    let n = g.n();
    let caps = g.cap_matrix();
    if max_trees == 0 {
        return Vec::new();
    }
    let Some(widest) = widest_on(&caps, root) else {
        return Vec::new();
    };
    if n == 1 {
        return vec![widest];
    }
    let arcs: Vec<(usize, usize)> = (0..n)
        .flat_map(|u| (0..n).map(move |v| (u, v)))
        .filter(|&(u, v)| caps[u][v] > 0.0)
        .collect();
    // Edmonds: the optimum is the bound, so the solver may stop a hair below it.
    let target = (1.0 - TARGET_GAP) * max_flow_bound(g, root);
    let start = [widest.parent.clone()];
    let mut trees = to_trees(lp::solve(&caps, &arcs, root, &start, true, target));
    if trees.len() > max_trees {
        // Keep the largest and re-optimize their rates without the others.
        trees.truncate(max_trees);
        let kept: Vec<Vec<Option<usize>>> = trees.iter().map(|t| t.parent.clone()).collect();
        trees = to_trees(lp::solve(&caps, &arcs, root, &kept, false, target));
        trees.truncate(max_trees);
    }
    if trees.is_empty() {
        trees.push(widest);
    }
    rescale(&caps, &mut trees);
    top_up(&caps, root, max_trees, &mut trees);
    trees.retain(|t| t.rate_bps > 0.0 && t.rate_bps.is_finite());
    shorten(g, &caps, root, &mut trees);
    trees
}

/// Hangs clusters on shallower parents where capacity is left: the packing looks at
/// rates only, so of two packings with the same rates it may pick trees that send a
/// cluster's data over a 150 ms detour when a 5 ms arc with room to spare would do. A
/// cluster moves to the parent that reaches it soonest (depth latency of the parent plus
/// the arc's) among those not below it whose arc still has the tree's rate free; every
/// move makes a cluster strictly nearer the root, so the pass ends, and rates and
/// capacities are kept.
pub(super) fn shorten(
    g: &ClusterGraph,
    caps: &[Vec<f64>],
    root: usize,
    trees: &mut [Arborescence],
) {
    let n = caps.len();
    let mut used = vec![vec![0.0; n]; n];
    for t in trees.iter() {
        for (p, c) in t.arcs() {
            if p < n && c < n {
                used[p][c] += t.rate_bps;
            }
        }
    }
    for t in trees.iter_mut() {
        for _ in 0..n * n {
            let depth: Vec<Option<u64>> = (0..n)
                .map(|c| {
                    let path = t.path_to_root(c)?;
                    Some(path.iter().map(|&(p, c)| u64::from(g.latency(p, c))).sum())
                })
                .collect();
            let below = |c: usize, x: usize| {
                // Whether x is c or in c's subtree.
                let mut at = x;
                for _ in 0..=n {
                    if at == c {
                        return true;
                    }
                    match t.parent.get(at).copied().flatten() {
                        Some(p) => at = p,
                        None => return false,
                    }
                }
                true
            };
            let rate = t.rate_bps;
            let mut moved = false;
            for c in (0..n).filter(|&c| c != root) {
                let (Some(dc), Some(p)) = (depth[c], t.parent.get(c).copied().flatten()) else {
                    continue;
                };
                let better = (0..n)
                    .filter(|&q| q != c && q != p && !below(c, q))
                    .filter(|&q| caps[q][c] - used[q][c] >= rate * (1.0 - 1e-9))
                    .filter_map(|q| Some((q, depth[q]? + u64::from(g.latency(q, c)))))
                    .filter(|&(_, d)| d < dc)
                    .min_by_key(|&(q, d)| (d, q));
                if let Some((q, _)) = better {
                    used[p][c] -= rate;
                    used[q][c] += rate;
                    t.parent[c] = Some(q);
                    moved = true;
                    break;
                }
            }
            if !moved {
                break;
            }
        }
    }
}

/// Solver output as trees, largest rate first (ties by tree, for determinism).
fn to_trees(columns: Vec<(Vec<Option<usize>>, f64)>) -> Vec<Arborescence> {
    let mut trees: Vec<Arborescence> = columns
        .into_iter()
        .map(|(parent, rate_bps)| Arborescence { parent, rate_bps })
        .collect();
    trees.sort_by(|a, b| {
        b.rate_bps
            .total_cmp(&a.rate_bps)
            .then(a.parent.cmp(&b.parent))
    });
    trees
}

/// Total rate on every arc.
fn loads(n: usize, trees: &[Arborescence]) -> Vec<Vec<f64>> {
    let mut load = vec![vec![0.0; n]; n];
    for t in trees {
        for (p, c) in t.arcs() {
            if p < n && c < n {
                load[p][c] += t.rate_bps;
            }
        }
    }
    load
}

/// Scales every rate by one factor so that the most loaded arc is exactly full: feasible
/// whatever the phase before did, and no capacity left idle by a uniform slack.
fn rescale(caps: &[Vec<f64>], trees: &mut [Arborescence]) {
    let n = caps.len();
    let load = loads(n, trees);
    let mut factor = f64::INFINITY;
    for u in 0..n {
        for v in 0..n {
            if load[u][v] > 0.0 {
                factor = factor.min(caps[u][v] / load[u][v]);
            }
        }
    }
    if !factor.is_finite() {
        factor = 0.0;
    }
    for t in trees {
        t.rate_bps *= factor;
    }
}

/// Greedy top-up: widest trees on the residual capacities, merged into an identical tree
/// when there is one, while each adds more than [`MIN_GAIN`] of the total and the count
/// stays within `max_trees`. Each step empties an arc, so it ends after at most n^2 steps.
fn top_up(caps: &[Vec<f64>], root: usize, max_trees: usize, trees: &mut Vec<Arborescence>) {
    let n = caps.len();
    for _ in 0..n * n {
        let load = loads(n, trees);
        let residual: Vec<Vec<f64>> = (0..n)
            .map(|u| (0..n).map(|v| (caps[u][v] - load[u][v]).max(0.0)).collect())
            .collect();
        let Some(extra) = widest_on(&residual, root) else {
            return;
        };
        let total: f64 = trees.iter().map(|t| t.rate_bps).sum();
        if extra.rate_bps.is_nan() || extra.rate_bps <= MIN_GAIN * total {
            return;
        }
        if let Some(same) = trees.iter_mut().find(|t| t.parent == extra.parent) {
            same.rate_bps += extra.rate_bps;
        } else if trees.len() < max_trees {
            trees.push(extra);
        } else {
            return;
        }
    }
}
