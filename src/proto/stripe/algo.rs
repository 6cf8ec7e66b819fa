//! The two exact graph algorithms the packing rests on: maximum flow (for the bound) and
//! the minimum-cost spanning arborescence (the oracle of the multiplicative weights).
//! Both work on small dense inputs (tens of clusters) and never panic.

/// Edmonds-Karp (shortest augmenting paths) on a dense matrix of sanitized capacities.
pub(super) fn max_flow(caps: &[Vec<f64>], s: usize, t: usize) -> f64 {
    let n = caps.len();
    let scale = caps.iter().flatten().fold(0.0f64, |a, &c| a.max(c));
    let tiny = scale * 1e-12;
    let mut res: Vec<Vec<f64>> = caps.to_vec();
    let mut flow = 0.0;
    // Each augmentation saturates an arc of a shortest path; n^3 bounds them generously.
    for _ in 0..(n * n * n).max(1) {
        let mut prev = vec![usize::MAX; n];
        prev[s] = s;
        let mut queue = std::collections::VecDeque::from([s]);
        while let Some(u) = queue.pop_front() {
            for v in 0..n {
                if prev[v] == usize::MAX && res[u][v] > tiny {
                    prev[v] = u;
                    queue.push_back(v);
                }
            }
        }
        if prev[t] == usize::MAX {
            break;
        }
        let mut push = f64::INFINITY;
        let mut v = t;
        while v != s {
            push = push.min(res[prev[v]][v]);
            v = prev[v];
        }
        let mut v = t;
        while v != s {
            let u = prev[v];
            res[u][v] -= push;
            res[v][u] += push;
            v = u;
        }
        flow += push;
    }
    flow
}

/// Minimum-cost spanning arborescence rooted at `root` (Chu-Liu/Edmonds): the oracle the
/// packing calls with its arc lengths. `cost[i][j]` is the cost of arc `i -> j`; a cost that
/// is not finite (or missing) means no arc; the diagonal is ignored. Returns the parent of
/// every cluster (`None` for the root), or `None` if some cluster cannot be reached.
pub fn min_arborescence(cost: &[Vec<f64>], root: usize) -> Option<Vec<Option<usize>>> {
    let n = cost.len();
    if root >= n {
        return None;
    }
    let mut arcs = Vec::new();
    for (i, row) in cost.iter().enumerate() {
        for (j, &c) in row.iter().enumerate().take(n) {
            if i != j && c.is_finite() {
                arcs.push((i, j, c));
            }
        }
    }
    let chosen = chu_liu(n, &arcs, root)?;
    Some(
        chosen
            .iter()
            .enumerate()
            .map(|(v, &k)| (v != root).then(|| arcs[k].0))
            .collect(),
    )
}

/// Recursive Chu-Liu/Edmonds on an arc list `(from, to, cost)` with finite costs. Returns,
/// for every node but the root, the index of its chosen incoming arc (`usize::MAX` at the
/// root). Each level contracts every cycle of the cheapest-in-arc graph, so there are at
/// most `n` levels of O(arcs) work.
pub(super) fn chu_liu(n: usize, arcs: &[(usize, usize, f64)], root: usize) -> Option<Vec<usize>> {
    let mut inc = vec![usize::MAX; n];
    for (k, &(u, v, w)) in arcs.iter().enumerate() {
        if u != v && v != root && (inc[v] == usize::MAX || w < arcs[inc[v]].2) {
            inc[v] = k;
        }
    }
    if (0..n).any(|v| v != root && inc[v] == usize::MAX) {
        return None;
    }
    let mut comp = vec![usize::MAX; n];
    let mut mark = vec![usize::MAX; n];
    let mut in_cycle = vec![false; n];
    let mut next = 0;
    for s in 0..n {
        let mut v = s;
        while v != root && mark[v] == usize::MAX {
            mark[v] = s;
            v = arcs[inc[v]].0;
        }
        if v != root && mark[v] == s {
            let mut x = v;
            loop {
                comp[x] = next;
                in_cycle[x] = true;
                x = arcs[inc[x]].0;
                if x == v {
                    break;
                }
            }
            next += 1;
        }
    }
    if next == 0 {
        return Some(inc);
    }
    for c in comp.iter_mut().filter(|c| **c == usize::MAX) {
        *c = next;
        next += 1;
    }
    let mut sub = Vec::with_capacity(arcs.len());
    let mut origin = Vec::with_capacity(arcs.len());
    for (k, &(u, v, w)) in arcs.iter().enumerate() {
        if comp[u] == comp[v] || v == root {
            continue;
        }
        let w = if in_cycle[v] { w - arcs[inc[v]].2 } else { w };
        sub.push((comp[u], comp[v], w));
        origin.push(k);
    }
    let chosen = chu_liu(next, &sub, comp[root])?;
    let mut out = inc;
    for (c, &k) in chosen.iter().enumerate() {
        if c != comp[root] {
            let k = origin[k];
            out[arcs[k].1] = k;
        }
    }
    Some(out)
}
