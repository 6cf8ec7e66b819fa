//! What a node publishes: a few edges of its own row of RTT estimates.
//!
//! The row is split into *shells* where the RTT jumps by more than the gap factor (the same
//! rule as the hierarchy's). From every shell the node publishes its nearest peers and the
//! peer with the smallest id:
//! - the nearest peers of the first shell join the node to its cluster with well-measured
//!   latencies (they are its candidates, probed every round);
//! - the smallest id of a shell is the same peer for every node that sees the same shell,
//!   so the members of a cluster also form a star around one member, which keeps the
//!   cluster connected whatever noise picks as nearest;
//! - the nearest peer past a jump is the lowest latency that joins the node's group to the
//!   next one: exactly the link single linkage merges them by.

use super::ClusterParams;
use crate::proto::id::NodeId;
use crate::proto::message::{ClusterEdge, MAX_CLUSTER_EDGES};
use std::ops::Range;

/// How many of the nearest peers of each shell are published.
pub const NEAREST_PER_SHELL: usize = 3;

/// A peer published before keeps its place while its RTT is within this factor of the
/// shell's k-th nearest: equal latencies (a cluster) would otherwise change the nearest
/// peers, and so the summary and its version, with every bit of measurement noise.
const STICKY: f64 = 1.25;

/// A published RTT is republished only when it moved by more than an eighth, counting
/// RTTs below the floor as the floor (the grouping cannot tell them apart).
const RTT_TOLERANCE_DIV: u32 = 8;

/// Splits `sorted` (ascending RTT) into shells: a new shell starts where the RTT jumps by
/// more than the gap factor over the one before.
pub fn shells(sorted: &[(NodeId, u32)], params: &ClusterParams) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..sorted.len() {
        if params.is_gap(sorted[i - 1].1, sorted[i].1) {
            out.push(start..i);
            start = i;
        }
    }
    if start < sorted.len() {
        out.push(start..sorted.len());
    }
    out
}

/// The edges to publish for `row` (this node's RTT estimates, any order, one per peer),
/// keeping the peers of `previous` where they are still about as near (see `STICKY`).
/// At most [`MAX_CLUSTER_EDGES`], nearest shells first.
pub fn choose(
    row: &[(NodeId, u32)],
    previous: &[ClusterEdge],
    params: &ClusterParams,
) -> Vec<ClusterEdge> {
    let mut sorted = row.to_vec();
    sorted.sort_unstable_by_key(|(id, rtt)| (*rtt, *id));
    let mut out: Vec<ClusterEdge> = Vec::new();
    for shell in shells(&sorted, params) {
        let members = &sorted[shell];
        // The smallest id goes in anyway; the nearest are chosen among the others, so the
        // two choices do not crowd each other out as the RTTs wobble.
        let smallest = members.iter().copied().min_by_key(|(id, _)| *id);
        let others: Vec<(NodeId, u32)> = members
            .iter()
            .copied()
            .filter(|m| Some(*m) != smallest)
            .collect();
        let mut picked: Vec<(NodeId, u32)> = Vec::new();
        if let Some(kth) = others.get(others.len().min(NEAREST_PER_SHELL).wrapping_sub(1)) {
            let sticky_limit = (kth.1.max(params.floor_us) as f64 * STICKY) as u32;
            picked.extend(
                others
                    .iter()
                    .copied()
                    .filter(|(id, rtt)| {
                        *rtt <= sticky_limit && previous.iter().any(|e| e.peer == *id)
                    })
                    .take(NEAREST_PER_SHELL),
            );
        }
        for &(id, rtt) in &others {
            if picked.len() >= NEAREST_PER_SHELL {
                break;
            }
            if !picked.iter().any(|(p, _)| *p == id) {
                picked.push((id, rtt));
            }
        }
        picked.extend(smallest);
        out.extend(
            picked
                .into_iter()
                .map(|(peer, rtt_us)| ClusterEdge { peer, rtt_us }),
        );
        if out.len() >= MAX_CLUSTER_EDGES {
            break;
        }
    }
    out.truncate(MAX_CLUSTER_EDGES);
    out
}

/// Whether `new` says something `old` does not: other peers, or an RTT that moved by more
/// than the tolerance (RTTs below the floor count as the floor). Small drifts are not
/// republished: each version costs a spread to every member.
pub fn differs(old: &[ClusterEdge], new: &[ClusterEdge], params: &ClusterParams) -> bool {
    if old.len() != new.len() {
        return true;
    }
    let eff = |rtt: u32| rtt.max(params.floor_us);
    new.iter().any(|n| {
        old.iter().find(|o| o.peer == n.peer).is_none_or(|o| {
            let (o, n) = (eff(o.rtt_us), eff(n.rtt_us));
            o.abs_diff(n) > o / RTT_TOLERANCE_DIV
        })
    })
}
