//! Reduce and allreduce of application values (any serde type) with an operation the
//! caller supplies, which need only be associative: whole values cannot be cut into
//! chunks, so they travel a two-level binomial tree that keeps the operands in order.
//!
//! The *order* is the plan's: cluster by cluster (clusters in the order of their smallest
//! member), members in id order inside each. Inside a cluster, a binomial tree over the
//! members' positions brings the cluster's fold to its first member; the same tree over
//! the clusters' first members brings the whole fold to the first cluster's first member,
//! the *top*. Each node combines `own ⊕ child(+1) ⊕ child(+2) ⊕ child(+4) ...`, children
//! holding the next contiguous runs, so the result is `v1 ⊕ v2 ⊕ ... ⊕ vn` in the order
//! above for any associative ⊕. A reduce's top sends it to the root; an allreduce's top
//! sends it back down the same trees, so every member gets the same value.

use super::NodeId;
use serde::{Deserialize, Serialize};

/// What every participant of one value reduce attempt follows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValuePlan {
    /// As in [`super::BulkPlan::attempt`].
    pub attempt: u32,
    /// The participants, in id order.
    pub members: Vec<NodeId>,
    /// As in [`super::BulkPlan::missing`].
    pub missing: Vec<NodeId>,
    /// The clusters as indices into `members`, each sorted, ordered by their first member:
    /// the order the values are combined in.
    pub groups: Vec<Vec<u32>>,
    /// A reduce's root (none: an allreduce, everyone gets the value).
    pub root: Option<NodeId>,
    /// What the model predicted (latencies only: the values' sizes are not known), seconds.
    pub predicted_s: f64,
}

/// One level of a binomial tree over positions `0..n`: position `i`'s parent and its
/// children, in the order their runs follow `i`'s.
pub fn binomial(i: usize, n: usize) -> (Option<usize>, Vec<usize>) {
    let mut children = Vec::new();
    let mut step = 1;
    while step < n {
        if i & step != 0 {
            return (Some(i - step), children);
        }
        if i + step < n {
            children.push(i + step);
        }
        step <<= 1;
    }
    (None, children)
}

/// `me`'s place in the plan: (parent, children) inside its cluster, and (parent,
/// children) among the clusters' first members if it is one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValueRoute {
    pub in_parent: Option<NodeId>,
    pub in_children: Vec<NodeId>,
    /// Whether this node is its cluster's first member.
    pub leader: bool,
    pub top_parent: Option<NodeId>,
    pub top_children: Vec<NodeId>,
    /// Whether this node holds the whole fold first.
    pub top: bool,
}

impl ValuePlan {
    /// `me`'s route; `None` if `me` is not in a group.
    pub fn route(&self, me: NodeId) -> Option<ValueRoute> {
        let index = self.members.binary_search(&me).ok()? as u32;
        let g = self.groups.iter().position(|grp| grp.contains(&index))?;
        let pos = self.groups[g].iter().position(|i| *i == index)?;
        let id = |i: u32| self.members[i as usize];
        let (p, c) = binomial(pos, self.groups[g].len());
        let mut r = ValueRoute {
            in_parent: p.map(|p| id(self.groups[g][p])),
            in_children: c.into_iter().map(|c| id(self.groups[g][c])).collect(),
            leader: pos == 0,
            ..ValueRoute::default()
        };
        if r.leader {
            let (p, c) = binomial(g, self.groups.len());
            r.top_parent = p.map(|p| id(self.groups[p][0]));
            r.top_children = c.into_iter().map(|c| id(self.groups[c][0])).collect();
            r.top = g == 0;
        }
        Some(r)
    }

    /// The top: the first cluster's first member.
    pub fn top(&self) -> Option<NodeId> {
        let first = *self.groups.first()?.first()?;
        self.members.get(first as usize).copied()
    }

    /// The members in the order their values are combined.
    pub fn order(&self) -> Vec<NodeId> {
        (self.groups.iter().flatten())
            .map(|i| self.members[*i as usize])
            .collect()
    }
}

/// The clusters ordered by their first member (each sorted first).
pub fn ordered(mut groups: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
    for g in &mut groups {
        g.sort();
    }
    groups.retain(|g| !g.is_empty());
    groups.sort_by_key(|g| g[0]);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn plan(sizes: &[usize]) -> ValuePlan {
        let mut members: Vec<NodeId> = (0..sizes.iter().sum::<usize>() as u64)
            .map(|i| NodeId::from_seed(3, i))
            .collect();
        members.sort();
        // Clusters of interleaved members, so cluster order differs from id order.
        let k = sizes.len();
        let mut groups = vec![Vec::new(); k];
        let mut at = 0;
        for round in 0.. {
            let mut any = false;
            for (g, s) in sizes.iter().enumerate() {
                if round < *s {
                    groups[g].push(at as u32);
                    at += 1;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        groups.reverse();
        ValuePlan {
            attempt: 0,
            members,
            missing: Vec::new(),
            groups: ordered(groups),
            root: None,
            predicted_s: 0.0,
        }
    }

    /// Runs the trees with string concatenation (associative, not commutative): the top
    /// must hold every member's letter once, in the plan's order.
    fn fold(plan: &ValuePlan) -> String {
        let letter: HashMap<NodeId, String> = (plan.members.iter().enumerate())
            .map(|(i, m)| (*m, format!("{i},")))
            .collect();
        let routes: HashMap<NodeId, ValueRoute> = (plan.members.iter())
            .map(|m| (*m, plan.route(*m).expect("in a group")))
            .collect();
        fn up(
            m: NodeId,
            routes: &HashMap<NodeId, ValueRoute>,
            letter: &HashMap<NodeId, String>,
            top_level: bool,
        ) -> String {
            let r = &routes[&m];
            let mut acc = if top_level {
                up(m, routes, letter, false)
            } else {
                letter[&m].clone()
            };
            let children = if top_level {
                &r.top_children
            } else {
                &r.in_children
            };
            for c in children {
                assert_eq!(
                    if top_level {
                        routes[c].top_parent
                    } else {
                        routes[c].in_parent
                    },
                    Some(m)
                );
                acc += &up(*c, routes, letter, top_level);
            }
            acc
        }
        let top = plan.top().expect("a top");
        assert!(routes[&top].top);
        up(top, &routes, &letter, true)
    }

    #[test]
    fn the_fold_keeps_the_plan_order_for_any_cluster_shape() {
        for sizes in [&[1][..], &[5], &[3, 1, 4], &[1, 1, 1, 1, 1], &[8, 2, 7]] {
            let p = plan(sizes);
            let want: String = (p.order().iter())
                .map(|m| format!("{},", p.members.binary_search(m).unwrap()))
                .collect();
            assert_eq!(fold(&p), want, "{sizes:?}");
        }
    }

    #[test]
    fn binomial_trees_cover_every_position_once() {
        for n in 1..40 {
            let mut seen = vec![0; n];
            seen[0] += 1;
            for i in 0..n {
                let (p, c) = binomial(i, n);
                assert_eq!(p.is_none(), i == 0);
                for c in c {
                    assert_eq!(binomial(c, n).0, Some(i));
                    seen[c] += 1;
                }
            }
            assert!(seen.iter().all(|s| *s == 1), "{n}");
        }
    }
}
