//! Large collectives (allreduce of big vectors) planned on the measured network and run
//! as point-to-point transfers: what every participant agrees on, the arithmetic, the
//! performance model that picks the algorithm, and the run-time tuning table.
//!
//! Nothing here does I/O. A planner (the participant with the smallest id) gathers one
//! [`Control::Ready`] from every caller, builds a [`BulkPlan`] from its bandwidth view
//! ([`model`]) and its decision table ([`tune`]), and sends it to every participant; each
//! participant derives its own sends and receives from the plan alone ([`route`]), so no
//! per-node instructions travel. The transfers and their ordering are the driver's (`net`)
//! and the API's business.
//!
//! Transfers are keyed by (operation, sender, [`Tag`]); a tag names a phase and a chunk,
//! so every transfer of one attempt has its own key and a retry (a new attempt, a new
//! operation number) never meets the bytes of an abandoned one.

pub mod check;
pub mod combine;
pub mod dag;
mod measured;
pub mod model;
pub mod paths;
pub mod plans;
pub mod relay;
pub mod route;
pub mod spread;
pub mod tune;
pub mod value;

pub use self::combine::{Elem, ReduceOp};
pub use self::model::{Network, Prediction};
pub use self::tune::{TuneEntry, Tuner};

use super::NodeId;
use serde::{Deserialize, Serialize};

/// How a large allreduce moves its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Ours: reduce-scatter and allgather over the discovered clusters. Each cluster owns
    /// a share of the vector sized from the measured wide-area bandwidths; inside a
    /// cluster the chunks flow along pipelined chains.
    Clustered,
    /// Static hierarchy (MagPIe/HAN style): reduce inside each cluster to its first
    /// member, every coordinator sends its whole partial to every other, each combines
    /// them all, then a broadcast inside the cluster. Chunked and pipelined.
    Hierarchical,
    /// Gloo style: reduce-scatter and allgather around a ring of all nodes in id order.
    Ring,
    /// The naive tree: whole vectors up a binary tree in id order, the result back down
    /// (scatter and gather: whole pieces along a binary tree rooted at the root).
    Tree,
    /// Ours for scatter and gather: every chunk on the direct path or through a member of
    /// a third cluster, whichever the measured rates finish soonest ([`paths`]); for
    /// allgather, every chunk into each cluster once over the link that finishes it
    /// soonest, relayed by clusters it reached ([`spread`]).
    Relayed,
    /// Scatter and gather straight between the root and every member; allgather from every
    /// member to every member (flat).
    Direct,
}

impl Algorithm {
    /// Every algorithm, in the order the tables list them.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::Clustered,
        Algorithm::Hierarchical,
        Algorithm::Ring,
        Algorithm::Tree,
        Algorithm::Relayed,
        Algorithm::Direct,
    ];
    /// The allreduce candidates.
    pub const ALLREDUCE: [Algorithm; 4] = [
        Algorithm::Clustered,
        Algorithm::Hierarchical,
        Algorithm::Ring,
        Algorithm::Tree,
    ];
    /// The scatter and gather candidates.
    pub const ROUTED: [Algorithm; 4] = [
        Algorithm::Relayed,
        Algorithm::Direct,
        Algorithm::Hierarchical,
        Algorithm::Tree,
    ];
    /// The allgather candidates ([`spread`]).
    pub const ALLGATHER: [Algorithm; 5] = [
        Algorithm::Relayed,
        Algorithm::Direct,
        Algorithm::Hierarchical,
        Algorithm::Ring,
        Algorithm::Tree,
    ];

    /// A short name for tables and options: `clustered`, `hierarchical`, `ring`, `tree`,
    /// `relayed`, `direct`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Clustered => "clustered",
            Algorithm::Hierarchical => "hierarchical",
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::Relayed => "relayed",
            Algorithm::Direct => "direct",
        }
    }

    /// The algorithm called `name` (see [`Algorithm::name`]).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// How a chunk flows inside a cluster: in a reduction, its partial sums to the member
/// that talks across clusters for it (its gateway) and the result back; in an allgather,
/// from the member that has it to the others. The model picks one per cluster
/// ([`model::inside`] for reductions, [`spread::plan`] for allgathers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Inside {
    /// A pipelined chain through every member: each member sends the vector once per
    /// pass, but a chunk takes `m - 1` hops (large vectors).
    #[default]
    Chain,
    /// A binomial tree rooted at the gateway: a chunk takes `ceil(log2 m)` hops, but the
    /// gateway takes that many copies of the vector (small vectors, large clusters).
    Binomial,
    /// Allgathers only: the member that has the chunk sends it to every other, the entry
    /// rotating over the members so that each sends about one copy of every chunk in all
    /// (one hop). A reduction's gateway would take `m - 1` partials: its plans never
    /// name it.
    Star,
}

impl Inside {
    /// `chain`, `binomial` or `star`.
    pub fn name(self) -> &'static str {
        match self {
            Inside::Chain => "chain",
            Inside::Binomial => "binomial",
            Inside::Star => "star",
        }
    }
}

/// What every participant of one attempt follows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BulkPlan {
    /// Starts at 0; a participant lost mid-operation makes the planner try again with
    /// the others under the next number.
    pub attempt: u32,
    /// How the data moves.
    pub algorithm: Algorithm,
    /// The participants, in id order: their values are in the result.
    pub members: Vec<NodeId>,
    /// Members the planner expected that are not in it (not ready in time, lost, or
    /// with a vector that does not match).
    pub missing: Vec<NodeId>,
    /// The clusters as indices into `members`, each sorted; every member in exactly one.
    pub groups: Vec<Vec<u32>>,
    /// Elements owned by each group (reduce-scatter shares, [`Algorithm::Clustered`]);
    /// they add up to `len`.
    pub shares: Vec<u64>,
    /// Elements in the vector.
    pub len: u64,
    /// Element type and operation.
    pub elem: Elem,
    /// How elements are combined.
    pub op: ReduceOp,
    /// Elements per chunk: the unit that is pipelined.
    pub chunk: u64,
    /// What the model predicted for this plan, in seconds.
    pub predicted_s: f64,
    /// A reduce: the one member that gets the result (none: an allreduce, everyone).
    pub root: Option<NodeId>,
    /// How each group's chunks flow inside it (clustered and hierarchical plans; empty:
    /// chains everywhere).
    pub inside: Vec<Inside>,
    /// A clustered plan whose chunks relay through third clusters: one per chunk, in
    /// [`route::chunks`] order ([`relay`]). Empty: every partial straight to its owner
    /// and every result straight back.
    pub relays: Vec<relay::Relay>,
}

impl BulkPlan {
    /// How group `g`'s chunks flow inside it.
    pub fn inside(&self, g: usize) -> Inside {
        self.inside.get(g).copied().unwrap_or_default()
    }
}

/// What every participant of one scatter or gather attempt follows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoutePlan {
    /// As in [`BulkPlan::attempt`].
    pub attempt: u32,
    /// Scatter or gather.
    pub direction: paths::Direction,
    /// How the chunks travel.
    pub algorithm: Algorithm,
    /// Where the pieces come from (scatter) or go to (gather).
    pub root: NodeId,
    /// The participants, in id order.
    pub members: Vec<NodeId>,
    /// As in [`BulkPlan::missing`].
    pub missing: Vec<NodeId>,
    /// Bytes of each member's piece.
    pub sizes: Vec<u64>,
    /// Bytes per chunk (a piece smaller than that is one chunk).
    pub chunk: u64,
    /// The members each chunk passes through ([`paths::Paths`]).
    pub paths: paths::Paths,
    /// What the model predicted, in seconds.
    pub predicted_s: f64,
}

impl RoutePlan {
    /// The chunks of member `m`'s piece: (number in tags, first byte, bytes).
    pub fn chunks(&self, m: usize) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        let first: u64 = self.paths[..m].iter().map(|p| p.len() as u64).sum();
        let size = self.sizes[m];
        let step = self.chunk.min(size).max(1);
        (0..self.paths[m].len() as u64).map(move |k| {
            let at = k * step;
            ((first + k) as u32, at, step.min(size - at))
        })
    }
}

/// The small messages of the rendezvous and the commit, sent like any transfer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Control {
    /// A caller is ready: its vector's length and type, the operation, and what it asks
    /// for (only the planner's own request decides).
    Ready {
        len: u64,
        elem: Elem,
        op: ReduceOp,
        algorithm: Option<Algorithm>,
        groups: Option<Vec<Vec<NodeId>>>,
        /// A reduce's root (none: an allreduce).
        root: Option<NodeId>,
    },
    /// A caller of a scatter or gather is ready: which, whose, and (gather) its piece's
    /// length.
    ReadyRoute {
        direction: paths::Direction,
        root: NodeId,
        len: u64,
    },
    /// The plan of an attempt.
    Plan(BulkPlan),
    /// The plan of a scatter or gather attempt.
    RoutePlan(RoutePlan),
    /// A caller of an allgather is ready, with its piece's length.
    ReadyAllgather { len: u64 },
    /// The plan of an allgather attempt.
    SpreadPlan(spread::SpreadPlan),
    /// A caller of a value reduce (allreduce: no root) is ready.
    ReadyValue { root: Option<NodeId> },
    /// The plan of a value reduce attempt.
    ValuePlan(value::ValuePlan),
    /// The planner cannot run the operation with this caller (mismatched vectors).
    Refused(String),
    /// A participant finished its part of an attempt.
    Done { attempt: u32 },
    /// A participant's part of an attempt failed (a peer unreachable, a bad transfer).
    Failed { attempt: u32, reason: String },
    /// Every participant finished: write the result.
    Commit { attempt: u32 },
    /// A participant's caller cancelled the call: the planner stops the operation.
    Cancelled,
}

impl Control {
    /// Encodes for the wire.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("control messages always encode")
    }

    /// Decodes what [`Control::encode`] made; never panics.
    pub fn decode(bytes: &[u8]) -> Result<Control, postcard::Error> {
        postcard::from_bytes(bytes)
    }
}

/// Attempts of one operation never reach this (each drops a lost participant); a plan
/// numbered at or above it is refused, so control tags stay apart.
pub const MAX_ATTEMPTS: u32 = 1 << 16;

/// The phase of a transfer; with a chunk or step number it makes a [`Tag`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Phase {
    /// Rendezvous and commit messages ([`Control`]); the number says which.
    Control = 0,
    /// A partial sum along a cluster's chain.
    ReduceChain = 1,
    /// A cluster's partial to an owner across clusters.
    ReduceWide = 2,
    /// A result from an owner to another cluster.
    GatherWide = 3,
    /// A result along a cluster's chain.
    GatherChain = 4,
    /// Ring reduce-scatter step.
    RingReduce = 5,
    /// Ring allgather step.
    RingGather = 6,
    /// Tree: a subtree's sum to the parent.
    TreeUp = 7,
    /// Tree: the result to a child.
    TreeDown = 8,
    /// A chunk of a scatter's or gather's piece, on one hop of its path.
    Route = 9,
    /// A chunk of an allgather's piece, on one edge of its tree.
    Spread = 10,
    /// A value reduce's partial fold: number 0 inside a cluster, 1 among the clusters'
    /// first members, 2 from the top to a reduce's root.
    ValueUp = 11,
    /// An allreduced value on its way back: 1 among the first members, 0 inside.
    ValueDown = 12,
}

/// A transfer's name within one operation: phase in the top 4 bits, number below.
pub type Tag = u32;

/// Numbers under a phase are below this.
pub const TAG_NUMBERS: u32 = 1 << 28;

/// The tag of `phase` number `n` (`n` below [`TAG_NUMBERS`]).
pub fn tag(phase: Phase, n: u32) -> Tag {
    debug_assert!(n < TAG_NUMBERS);
    ((phase as u32) << 28) | (n & (TAG_NUMBERS - 1))
}

/// Control message numbers (under [`Phase::Control`]): the kind in the low 4 bits, the
/// attempt above.
pub mod control {
    use super::{Phase, Tag, tag};
    /// A caller's [`super::Control::Ready`].
    pub fn ready() -> Tag {
        tag(Phase::Control, 0)
    }
    /// The planner's plan (or refusal) for `attempt`.
    pub fn plan(attempt: u32) -> Tag {
        tag(Phase::Control, 1 | (attempt << 4))
    }
    /// A participant's [`super::Control::Done`] for `attempt`.
    pub fn done(attempt: u32) -> Tag {
        tag(Phase::Control, 2 | (attempt << 4))
    }
    /// The planner's [`super::Control::Commit`] for `attempt`.
    pub fn commit(attempt: u32) -> Tag {
        tag(Phase::Control, 3 | (attempt << 4))
    }
    /// A participant's [`super::Control::Cancelled`], whatever the attempt.
    pub fn cancel() -> Tag {
        tag(Phase::Control, 4)
    }
}

/// The operation number of a call: the name and how many calls with that name this node
/// made before, so reusing a name is safe as long as every participant made the same
/// calls with it (a node that joined later counts from zero: elastic applications give
/// each step its own name).
pub fn operation(name: &str, call: u64) -> u64 {
    // FNV-1a: stable across builds and platforms, which `DefaultHasher` is not.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.as_bytes().iter().chain(&call.to_le_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The operation number the data of `attempt` of operation `op` travels under.
pub fn attempt_operation(op: u64, attempt: u32) -> u64 {
    operation(&format!("{op:x}"), u64::from(attempt) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_of_different_phases_and_attempts_differ() {
        let mut seen = std::collections::HashSet::new();
        for a in 0..4 {
            assert!(seen.insert(control::plan(a)));
            assert!(seen.insert(control::done(a)));
            assert!(seen.insert(control::commit(a)));
        }
        assert!(seen.insert(control::ready()));
        assert!(seen.insert(control::cancel()));
        assert_ne!(tag(Phase::ReduceChain, 5), tag(Phase::GatherChain, 5));
        assert_ne!(operation("x", 0), operation("x", 1));
        assert_ne!(attempt_operation(7, 0), attempt_operation(7, 1));
    }

    #[test]
    fn control_messages_round_trip_and_garbage_is_an_error() {
        let m = Control::Done { attempt: 3 };
        assert_eq!(Control::decode(&m.encode()).unwrap(), m);
        assert!(Control::decode(&[0xff, 0xff, 0xff]).is_err());
    }
}
