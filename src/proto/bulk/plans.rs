//! What a planner asks of the model and sends: for one large collective on a measured
//! [`Network`], each candidate algorithm's prediction and the plan of an attempt. The
//! node's planner (`api::large`) and the simulator's benchmark use this same code, each
//! with its own decision table.

use super::model::{Network, predict_all_to, predict_to};
use super::paths::{self, Direction};
use super::spread::{self, SpreadPlan};
use super::value::{self, ValuePlan};
use super::{Algorithm, BulkPlan, Control, Elem, ReduceOp, RoutePlan};
use crate::proto::NodeId;

/// One large collective as its planner sees it (the participants' data sizes known).
#[derive(Clone, Copy, Debug)]
pub enum Ask<'a> {
    /// Allreduce (no root) or reduce of `len` elements.
    Reduce {
        len: u64,
        elem: Elem,
        op: ReduceOp,
        root: Option<NodeId>,
    },
    /// Scatter or gather through `root`; `sizes[m]`: member `m`'s piece.
    Route {
        direction: Direction,
        root: NodeId,
        sizes: &'a [u64],
    },
    /// Allgather; `sizes[m]`: member `m`'s piece.
    Allgather { sizes: &'a [u64] },
    /// Values with the caller's operation (allreduce: no root).
    Value { root: Option<NodeId> },
}

impl Ask<'_> {
    /// The collective's name in the decision table.
    pub fn collective(&self) -> &'static str {
        match self {
            Ask::Reduce { root: None, .. } => "allreduce",
            Ask::Reduce { .. } => "reduce",
            Ask::Route {
                direction: Direction::Scatter,
                ..
            } => "scatter",
            Ask::Route { .. } => "gather",
            Ask::Allgather { .. } => "allgather",
            Ask::Value { root: None } => "allreduce-value",
            Ask::Value { .. } => "reduce-value",
        }
    }

    /// Bytes in all (the decision table's size class).
    pub fn bytes(&self) -> u64 {
        match self {
            Ask::Reduce { len, elem, .. } => len * elem.size() as u64,
            Ask::Route { sizes, .. } | Ask::Allgather { sizes } => sizes.iter().sum(),
            Ask::Value { .. } => 0,
        }
    }

    /// The algorithms that can run it.
    pub fn candidates(&self) -> &'static [Algorithm] {
        match self {
            Ask::Reduce { .. } => &Algorithm::ALLREDUCE,
            Ask::Route { .. } => &Algorithm::ROUTED,
            Ask::Allgather { .. } => &Algorithm::ALLGATHER,
            Ask::Value { .. } => &[Algorithm::Hierarchical],
        }
    }

    /// Every candidate's predicted seconds on `net` over `members` (sorted).
    pub fn predict(&self, net: &Network, members: &[NodeId]) -> Vec<(Algorithm, f64)> {
        match *self {
            Ask::Reduce {
                len, elem, root, ..
            } => (predict_all_to(net, len, elem.size(), root).into_iter())
                .map(|p| (p.algorithm, p.seconds))
                .collect(),
            _ => (self.candidates().iter())
                .map(|a| (*a, self.planned(net, members, *a).1))
                .collect(),
        }
    }

    /// The plan of attempt `attempt` with `algorithm`, for `members` (sorted; the rest of
    /// the expected callers `missing`).
    pub fn plan(
        &self,
        net: &Network,
        members: &[NodeId],
        missing: Vec<NodeId>,
        algorithm: Algorithm,
        attempt: u32,
    ) -> Control {
        let (mut plan, _) = self.planned(net, members, algorithm);
        match &mut plan {
            Control::Plan(p) => (p.attempt, p.missing) = (attempt, missing),
            Control::RoutePlan(p) => (p.attempt, p.missing) = (attempt, missing),
            Control::SpreadPlan(p) => (p.attempt, p.missing) = (attempt, missing),
            Control::ValuePlan(p) => (p.attempt, p.missing) = (attempt, missing),
            _ => {}
        }
        plan
    }

    /// Attempt 0's plan with `algorithm`, and its predicted seconds.
    fn planned(&self, net: &Network, members: &[NodeId], algorithm: Algorithm) -> (Control, f64) {
        match *self {
            Ask::Reduce {
                len,
                elem,
                op,
                root,
            } => {
                let prediction = predict_to(net, algorithm, len, elem.size(), root);
                let seconds = prediction.seconds;
                let plan = BulkPlan {
                    attempt: 0,
                    algorithm,
                    groups: net.indices(members),
                    members: members.to_vec(),
                    missing: Vec::new(),
                    shares: prediction.shares,
                    len,
                    elem,
                    op,
                    chunk: prediction.chunk,
                    predicted_s: seconds,
                    root,
                    inside: prediction.inside,
                    relays: prediction.relays,
                };
                (Control::Plan(plan), seconds)
            }
            Ask::Route {
                direction,
                root,
                sizes,
            } => {
                let (chunk, paths, seconds) =
                    paths::plan(net, direction, algorithm, root, members, sizes);
                let plan = RoutePlan {
                    attempt: 0,
                    direction,
                    algorithm,
                    root,
                    members: members.to_vec(),
                    missing: Vec::new(),
                    sizes: sizes.to_vec(),
                    chunk,
                    paths,
                    predicted_s: seconds,
                };
                (Control::RoutePlan(plan), seconds)
            }
            Ask::Allgather { sizes } => {
                let planned = spread::plan(net, algorithm, members, sizes);
                let seconds = planned.seconds;
                let plan = SpreadPlan {
                    attempt: 0,
                    algorithm,
                    members: members.to_vec(),
                    missing: Vec::new(),
                    sizes: sizes.to_vec(),
                    chunk: planned.chunk,
                    trees: planned.trees,
                    predicted_s: seconds,
                    inside: planned.inside,
                };
                (Control::SpreadPlan(plan), seconds)
            }
            Ask::Value { root } => {
                let seconds = value_latency(net, root.is_none());
                let plan = ValuePlan {
                    attempt: 0,
                    members: members.to_vec(),
                    missing: Vec::new(),
                    groups: value::ordered(net.indices(members)),
                    root,
                    predicted_s: seconds,
                };
                (Control::ValuePlan(plan), seconds)
            }
        }
    }
}

impl Network {
    /// The groups as indices into `members` (sorted; every grouped id among them).
    pub fn indices(&self, members: &[NodeId]) -> Vec<Vec<u32>> {
        (self.groups.iter())
            .map(|g| {
                (g.iter())
                    .filter_map(|m| members.binary_search(m).ok().map(|i| i as u32))
                    .collect()
            })
            .collect()
    }
}

/// A value reduce's predicted time from latencies alone: the binomial levels inside the
/// largest cluster and among the clusters, up (and, for an allreduce, down).
fn value_latency(net: &Network, down: bool) -> f64 {
    let levels = |n: usize| f64::from(usize::BITS - n.saturating_sub(1).leading_zeros());
    let k = net.groups.len();
    let inside = (0..k)
        .map(|c| levels(net.groups[c].len()) * net.latency(c, c))
        .fold(0.0, f64::max);
    let wide = (0..k)
        .flat_map(|c| (0..k).map(move |d| (c, d)))
        .filter(|(c, d)| c != d)
        .map(|(c, d)| net.latency(c, d))
        .fold(0.0, f64::max);
    let once = inside + levels(k) * wide;
    if down { 2.0 * once } else { once + wide }
}
