//! Every transfer of one attempt of a plan, with what each waits for: the plan as a graph
//! of point-to-point transfers. The simulator replays it through its bandwidth pipes
//! (`sim::bulk`), so a plan the planner makes can be timed at any scale in virtual time.
//!
//! A transfer leaves its sender once every transfer in its `after` list has arrived
//! there (a chunk's partial sum needs the chain's partial before it; a relay needs the
//! chunk). The graphs follow the executors in `api::large`: chunks are independent, so
//! pipelining comes from the graph's width; sending costs nothing beyond the pipes.

use super::paths::Direction;
use super::route::{self, chunk_route, segment};
use super::spread::SpreadPlan;
use super::{Algorithm, BulkPlan, RoutePlan};
use crate::proto::NodeId;
use std::collections::HashMap;

/// One point-to-point transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// Sender and receiver, indices into the plan's members.
    pub from: u32,
    pub to: u32,
    pub bytes: u64,
    /// Transfers that must have arrived at `from` first (indices into the same list).
    pub after: Vec<usize>,
}

/// Builds a graph: transfers are named by a key while it is built.
struct Graph<K: std::hash::Hash + Eq> {
    out: Vec<Transfer>,
    named: HashMap<K, usize>,
}

impl<K: std::hash::Hash + Eq> Graph<K> {
    fn new() -> Self {
        Graph {
            out: Vec::new(),
            named: HashMap::new(),
        }
    }

    fn add(&mut self, key: K, from: u32, to: u32, bytes: u64, after: Vec<usize>) -> usize {
        self.out.push(Transfer {
            from,
            to,
            bytes,
            after,
        });
        self.named.insert(key, self.out.len() - 1);
        self.out.len() - 1
    }

    fn get(&self, key: &K) -> Option<usize> {
        self.named.get(key).copied()
    }
}

fn index(members: &[NodeId], id: NodeId) -> u32 {
    members.binary_search(&id).map_or(u32::MAX, |i| i as u32)
}

/// The transfers of an allreduce or reduce plan.
pub fn of_bulk(plan: &BulkPlan) -> Vec<Transfer> {
    let size = plan.elem.size() as u64;
    match plan.algorithm {
        Algorithm::Clustered | Algorithm::Hierarchical => grouped(plan, size),
        Algorithm::Ring => ring(plan, size),
        Algorithm::Tree => tree(plan, size),
        Algorithm::Relayed | Algorithm::Direct => Vec::new(),
    }
}

/// Kinds of transfer of a grouped plan's chunk.
#[derive(Hash, PartialEq, Eq, Clone, Copy)]
enum Hop {
    /// Along the reduce chain or tree, from the member.
    Chain(NodeId),
    /// A cluster partial, (from, to).
    Partial(NodeId, NodeId),
    /// A result across clusters (or to a reduce's root), (from, to).
    Result(NodeId, NodeId),
    /// Along the gather chain or tree, (from, to).
    Down(NodeId, NodeId),
}

fn grouped(plan: &BulkPlan, size: u64) -> Vec<Transfer> {
    let mut all = Vec::new();
    let at = |id: NodeId| index(&plan.members, id);
    for c in route::chunks(plan) {
        let bytes = c.len * size;
        let routes: Vec<(NodeId, route::ChunkRoute)> = (plan.members.iter())
            .filter_map(|m| chunk_route(plan, *m, &c).map(|r| (*m, r)))
            .collect();
        let by_id: HashMap<NodeId, &route::ChunkRoute> =
            routes.iter().map(|(m, r)| (*m, r)).collect();
        let mut g: Graph<Hop> = Graph::new();
        // The reduce chains or trees, from their starts (each hop after every one into
        // its sender).
        let mut chain_in: HashMap<NodeId, Vec<usize>> = HashMap::new();
        let mut waiting: HashMap<NodeId, usize> = (routes.iter())
            .map(|(m, r)| (*m, r.reduce_from.len()))
            .collect();
        let mut ready: Vec<NodeId> = (routes.iter())
            .filter(|(_, r)| r.reduce_from.is_empty())
            .map(|(m, _)| *m)
            .collect();
        while let Some(from) = ready.pop() {
            if let Some(next) = by_id[&from].reduce_to {
                let before = chain_in.get(&from).cloned().unwrap_or_default();
                let t = g.add(Hop::Chain(from), at(from), at(next), bytes, before);
                chain_in.entry(next).or_default().push(t);
                let left = waiting.get_mut(&next).expect("a member");
                *left -= 1;
                if *left == 0 {
                    ready.push(next);
                }
            }
        }
        let partial = |m: &NodeId| chain_in.get(m).cloned().unwrap_or_default();
        // What a gateway's combined partial waits for: its chain, and (a relay or an
        // owner) the partials it takes. A relay (a gateway that is not an owner but takes
        // partials) passes its own on once those are in, so the gateways are taken leaves
        // first; an owner sends its own partial (hierarchical: to the other owners) as
        // soon as its chain is done.
        let combined = |g: &Graph<Hop>, m: &NodeId, r: &route::ChunkRoute| {
            let mut after = partial(m);
            after.extend((r.partials_from.iter()).filter_map(|p| g.get(&Hop::Partial(*p, *m))));
            after
        };
        let mut sending: Vec<&(NodeId, route::ChunkRoute)> = routes
            .iter()
            .filter(|(_, r)| !r.partial_to.is_empty())
            .collect();
        while !sending.is_empty() {
            let before = sending.len();
            sending.retain(|(m, r)| {
                let ready = r.owner
                    || (r.partials_from.iter()).all(|p| g.get(&Hop::Partial(*p, *m)).is_some());
                if ready {
                    let after = match r.owner {
                        true => partial(m),
                        false => combined(&g, m, r),
                    };
                    for o in &r.partial_to {
                        g.add(Hop::Partial(*m, *o), at(*m), at(*o), bytes, after.clone());
                    }
                }
                !ready
            });
            if sending.len() == before {
                // Partials in a cycle: a checked plan has none; leave them out.
                break;
            }
        }
        // What the chunk's result at each member waits for: an owner's every partial; a
        // result sent from an owner, or passed on by a relay.
        let mut result_at: HashMap<NodeId, Vec<usize>> = HashMap::new();
        let mut passing: Vec<NodeId> = Vec::new();
        for (m, r) in routes.iter().filter(|(_, r)| r.owner) {
            result_at.insert(*m, combined(&g, m, r));
            passing.push(*m);
        }
        while let Some(m) = passing.pop() {
            let after = result_at[&m].clone();
            for x in &by_id[&m].result_to {
                let t = g.add(Hop::Result(m, *x), at(m), at(*x), bytes, after.clone());
                result_at.insert(*x, vec![t]);
                passing.push(*x);
            }
        }
        // The gather chains or trees, from the gateways.
        for (m, _) in routes.iter().filter(|(_, r)| r.gather_from.is_none()) {
            let mut next = vec![(*m, result_at.get(m).cloned().unwrap_or_default())];
            while let Some((from, before)) = next.pop() {
                for to in &by_id[&from].gather_to {
                    let t = g.add(
                        Hop::Down(from, *to),
                        at(from),
                        at(*to),
                        bytes,
                        before.clone(),
                    );
                    next.push((*to, vec![t]));
                }
            }
        }
        let offset = all.len();
        all.extend(g.out.into_iter().map(|t| Transfer {
            after: t.after.iter().map(|a| a + offset).collect(),
            ..t
        }));
    }
    all
}

fn ring(plan: &BulkPlan, size: u64) -> Vec<Transfer> {
    let n = plan.members.len();
    let mut out: Vec<Transfer> = Vec::new();
    if n < 2 {
        return out;
    }
    let steps = if plan.root.is_some() {
        n - 1
    } else {
        2 * (n - 1)
    };
    // into[i]: the last transfer into member i.
    let mut into: Vec<Option<usize>> = vec![None; n];
    for step in 0..steps {
        let mut next_into = into.clone();
        for i in 0..n {
            // The segment the executor sends at this step (reduce-scatter, then allgather).
            let s = match step.checked_sub(n - 1) {
                None => (i + n - step) % n,
                Some(g) => (i + 1 + n - g) % n,
            };
            let bytes = segment(plan.len, n, s).1 * size;
            out.push(Transfer {
                from: i as u32,
                to: ((i + 1) % n) as u32,
                bytes,
                after: into[i].into_iter().collect(),
            });
            next_into[(i + 1) % n] = Some(out.len() - 1);
        }
        into = next_into;
    }
    if let Some(root) = plan.root {
        let r = index(&plan.members, root) as usize;
        for i in (0..n).filter(|i| *i != r) {
            out.push(Transfer {
                from: i as u32,
                to: r as u32,
                bytes: segment(plan.len, n, (i + 1) % n).1 * size,
                after: into[i].into_iter().collect(),
            });
        }
    }
    out
}

fn tree(plan: &BulkPlan, size: u64) -> Vec<Transfer> {
    let bytes = plan.len * size;
    let mut order = plan.members.clone();
    if let Some(p) = plan.root.and_then(|r| order.iter().position(|m| *m == r)) {
        let root = order.remove(p);
        order.insert(0, root);
    }
    let n = order.len();
    let id = |pos: usize| index(&plan.members, order[pos]);
    let mut up: Vec<usize> = vec![usize::MAX; n];
    let mut out: Vec<Transfer> = Vec::new();
    // Deepest first, so children come before their parents.
    for pos in (1..n).rev() {
        let after = [2 * pos + 1, 2 * pos + 2]
            .into_iter()
            .filter(|c| *c < n)
            .map(|c| up[c])
            .collect();
        out.push(Transfer {
            from: id(pos),
            to: id((pos - 1) / 2),
            bytes,
            after,
        });
        up[pos] = out.len() - 1;
    }
    if plan.root.is_some() {
        return out;
    }
    let mut down: Vec<Vec<usize>> = vec![Vec::new(); n];
    down[0] = [1, 2]
        .into_iter()
        .filter(|c| *c < n)
        .map(|c| up[c])
        .collect();
    for pos in 1..n {
        let parent = (pos - 1) / 2;
        out.push(Transfer {
            from: id(parent),
            to: id(pos),
            bytes,
            after: down[parent].clone(),
        });
        down[pos] = vec![out.len() - 1];
    }
    out
}

/// The transfers of a scatter or gather plan: each chunk hop by hop along its path.
pub fn of_route(plan: &RoutePlan) -> Vec<Transfer> {
    let Ok(r) = plan.members.binary_search(&plan.root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in 0..plan.members.len() {
        for (k, (_, _, len)) in plan.chunks(m).enumerate() {
            // Paths are listed as the chunk flows (a gather's from the member).
            let (source, sink) = match plan.direction {
                Direction::Scatter => (r as u32, m as u32),
                Direction::Gather => (m as u32, r as u32),
            };
            let mut nodes = vec![source];
            nodes.extend(plan.paths[m][k].iter().copied());
            nodes.push(sink);
            let mut before = Vec::new();
            for w in nodes.windows(2) {
                out.push(Transfer {
                    from: w[0],
                    to: w[1],
                    bytes: len,
                    after: before,
                });
                before = vec![out.len() - 1];
            }
        }
    }
    out
}

/// The transfers of an allgather plan: each chunk along its tree's edges.
pub fn of_spread(plan: &SpreadPlan) -> Vec<Transfer> {
    let mut out = Vec::new();
    for m in 0..plan.members.len() {
        for (k, (_, _, len)) in plan.chunks(m).enumerate() {
            let mut into: HashMap<u32, usize> = HashMap::new();
            for &(a, b) in &plan.trees[m][k] {
                let after = into.get(&a).copied().into_iter().collect();
                out.push(Transfer {
                    from: a,
                    to: b,
                    bytes: len,
                    after,
                });
                into.insert(b, out.len() - 1);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::bulk::route::chunks;
    use crate::proto::bulk::route::tests::{chained, plan};

    /// Every transfer waits only for earlier ones that arrive where it leaves.
    fn well_formed(t: &[Transfer]) {
        for (i, x) in t.iter().enumerate() {
            assert_ne!(x.from, x.to, "transfer {i} to itself");
            for a in &x.after {
                assert!(*a < i, "transfer {i} waits for a later one");
                assert_eq!(t[*a].to, x.from, "transfer {i} waits for one elsewhere");
            }
        }
    }

    #[test]
    fn graphs_are_well_formed_and_move_what_the_algorithms_move() {
        for (algorithm, root) in [
            (Algorithm::Clustered, None),
            (Algorithm::Clustered, Some(5)),
            (Algorithm::Hierarchical, None),
            (Algorithm::Hierarchical, Some(2)),
            (Algorithm::Ring, None),
            (Algorithm::Ring, Some(3)),
            (Algorithm::Tree, None),
            (Algorithm::Tree, Some(7)),
        ] {
            let p = plan(algorithm, &[4, 2, 3, 1], root);
            let t = of_bulk(&p);
            well_formed(&t);
            assert!(!t.is_empty(), "{algorithm:?}");
            // Every member but a reduce's root sends its contribution on.
            for m in (0..p.members.len()).filter(|m| root != Some(*m)) {
                assert!(
                    t.iter().any(|x| x.from == m as u32),
                    "{algorithm:?}: {m} silent"
                );
            }
            // An allreduce's every member, a reduce's root, receives something.
            for m in (0..p.members.len()).filter(|m| root.is_none_or(|r| r == *m)) {
                assert!(
                    t.iter().any(|x| x.to == m as u32),
                    "{algorithm:?}: {m} gets nothing"
                );
            }
        }
        // Tree allreduce: n - 1 up and n - 1 down, whole vectors.
        let p = plan(Algorithm::Tree, &[4, 2, 3, 1], None);
        let t = of_bulk(&p);
        assert_eq!(t.len(), 2 * 9);
        assert!(t.iter().all(|x| x.bytes == 40 * 4));
        // Ring allreduce: 2 (n - 1) steps of n transfers.
        assert_eq!(
            of_bulk(&plan(Algorithm::Ring, &[4, 2, 3, 1], None)).len(),
            2 * 9 * 10
        );
    }

    /// A gather's chunks follow the paths as the executor does: from the member through
    /// its path's relays, in the listed order, to the root.
    #[test]
    fn route_graphs_follow_the_listed_paths() {
        let mut members: Vec<NodeId> = (0..8).map(|i| NodeId::from_seed(2, i)).collect();
        members.sort();
        let groups: Vec<Vec<NodeId>> = members.chunks(2).map(<[NodeId]>::to_vec).collect();
        let net = crate::proto::bulk::model::Network::unmeasured(groups);
        for direction in [Direction::Scatter, Direction::Gather] {
            let sizes = vec![1000; 8];
            let root = members[0];
            let (chunk, paths, _) = crate::proto::bulk::paths::plan(
                &net,
                direction,
                Algorithm::Tree,
                root,
                &members,
                &sizes,
            );
            let plan = RoutePlan {
                attempt: 0,
                direction,
                algorithm: Algorithm::Tree,
                root,
                members: members.clone(),
                missing: Vec::new(),
                sizes,
                chunk,
                paths,
                predicted_s: 0.0,
            };
            let t = of_route(&plan);
            well_formed(&t);
            // Member 7 sits under 3 under 1 in the tree: two relays.
            let hops: Vec<(u32, u32)> = t.iter().map(|x| (x.from, x.to)).collect();
            let want = match direction {
                Direction::Scatter => [(0, 1), (1, 3), (3, 7)],
                Direction::Gather => [(7, 3), (3, 1), (1, 0)],
            };
            assert!(
                want.iter().all(|h| hops.contains(h)),
                "{direction:?}: {hops:?}"
            );
            // And no hop the tree does not have.
            assert!(
                !hops.contains(&(7, 1)) && !hops.contains(&(3, 0)),
                "{hops:?}"
            );
        }
    }

    /// The simulator's graph of a relayed plan: each transfer waits only for earlier ones
    /// into its sender, and a chunk crosses clusters once per tree link (plus a reduce's
    /// result to a root outside the owner's cluster).
    #[test]
    fn relayed_graphs_cross_each_tree_link_once() {
        let p = plan(Algorithm::Clustered, &[4, 2, 3, 1], None);
        let group_of = |m: u32| p.groups.iter().position(|g| g.contains(&m)).unwrap();
        for root in [None, Some(2usize), Some(9)] {
            let mut q = p.clone();
            q.root = root.map(|r| q.members[r]);
            let q = chained(q);
            let t = of_bulk(&q);
            for (i, x) in t.iter().enumerate() {
                assert!(x.after.iter().all(|a| *a < i && t[*a].to == x.from), "{i}");
            }
            let crossing = t
                .iter()
                .filter(|x| group_of(x.from) != group_of(x.to))
                .count();
            let per_chunk: usize = chunks(&q)
                .iter()
                .map(|c| match root {
                    None => 2 * 3,
                    Some(r) => 3 + usize::from(group_of(r as u32) != c.share),
                })
                .sum();
            assert_eq!(crossing, per_chunk, "reduce to {root:?}");
        }
    }
}
