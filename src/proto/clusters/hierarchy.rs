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
    SCRATCH.with_borrow_mut(|scratch| {
        scratch.ends.clear();
        scratch.ends.extend(edges.filter_map(|(a, b, rtt)| {
            let (i, j) = (*index.get(&a)?, *index.get(&b)?);
            (i != j).then(|| (i.min(j), i.max(j), rtt))
        }));
        lowest_by_rtt(n, scratch);
        groups(&ids, &scratch.pairs, params, &mut scratch.joining)
    })
}

/// The buffers of a view's computation, kept by each thread from one view to the next:
/// allocated afresh, their pages were zeroed by the kernel each time (a fifth of a view's
/// cost at 2000 nodes). About 60 bytes per published edge in all (5 MB at 5000 members).
#[derive(Default)]
struct Scratch {
    /// The edges as `(i, j, rtt)`, `i < j`.
    ends: Vec<(u32, u32, u32)>,
    /// Where each lower end's edges start in `by_end`, and the next free slot of each.
    start: Vec<usize>,
    fill: Vec<usize>,
    /// Each edge as `j << 32 | rtt`, bucketed by `i`.
    by_end: Vec<u64>,
    /// Each pair once, with its lowest RTT, by ids.
    by_id: Vec<(u32, u32, u32)>,
    /// `rtt << 32 | position in by_id`.
    by_rtt: Vec<u64>,
    /// What [`lowest_by_rtt`] returns: `(rtt, i, j)`.
    pairs: Vec<(u32, u32, u32)>,
    /// See [`Joining`].
    joining: Joining,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// The levels of groups of `ids` joined by `pairs` (`(rtt, i, j)` by RTT, see
/// [`lowest_by_rtt`]).
fn groups(
    ids: &[NodeId],
    pairs: &[(u32, u32, u32)],
    params: &ClusterParams,
    joining: &mut Joining,
) -> ClusterView {
    let n = ids.len();
    // Kruskal, recording every merge; `top[root]` is the merge currently heading a set.
    let mut merges: Vec<Merge> = (0..n)
        .map(|_| Merge {
            height_us: 0,
            parent: None,
        })
        .collect();
    let mut uf: Vec<usize> = (0..n).collect();
    let mut top: Vec<usize> = (0..n).collect();
    for &(rtt, i, j) in pairs {
        let (ri, rj) = (find(&mut uf, i as usize), find(&mut uf, j as usize));
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
    // Every node's chain of groups, lowest first (levels strictly rise along a chain),
    // node i's at `chain[chain_at[i]..chain_at[i + 1]]`.
    let mut chain_at = Vec::with_capacity(n + 1);
    let mut chain = Vec::new();
    for i in 0..n {
        chain_at.push(chain.len());
        let mut at = up(i);
        while let Some(g) = at {
            chain.push(g);
            at = up(g);
        }
    }
    chain_at.push(chain.len());
    let chain_of = |i: usize| &chain[chain_at[i]..chain_at[i + 1]];
    joining.fill(pairs, chain_of, m);
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
    let mut size = vec![0usize; m];
    for &g in &chain {
        size[g] += 1;
    }
    let mut members: Vec<Vec<NodeId>> = size.iter().map(|s| Vec::with_capacity(*s)).collect();
    for (i, id) in ids.iter().enumerate() {
        for &g in chain_of(i) {
            members[g].push(*id); // `ids` is sorted, so members are too.
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
                rtt_us: joining.median(key),
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
fn lowest_by_rtt(n: usize, scratch: &mut Scratch) {
    let Scratch {
        ends,
        start,
        fill,
        by_end,
        by_id,
        by_rtt,
        pairs,
        ..
    } = scratch;
    offsets(start, n, ends.iter().map(|e| e.0 as usize));
    fill.clear();
    fill.extend_from_slice(start);
    by_end.clear();
    by_end.resize(ends.len(), 0);
    for &(i, j, rtt) in ends.iter() {
        by_end[fill[i as usize]] = u64::from(j) << 32 | u64::from(rtt);
        fill[i as usize] += 1;
    }
    by_id.clear();
    for i in 0..n {
        let bucket = &mut by_end[start[i]..start[i + 1]];
        bucket.sort_unstable();
        let mut last = None;
        for key in bucket.iter() {
            let j = (key >> 32) as u32;
            if last != Some(j) {
                by_id.push((i as u32, j, *key as u32));
                last = Some(j);
            }
        }
    }
    // Positions fit in 32 bits: a view of four billion edges is out of reach anyway.
    by_id.truncate(u32::MAX as usize);
    by_rtt.clear();
    by_rtt.extend((by_id.iter().enumerate()).map(|(k, p)| u64::from(p.2) << 32 | k as u64));
    by_rtt.sort_unstable();
    pairs.clear();
    pairs.extend(by_rtt.iter().map(|key| {
        let (i, j, rtt) = by_id[*key as u32 as usize];
        (rtt, i, j)
    }));
}

/// For every group, the RTTs of the edges that join its parts (the edges whose two ends
/// first meet in that group), group `g`'s at `rtts[at[g]..at[g + 1]]`, lowest first.
#[derive(Default)]
struct Joining {
    /// Each pair's group (`u32::MAX` for none), then the write cursor of each group.
    group: Vec<u32>,
    at: Vec<usize>,
    rtts: Vec<u32>,
}

impl Joining {
    /// Fills the lists from `pairs` (by RTT) and each node's chain of groups among `m`
    /// keys. (Two chains of one tree share their top part: the lowest common group is
    /// where the shared part begins, found walking down from the tops.)
    fn fill<'c>(
        &mut self,
        pairs: &[(u32, u32, u32)],
        chain_of: impl Fn(usize) -> &'c [usize],
        m: usize,
    ) {
        self.group.clear();
        self.group.extend(pairs.iter().map(|&(_, i, j)| {
            let (ci, cj) = (chain_of(i as usize), chain_of(j as usize));
            let common = (ci.iter().rev().zip(cj.iter().rev()))
                .take_while(|(a, b)| a == b)
                .last();
            common.map_or(u32::MAX, |(g, _)| *g as u32)
        }));
        let joined = self.group.iter().filter(|g| **g != u32::MAX);
        offsets(&mut self.at, m, joined.map(|g| *g as usize));
        self.rtts.clear();
        self.rtts.resize(self.at[m], 0);
        let mut next: Vec<usize> = self.at[..m].to_vec();
        for (&(rtt, _, _), &g) in pairs.iter().zip(&self.group) {
            if g != u32::MAX {
                self.rtts[next[g as usize]] = rtt;
                next[g as usize] += 1;
            }
        }
    }

    /// The median of group `g`'s joining RTTs (the lower middle one of an even count).
    fn median(&self, g: usize) -> Option<u32> {
        let rtts = &self.rtts[self.at[g]..self.at[g + 1]];
        rtts.get(rtts.len().checked_sub(1)? / 2).copied()
    }
}

/// Fills `at` with where each of `buckets` buckets starts when `keys` (each below
/// `buckets`) are laid out bucket by bucket: `at[k]..at[k + 1]` is bucket `k`'s span.
fn offsets(at: &mut Vec<usize>, buckets: usize, keys: impl Iterator<Item = usize>) {
    at.clear();
    at.resize(buckets + 1, 0);
    for k in keys {
        at[k + 1] += 1;
    }
    for k in 0..buckets {
        at[k + 1] += at[k];
    }
}

fn find(uf: &mut [usize], mut x: usize) -> usize {
    while uf[x] != x {
        uf[x] = uf[uf[x]];
        x = uf[x];
    }
    x
}
