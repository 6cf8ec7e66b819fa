//! From published latencies to levels of groups: single linkage, cut at the jumps.
//!
//! Kruskal over the edges (lowest RTT first, ties by ids, so every node builds the same
//! tree of merges), then a merge is kept as a group of its own only when the merge above it
//! happens at a latency more than the gap factor higher ([`ClusterParams::is_gap`]); the
//! other merges fold into the merge above them. A group's level is one more than the
//! highest level among the groups inside it.

use super::{ClusterParams, ClusterView, Group};
use crate::proto::id::{IdMap, NodeId};
use std::sync::Arc;

/// One merge of the single-linkage tree (indices `0..n` are the nodes themselves).
struct Merge {
    height_us: u32,
    parent: Option<usize>,
}

/// The groups of `nodes` at every level, from `edges` (`(a, b, rtt_us)`, either direction,
/// duplicates allowed: the lowest RTT of a pair counts). Edges naming a node outside
/// `nodes` are ignored. Deterministic: the same inputs give the same view on every node.
pub fn compute(
    nodes: &[NodeId],
    edges: &[(NodeId, NodeId, u32)],
    params: &ClusterParams,
) -> ClusterView {
    compute_from(nodes, edges.iter().copied(), params)
}

/// [`compute`] over edges as they come (a view's inputs need not be gathered first).
pub(super) fn compute_from(
    nodes: &[NodeId],
    edges: impl Iterator<Item = (NodeId, NodeId, u32)>,
    params: &ClusterParams,
) -> ClusterView {
    let mut ids: Vec<NodeId> = nodes.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let n = ids.len();
    let index: IdMap<NodeId, u32> = (ids.iter().enumerate())
        .filter_map(|(i, id)| Some((*id, u32::try_from(i).ok()?)))
        .collect(); // (Node indices past u32, four billion members, are left out.)
    let ends = edges.filter_map(|(a, b, rtt)| {
        let (i, j) = (*index.get(&a)?, *index.get(&b)?);
        (i != j).then(|| (i.min(j), i.max(j), rtt))
    });
    let pairs = lowest_by_rtt(n, ends.collect());

    // Kruskal, recording every merge; `top[root]` is the merge currently heading a set.
    let mut merges: Vec<Merge> = (0..n)
        .map(|_| Merge {
            height_us: 0,
            parent: None,
        })
        .collect();
    let mut uf: Vec<usize> = (0..n).collect();
    let mut top: Vec<usize> = (0..n).collect();
    for &(rtt, i, j) in &pairs {
        let (ri, rj) = (find(&mut uf, i), find(&mut uf, j));
        if ri == rj {
            continue;
        }
        let k = merges.len();
        merges.push(Merge {
            height_us: rtt,
            parent: None,
        });
        merges[top[ri]].parent = Some(k);
        merges[top[rj]].parent = Some(k);
        uf[rj] = ri;
        top[ri] = k;
    }

    // Which merges stand as groups: the tops, and those below a jump. A merge's group is
    // itself or, folded, the group of the merge above it (parents come later: walk down).
    let m = merges.len();
    let mut group_of = vec![usize::MAX; m];
    for k in (n..m).rev() {
        let g = match merges[k].parent {
            None => k,
            Some(p) if params.is_gap(merges[k].height_us, merges[p].height_us) => k,
            Some(p) => group_of[p],
        };
        group_of[k] = g;
    }
    let up = |k: usize| merges[k].parent.map(|p| group_of[p]);
    // Levels, bottom up (a group's parent group comes later).
    let mut level = vec![0usize; m];
    for k in n..m {
        if group_of[k] == k {
            level[k] = level[k].max(1);
            if let Some(pg) = up(k) {
                level[pg] = level[pg].max(level[k] + 1);
            }
        }
    }
    // Every node's chain of groups, lowest first (levels strictly rise along a chain).
    let chains: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            let mut chain = Vec::new();
            let mut at = up(i);
            while let Some(g) = at {
                chain.push(g);
                at = up(g);
            }
            chain
        })
        .collect();
    let rtts = joining_rtts(&pairs, &chains, m);
    // At least one level while there is anyone: a node alone is a cluster of one.
    let depth = level
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(usize::from(n > 0));

    // A node's group at level l is its highest group of level <= l, else itself alone:
    // so a key (a node or a group) stands from its own level (1 for a node) up to the
    // level below its parent group's (or the top). Each group is built once, shared by
    // the levels it stands at (built per level, the members' lists were most of a view's
    // cost while summaries spread and chains are deep).
    let mut members: Vec<Vec<NodeId>> = vec![Vec::new(); m];
    for (i, chain) in chains.iter().enumerate() {
        for &g in chain {
            members[g].push(ids[i]); // `ids` is sorted, so members are too.
        }
    }
    let mut at_level: Vec<Vec<Arc<Group>>> = vec![Vec::new(); depth];
    let keys = (0..n).chain((n..m).filter(|&k| group_of[k] == k));
    for key in keys {
        let lowest = if key < n { 1 } else { level[key] };
        let highest = up(key).map_or(depth, |pg| level[pg] - 1);
        let group = Arc::new(if key < n {
            Group {
                label: ids[key],
                members: vec![ids[key]],
                rtt_us: None,
            }
        } else {
            let members = std::mem::take(&mut members[key]);
            Group {
                label: members[0],
                members,
                rtt_us: median(&rtts[key]),
            }
        });
        for groups in &mut at_level[lowest - 1..highest] {
            groups.push(Arc::clone(&group));
        }
    }
    let mut levels: Vec<Vec<Arc<Group>>> = Vec::new();
    for (l, mut groups) in at_level.into_iter().enumerate() {
        if groups.len() == 1 && l > 0 {
            break; // Everyone in one group: says nothing.
        }
        groups.sort_unstable_by_key(|g| g.label);
        levels.push(groups);
    }
    ClusterView { levels }
}

/// Each pair's lowest RTT, sorted by RTT, ties by the pair's indices: `(rtt, i, j)`.
/// `edges` are `(i, j, rtt)` with `i < j < n`.
///
/// Sorting was most of a view's cost at thousands of nodes, so it sorts 64-bit keys and
/// small runs: the edges are bucketed by their lower end, each bucket sorted by its other
/// end and RTT (the lowest RTT of each pair stays), and the pairs so ordered by ids are
/// sorted once by RTT and position.
fn lowest_by_rtt(n: usize, edges: Vec<(u32, u32, u32)>) -> Vec<(u32, usize, usize)> {
    let mut start = vec![0usize; n + 1];
    for &(i, _, _) in &edges {
        start[i as usize + 1] += 1;
    }
    for k in 0..n {
        start[k + 1] += start[k];
    }
    let mut fill = start.clone();
    let mut by_end = vec![0u64; edges.len()];
    for &(i, j, rtt) in &edges {
        by_end[fill[i as usize]] = u64::from(j) << 32 | u64::from(rtt);
        fill[i as usize] += 1;
    }
    drop(edges);
    let mut pairs: Vec<(u32, u32, u32)> = Vec::with_capacity(by_end.len());
    for i in 0..n {
        let bucket = &mut by_end[start[i]..start[i + 1]];
        bucket.sort_unstable();
        let mut last = None;
        for key in bucket.iter() {
            let j = (key >> 32) as u32;
            if last != Some(j) {
                pairs.push((i as u32, j, *key as u32));
                last = Some(j);
            }
        }
    }
    drop(by_end);
    // Positions fit in 32 bits: a view of four billion edges is out of reach anyway.
    pairs.truncate(u32::MAX as usize);
    let mut by_rtt: Vec<u64> = (pairs.iter().enumerate())
        .map(|(k, p)| u64::from(p.2) << 32 | k as u64)
        .collect();
    by_rtt.sort_unstable();
    (by_rtt.iter())
        .map(|key| {
            let (i, j, rtt) = pairs[*key as u32 as usize];
            (rtt, i as usize, j as usize)
        })
        .collect()
}

/// For every group, the RTTs of the edges that join its parts (the edges whose two ends
/// first meet in that group).
/// (Two chains of one tree share their top part: the lowest common group is where the
/// shared part begins, found walking down from the tops.)
fn joining_rtts(pairs: &[(u32, usize, usize)], chains: &[Vec<usize>], m: usize) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); m];
    for &(rtt, i, j) in pairs {
        let common = (chains[i].iter().rev().zip(chains[j].iter().rev()))
            .take_while(|(a, b)| a == b)
            .last();
        if let Some((&g, _)) = common {
            out[g].push(rtt);
        }
    }
    out
}

fn median(v: &[u32]) -> Option<u32> {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len().saturating_sub(1) / 2).copied()
}

fn find(uf: &mut [usize], mut x: usize) -> usize {
    while uf[x] != x {
        uf[x] = uf[uf[x]];
        x = uf[x];
    }
    x
}
