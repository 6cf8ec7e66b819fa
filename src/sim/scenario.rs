//! Scenario actions (joins, leaves, crashes, partitions) and random churn plans.

use crate::proto::Time;
use crate::proto::rng::SplitMix64;
use std::ops::Range;

/// Something that happens to the scenario at a scheduled time.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Action {
    /// A new node with a fresh id starts in `cluster`. It learns of every live node at once;
    /// the live nodes learn of it after `membership_delay`.
    Join {
        /// Cluster index.
        cluster: usize,
    },
    /// Node `node` (index) leaves gracefully: it gets `Command::Leave`, its outputs are sent,
    /// then it is removed. The others learn of it after `membership_delay`.
    Leave {
        /// Node index.
        node: usize,
    },
    /// Node `node` (index) stops at once, silently. The live nodes are told it is dead after
    /// `failure_detection`.
    Crash {
        /// Node index.
        node: usize,
    },
    /// All traffic between clusters `a` and `b` is dropped until healed. Membership is not
    /// affected.
    Partition {
        /// Cluster index.
        a: usize,
        /// Cluster index.
        b: usize,
    },
    /// Undoes a [`Action::Partition`] of the same pair.
    Heal {
        /// Cluster index.
        a: usize,
        /// Cluster index.
        b: usize,
    },
}

impl Action {
    /// A short name of the kind of action ("join", "leave", ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Join { .. } => "join",
            Action::Leave { .. } => "leave",
            Action::Crash { .. } => "crash",
            Action::Partition { .. } => "partition",
            Action::Heal { .. } => "heal",
        }
    }
}

/// Plans `count` random churn actions over `window`: roughly equal thirds of joins, leaves
/// and crashes in random order at uniformly random, sorted times. Leaves and crashes pick
/// distinct nodes from `candidates` (never the same node twice), and at most
/// `candidates.len() - keep` of them, so at least `keep` candidates survive; when the
/// candidates run out, the remaining removals become joins. Joins pick the cluster of a
/// random element of `join_clusters` (so clusters are chosen in proportion to their size).
pub fn plan_churn(
    count: usize,
    candidates: &[usize],
    keep: usize,
    join_clusters: &[usize],
    window: Range<Time>,
    rng: &mut SplitMix64,
) -> Vec<(Time, Action)> {
    let span = window
        .end
        .as_micros()
        .saturating_sub(window.start.as_micros());
    let mut times: Vec<Time> = (0..count)
        .map(|_| {
            let off = if span == 0 { 0 } else { rng.below(span) };
            Time::from_micros(window.start.as_micros() + off)
        })
        .collect();
    times.sort();
    let offset = rng.below(3) as usize;
    let mut kinds: Vec<usize> = (0..count).map(|i| (i + offset) % 3).collect();
    shuffle(&mut kinds, rng);
    let mut pool = candidates.to_vec();
    let mut removable = candidates.len().saturating_sub(keep);
    let mut out = Vec::with_capacity(count);
    for (at, kind) in times.into_iter().zip(kinds) {
        let action = if kind == 0 || removable == 0 || pool.is_empty() {
            let cluster = if join_clusters.is_empty() {
                0
            } else {
                join_clusters[rng.below(join_clusters.len() as u64) as usize]
            };
            Action::Join { cluster }
        } else {
            let node = pool.swap_remove(rng.below(pool.len() as u64) as usize);
            removable -= 1;
            if kind == 1 {
                Action::Leave { node }
            } else {
                Action::Crash { node }
            }
        };
        out.push((at, action));
    }
    out
}

/// Fisher-Yates shuffle with the simulator's RNG.
pub fn shuffle<T>(v: &mut [T], rng: &mut SplitMix64) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}
