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
    let mut ids: Vec<NodeId> = nodes.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let n = ids.len();
    let index: IdMap<NodeId, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    // Sorted as packed integers (sorting tuples was most of a view's cost at thousands of
    // nodes): by pair, then RTT, so the lowest RTT of each pair stays; then by RTT, ties
    // by ids. (Node indices past u32, four billion members, are left out.)
    let pack = |hi: u32, mid: u32, lo: u32| (hi as u128) << 64 | (mid as u128) << 32 | lo as u128;
    let mut by_pair: Vec<u128> = edges
        .iter()
        .filter_map(|(a, b, rtt)| {
            let i = u32::try_from(*index.get(a)?).ok()?;
            let j = u32::try_from(*index.get(b)?).ok()?;
            (i != j).then(|| pack(i.min(j), i.max(j), *rtt))
        })
        .collect();
    by_pair.sort_unstable();
    by_pair.dedup_by_key(|p| *p >> 32); // The lowest RTT of each pair stays.
    let mut by_rtt: Vec<u128> = (by_pair.iter())
        .map(|p| pack(*p as u32, (*p >> 64) as u32, (*p >> 32) as u32))
        .collect();
    drop(by_pair);
    by_rtt.sort_unstable();
    let pairs: Vec<(u32, usize, usize)> = (by_rtt.iter())
        .map(|p| {
            (
                (*p >> 64) as u32,
                (*p >> 32) as u32 as usize,
                *p as u32 as usize,
            )
        })
        .collect();

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
    // Every node's chain of groups, lowest first.
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

    let mut levels: Vec<Vec<Arc<Group>>> = Vec::new();
    // The group of each key (a node or a merge) as built at a lower level: the same key
    // is the same group.
    let mut built: Vec<Option<Arc<Group>>> = vec![None; m];
    for l in 1..=depth {
        // A node's group at level l: its highest group of level <= l, else itself alone.
        let mut members: std::collections::BTreeMap<usize, Vec<NodeId>> = Default::default();
        for (i, chain) in chains.iter().enumerate() {
            let key = chain
                .iter()
                .copied()
                .take_while(|&g| level[g] <= l)
                .last()
                .unwrap_or(i);
            members.entry(key).or_default().push(ids[i]);
        }
        if members.len() == 1 && l > 1 {
            break; // Everyone in one group: says nothing.
        }
        let mut groups: Vec<Arc<Group>> = members
            .into_iter()
            .map(|(key, members)| {
                let group = built[key].get_or_insert_with(|| {
                    Arc::new(Group {
                        label: members[0], // `ids` is sorted, so members are too.
                        rtt_us: (key >= n).then(|| median(&rtts[key])).flatten(),
                        members,
                    })
                });
                Arc::clone(group)
            })
            .collect();
        groups.sort_by_key(|g| g.label);
        levels.push(groups);
    }
    ClusterView { levels }
}

/// For every group, the RTTs of the edges that join its parts (the edges whose two ends
/// first meet in that group).
fn joining_rtts(pairs: &[(u32, usize, usize)], chains: &[Vec<usize>], m: usize) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new(); m];
    for &(rtt, i, j) in pairs {
        if let Some(&g) = chains[i].iter().find(|g| chains[j].contains(g)) {
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
