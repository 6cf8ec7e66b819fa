//! Checks of a plan that came from the network, before anything is indexed by it: a plan
//! is the planner's word, and a planner holding the token may still be buggy or hostile.

use super::spread::SpreadPlan;
use super::value::ValuePlan;
use super::{Algorithm, BulkPlan, Inside, RoutePlan, TAG_NUMBERS, relay, route};
use crate::proto::NodeId;

/// The most chunks (or ring steps) one plan may ask a node to handle.
pub const MAX_CHUNKS: u64 = 1 << 20;
/// The largest vector or piece a plan may name, bytes.
pub const MAX_BYTES: u64 = 1 << 34;

/// Why a plan was not followed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a malformed plan: {0}")]
pub struct BadPlan(pub &'static str);

/// Whether `members` are sorted and hold `me` and the plan's `root`, if it has one.
fn sorted_with(members: &[NodeId], me: NodeId, root: Option<NodeId>) -> Result<(), BadPlan> {
    if !members.windows(2).all(|w| w[0] < w[1]) {
        return Err(BadPlan("members not sorted or repeated"));
    }
    if members.binary_search(&me).is_err() {
        return Err(BadPlan("this node is not a member"));
    }
    if root.is_some_and(|r| members.binary_search(&r).is_err()) {
        return Err(BadPlan("the root is not a member"));
    }
    Ok(())
}

/// Whether pieces of `sizes` stay within [`MAX_BYTES`] in all (a receiver holds them all).
fn within(sizes: &[u64]) -> Result<(), BadPlan> {
    match sizes.iter().try_fold(0u64, |a, s| a.checked_add(*s)) {
        Some(t) if t <= MAX_BYTES => Ok(()),
        _ => Err(BadPlan("pieces too large in all")),
    }
}

/// Whether `groups` put each of `n` members in exactly one non-empty group.
fn partition(groups: &[Vec<u32>], n: usize) -> Result<(), BadPlan> {
    let mut seen = vec![false; n];
    for g in groups {
        if g.is_empty() {
            return Err(BadPlan("an empty group"));
        }
        for &i in g {
            match seen.get_mut(i as usize) {
                Some(s) if !*s => *s = true,
                _ => return Err(BadPlan("a group index out of range or repeated")),
            }
        }
    }
    if seen.iter().any(|s| !s) {
        return Err(BadPlan("a member in no group"));
    }
    Ok(())
}

impl ValuePlan {
    /// Whether `me` can follow this plan: members sorted, the root among them, the groups a
    /// partition in the order the values are combined in.
    pub fn check(&self, me: NodeId) -> Result<(), BadPlan> {
        sorted_with(&self.members, me, self.root)?;
        partition(&self.groups, self.members.len())?;
        if super::value::ordered(self.groups.clone()) != self.groups {
            return Err(BadPlan("groups out of order"));
        }
        Ok(())
    }
}

impl BulkPlan {
    /// Whether `me` can follow this plan without indexing out of range.
    pub fn check(&self, me: NodeId) -> Result<(), BadPlan> {
        sorted_with(&self.members, me, self.root)?;
        let n = self.members.len();
        let bytes = self.len.saturating_mul(self.elem.size() as u64);
        if bytes > MAX_BYTES {
            return Err(BadPlan("vector too large"));
        }
        partition(&self.groups, n)?;
        if !self.inside.is_empty() && self.inside.len() != self.groups.len() {
            return Err(BadPlan("a pattern inside for some groups only"));
        }
        if self.inside.contains(&Inside::Star) {
            return Err(BadPlan("a star inside a reduction"));
        }
        let chunks = match self.algorithm {
            Algorithm::Clustered => {
                if self.shares.len() != self.groups.len()
                    || self.shares.iter().try_fold(0u64, |a, s| a.checked_add(*s)) != Some(self.len)
                {
                    return Err(BadPlan("shares do not add up to the vector"));
                }
                if self.chunk == 0 {
                    return Err(BadPlan("a zero chunk"));
                }
                self.len / self.chunk + self.groups.len() as u64
            }
            Algorithm::Hierarchical => {
                if self.chunk == 0 {
                    return Err(BadPlan("a zero chunk"));
                }
                self.len / self.chunk + 1
            }
            Algorithm::Ring => 2 * n as u64,
            Algorithm::Tree => 1,
            Algorithm::Relayed | Algorithm::Direct => {
                return Err(BadPlan("not an allreduce algorithm"));
            }
        };
        if chunks > MAX_CHUNKS.min(u64::from(TAG_NUMBERS)) {
            return Err(BadPlan("too many chunks"));
        }
        if !self.relays.is_empty() {
            if self.algorithm != Algorithm::Clustered {
                return Err(BadPlan("relays in a plan that is not clustered"));
            }
            // Bounded by the chunk count checked above.
            let chunks = route::chunks(self);
            if chunks.len() != self.relays.len() {
                return Err(BadPlan("relays do not match the chunks"));
            }
            let (k, reduce) = (self.groups.len(), self.root.is_some());
            for (c, r) in chunks.iter().zip(&self.relays) {
                if !relay::well_formed(r, k, c.share, reduce) {
                    return Err(BadPlan("a relay that is not a tree to its chunk's owner"));
                }
            }
        }
        Ok(())
    }
}

impl RoutePlan {
    /// Whether `me` can follow this plan without indexing out of range.
    pub fn check(&self, me: NodeId) -> Result<(), BadPlan> {
        sorted_with(&self.members, me, Some(self.root))?;
        let n = self.members.len();
        if self.sizes.len() != n || self.paths.len() != n {
            return Err(BadPlan("sizes or paths do not match the members"));
        }
        if self.chunk == 0 {
            return Err(BadPlan("a zero chunk"));
        }
        within(&self.sizes)?;
        let mut total_chunks = 0u64;
        for (m, (size, paths)) in self.sizes.iter().zip(&self.paths).enumerate() {
            if *size > MAX_BYTES {
                return Err(BadPlan("a piece too large"));
            }
            let step = self.chunk.min(*size).max(1);
            let want = if self.members[m] == self.root {
                0
            } else {
                size.div_ceil(step)
            };
            if paths.len() as u64 != want {
                return Err(BadPlan("a piece's chunk count does not match its size"));
            }
            total_chunks += want;
            if paths.iter().flatten().any(|i| *i as usize >= n) {
                return Err(BadPlan("a path through a member out of range"));
            }
        }
        if total_chunks > MAX_CHUNKS.min(u64::from(TAG_NUMBERS)) {
            return Err(BadPlan("too many chunks"));
        }
        Ok(())
    }
}

impl SpreadPlan {
    /// Whether `me` can follow this plan: every chunk's edges a tree rooted at its owner
    /// that reaches every member once, listed so that a sender already has the chunk.
    pub fn check(&self, me: NodeId) -> Result<(), BadPlan> {
        sorted_with(&self.members, me, None)?;
        let n = self.members.len();
        if self.sizes.len() != n || self.trees.len() != n {
            return Err(BadPlan("sizes or trees do not match the members"));
        }
        if self.chunk == 0 {
            return Err(BadPlan("a zero chunk"));
        }
        within(&self.sizes)?;
        let mut total_chunks = 0u64;
        for (m, (size, chunks)) in self.sizes.iter().zip(&self.trees).enumerate() {
            if *size > MAX_BYTES {
                return Err(BadPlan("a piece too large"));
            }
            let step = self.chunk.min(*size).max(1);
            if chunks.len() as u64 != size.div_ceil(step) {
                return Err(BadPlan("a piece's chunk count does not match its size"));
            }
            total_chunks += chunks.len() as u64;
            if total_chunks > MAX_CHUNKS.min(u64::from(TAG_NUMBERS)) {
                return Err(BadPlan("too many chunks"));
            }
            for edges in chunks {
                if edges.len() + 1 != n {
                    return Err(BadPlan("a chunk's tree does not reach every member"));
                }
                let mut has = vec![false; n];
                has[m] = true;
                for &(a, b) in edges {
                    let (a, b) = (a as usize, b as usize);
                    if a >= n || b >= n || !has[a] || has[b] {
                        return Err(BadPlan("a chunk's edges are not a tree from its owner"));
                    }
                    has[b] = true;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::bulk::paths::Direction;
    use crate::proto::bulk::{Elem, ReduceOp};

    fn ids(n: u64) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = (0..n).map(|i| NodeId::from_seed(5, i)).collect();
        v.sort();
        v
    }

    #[test]
    fn bogus_allreduce_plans_are_refused_and_good_ones_pass() {
        let members = ids(4);
        let good = BulkPlan {
            attempt: 0,
            algorithm: Algorithm::Clustered,
            members: members.clone(),
            missing: Vec::new(),
            groups: vec![vec![0, 1], vec![2, 3]],
            shares: vec![60, 40],
            len: 100,
            elem: Elem::F32,
            op: ReduceOp::Sum,
            chunk: 10,
            predicted_s: 1.0,
            root: None,
            inside: vec![Inside::Binomial, Inside::Chain],
            relays: Vec::new(),
        };
        assert_eq!(good.check(members[0]), Ok(()));
        let mut reduce = good.clone();
        reduce.root = Some(members[3]);
        assert_eq!(reduce.check(members[0]), Ok(()));
        reduce.root = Some(NodeId::from_seed(6, 2));
        assert!(reduce.check(members[0]).is_err(), "a root outside the plan");
        assert!(good.check(NodeId::from_seed(6, 1)).is_err(), "not a member");
        let bad = |f: fn(&mut BulkPlan)| {
            let mut p = good.clone();
            f(&mut p);
            p.check(members[0])
        };
        assert!(bad(|p| p.groups = vec![vec![0, 1], vec![]]).is_err());
        assert!(bad(|p| p.groups = vec![vec![0, 1], vec![2, 9]]).is_err());
        assert!(bad(|p| p.groups = vec![vec![0, 1], vec![1, 2, 3]]).is_err());
        assert!(bad(|p| p.groups = vec![vec![0, 1], vec![2]]).is_err());
        assert!(bad(|p| p.shares = vec![60, 41]).is_err());
        assert!(bad(|p| p.shares = vec![u64::MAX, 41]).is_err());
        assert!(bad(|p| p.chunk = 0).is_err());
        assert!(bad(|p| p.inside = vec![Inside::Binomial]).is_err());
        assert!(bad(|p| p.inside = vec![Inside::Star, Inside::Chain]).is_err());
        assert_eq!(bad(|p| p.inside = Vec::new()), Ok(()));
        assert!(bad(|p| p.members.swap(0, 1)).is_err());
        assert!(bad(|p| p.len = u64::MAX).is_err());
        assert!(
            bad(|p| {
                p.len = 1 << 30;
                p.shares = vec![1 << 29, 1 << 29];
                p.chunk = 1
            })
            .is_err()
        );
    }

    #[test]
    fn bogus_route_plans_are_refused_and_good_ones_pass() {
        let members = ids(3);
        let good = RoutePlan {
            attempt: 0,
            direction: Direction::Scatter,
            algorithm: Algorithm::Relayed,
            root: members[0],
            members: members.clone(),
            missing: Vec::new(),
            sizes: vec![5, 25, 0],
            chunk: 10,
            paths: vec![vec![], vec![vec![], vec![2], vec![]], vec![]],
            predicted_s: 1.0,
        };
        assert_eq!(good.check(members[1]), Ok(()));
        let bad = |f: fn(&mut RoutePlan)| {
            let mut p = good.clone();
            f(&mut p);
            p.check(members[1])
        };
        assert!(
            bad(|p| p.paths[1].push(vec![])).is_err(),
            "a chunk too many"
        );
        assert!(bad(|p| p.paths[1][1] = vec![7]).is_err());
        assert!(bad(|p| p.sizes.pop().map(drop).unwrap_or(())).is_err());
        assert!(bad(|p| p.root = NodeId::from_seed(6, 6)).is_err());
        assert!(bad(|p| p.sizes[2] = u64::MAX).is_err());
        assert!(bad(|p| p.chunk = 0).is_err());
    }

    #[test]
    fn bogus_allgather_plans_are_refused_and_good_ones_pass() {
        let members = ids(3);
        let good = SpreadPlan {
            attempt: 0,
            algorithm: Algorithm::Relayed,
            members: members.clone(),
            missing: Vec::new(),
            sizes: vec![5, 25, 0],
            chunk: 10,
            trees: vec![
                vec![vec![(0, 1), (1, 2)]],
                vec![vec![(1, 0), (1, 2)]; 3],
                vec![],
            ],
            predicted_s: 1.0,
            inside: Vec::new(),
        };
        assert_eq!(good.check(members[1]), Ok(()));
        let bad = |f: fn(&mut SpreadPlan)| {
            let mut p = good.clone();
            f(&mut p);
            p.check(members[1])
        };
        assert!(
            bad(|p| p.trees[1].push(vec![(1, 0), (1, 2)])).is_err(),
            "a chunk too many"
        );
        assert!(
            bad(|p| p.trees[0][0] = vec![(0, 1), (2, 1)]).is_err(),
            "a second parent"
        );
        assert!(
            bad(|p| p.trees[0][0] = vec![(1, 2), (0, 1)]).is_err(),
            "sends before it has"
        );
        assert!(
            bad(|p| p.trees[0][0] = vec![(0, 1), (1, 7)]).is_err(),
            "out of range"
        );
        assert!(
            bad(|p| p.trees[0][0] = vec![(0, 1)]).is_err(),
            "misses a member"
        );
        assert!(bad(|p| p.sizes[2] = u64::MAX).is_err());
        assert!(bad(|p| p.chunk = 0).is_err());
        assert!(bad(|p| p.members.swap(0, 1)).is_err());
        // Pieces each under the limit, over it together, one chunk each.
        let over = |p: &mut SpreadPlan| {
            p.sizes = vec![MAX_BYTES / 2 + 1; 3];
            p.chunk = MAX_BYTES;
            p.trees = vec![
                vec![vec![(0, 1), (1, 2)]],
                vec![vec![(1, 0), (1, 2)]],
                vec![vec![(2, 0), (0, 1)]],
            ];
        };
        assert!(bad(over).is_err(), "too much in all");
    }

    #[test]
    fn bogus_value_plans_are_refused_and_good_ones_pass() {
        let members = ids(4);
        let good = ValuePlan {
            attempt: 0,
            members: members.clone(),
            missing: Vec::new(),
            groups: vec![vec![0, 2], vec![1, 3]],
            root: Some(members[3]),
            predicted_s: 0.0,
        };
        assert_eq!(good.check(members[1]), Ok(()));
        let bad = |f: fn(&mut ValuePlan)| {
            let mut p = good.clone();
            f(&mut p);
            p.check(members[1])
        };
        assert!(
            bad(|p| p.groups = vec![vec![1, 3], vec![0, 2]]).is_err(),
            "out of order"
        );
        assert!(bad(|p| p.groups = vec![vec![0, 2], vec![1, 4]]).is_err());
        assert!(bad(|p| p.groups = vec![vec![0, 2], vec![1]]).is_err());
        assert!(bad(|p| p.root = Some(NodeId::from_seed(6, 6))).is_err());
    }
}
