//! The decision table: per collective and size class, the algorithms' predictions and
//! measured call times, and which one the node uses (STAR-MPI style tuning).
//!
//! An algorithm's *score* is its last measured time if it has one, else its prediction.
//! The node uses the lowest score. So when the model's pick turns out slower than it
//! predicted, beyond what the runner-up promises, the runner-up is tried on the next call
//! of that size class and the faster of the two is kept. The model can also be wrong the
//! other way, or wrong for all of them alike (at small sizes its per-message costs are
//! rough): when the pick's measured time is off its prediction by more than [`MARGIN`],
//! in either direction, the predictions within that error of the pick's cannot be told
//! apart, so the next call *tries* the best of them not yet measured, and the faster
//! measured one is kept. One call per size class is spent so, until the model's
//! predictions move (the nodes measured the links again). Below [`CHEAP_S`] a call costs
//! little and the model's per-message costs are rough both ways (a factor of two seen
//! between algorithms, under the margin for the pick), so there every algorithm predicted
//! within [`CHEAP_REACH`] of the best is tried once in turn, STAR-MPI style, and the
//! fastest measured is kept. A measurement is stale, and the prediction counts again, when the
//! network changed since: the chosen algorithm's time moved by more than [`MARGIN`]
//! between calls (the others' measurements are dropped), or the model's prediction for
//! the algorithm moved by more than [`MARGIN`] since it was measured (the nodes measured
//! the links again).

use super::Algorithm;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// How far a measured time may move before the others' measurements count as stale.
pub const MARGIN: f64 = 0.25;
/// A call this short (s) is cheap to try another algorithm on.
pub const CHEAP_S: f64 = 0.2;
/// On cheap calls, the algorithms predicted within this factor of the best are all tried.
pub const CHEAP_REACH: f64 = 3.0;

/// One row of the table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TuneEntry {
    /// The collective (`allreduce`).
    pub collective: String,
    /// Size class: vectors of `2^class` to `2^(class+1)` bytes.
    pub class: u32,
    /// The algorithm the next call uses.
    pub chosen: Option<Algorithm>,
    /// Predicted seconds, from the model at the last call.
    pub predicted_s: BTreeMap<Algorithm, f64>,
    /// Last measured seconds.
    pub measured_s: BTreeMap<Algorithm, f64>,
    /// The prediction each measurement was made under.
    #[serde(default)]
    pub measured_under_s: BTreeMap<Algorithm, f64>,
    /// Calls recorded.
    pub calls: u32,
    /// Times the choice changed after a measurement.
    pub switches: u32,
    /// The algorithm the next call tries because the pick's time disagreed with the model.
    #[serde(default)]
    pub trying: Option<Algorithm>,
    /// The algorithms tried under the current predictions.
    #[serde(default)]
    pub tried: BTreeSet<Algorithm>,
}

impl TuneEntry {
    fn score(&self, a: Algorithm) -> Option<f64> {
        self.measured_s
            .get(&a)
            .or_else(|| self.predicted_s.get(&a))
            .copied()
    }

    fn best(&self) -> Option<Algorithm> {
        self.predicted_s
            .keys()
            .chain(self.measured_s.keys())
            .copied()
            .filter_map(|a| self.score(a).map(|s| (a, s)))
            .min_by(|x, y| x.1.total_cmp(&y.1))
            .map(|(a, _)| a)
    }

    /// The algorithm to try after `picked` measured `seconds`, if any: on a cheap call,
    /// every untried one within [`CHEAP_REACH`] of the best prediction in turn; otherwise,
    /// once, the best unmeasured one within the model's error on the pick.
    fn worth_trying(&self, picked: Algorithm, seconds: f64) -> Option<Algorithm> {
        let predicted = *self.predicted_s.get(&picked)?;
        let error = (seconds - predicted).abs() / predicted;
        let reach = if seconds < CHEAP_S {
            let best = self
                .predicted_s
                .values()
                .copied()
                .fold(f64::INFINITY, f64::min);
            best * CHEAP_REACH
        } else if self.tried.is_empty() && error > MARGIN {
            predicted * (1.0 + error)
        } else {
            return None;
        };
        self.predicted_s
            .iter()
            .filter(|(a, p)| {
                !self.measured_s.contains_key(a) && !self.tried.contains(a) && **p <= reach
            })
            .min_by(|x, y| x.1.total_cmp(y.1))
            .map(|(a, _)| *a)
    }
}

/// The table of one node (the planner of the operations it runs).
#[derive(Clone, Debug, Default)]
pub struct Tuner {
    entries: BTreeMap<(String, u32), TuneEntry>,
}

/// The size class of `bytes`.
pub fn class(bytes: u64) -> u32 {
    63 - bytes.max(1).leading_zeros()
}

impl Tuner {
    /// Updates the predictions for `collective` on `bytes` and returns the algorithm to use.
    pub fn choose(
        &mut self,
        collective: &str,
        bytes: u64,
        predicted: impl IntoIterator<Item = (Algorithm, f64)>,
    ) -> Algorithm {
        let e = self.entry(collective, bytes);
        e.predicted_s = predicted.into_iter().collect();
        let moved: Vec<Algorithm> = e
            .measured_under_s
            .iter()
            .filter(|(a, under)| {
                e.predicted_s
                    .get(a)
                    .is_some_and(|now| (now - *under).abs() > MARGIN * *under)
            })
            .map(|(a, _)| *a)
            .collect();
        if !moved.is_empty() {
            e.tried.clear();
        }
        for a in moved {
            e.measured_s.remove(&a);
            e.measured_under_s.remove(&a);
        }
        // One call only: a try that fails (and records nothing) is not repeated.
        let best = match e.trying.take() {
            Some(a) if e.predicted_s.contains_key(&a) => a,
            _ => e.best().unwrap_or(Algorithm::Clustered),
        };
        e.chosen = Some(best);
        best
    }

    /// Records that a call of `collective` on `bytes` with `algorithm` took `seconds`.
    pub fn record(&mut self, collective: &str, bytes: u64, algorithm: Algorithm, seconds: f64) {
        let e = self.entry(collective, bytes);
        e.calls += 1;
        if let Some(old) = e.measured_s.get(&algorithm)
            && (seconds - old).abs() > MARGIN * old
        {
            // The network changed under us: what the others measured is stale.
            e.measured_s.retain(|a, _| *a == algorithm);
            e.measured_under_s.retain(|a, _| *a == algorithm);
        }
        e.measured_s.insert(algorithm, seconds);
        if let Some(p) = e.predicted_s.get(&algorithm) {
            e.measured_under_s.insert(algorithm, *p);
        }
        let before = e.chosen;
        e.trying = e.worth_trying(algorithm, seconds);
        e.tried.extend(e.trying);
        e.chosen = e.trying.or_else(|| e.best());
        if before.is_some() && e.chosen != before {
            e.switches += 1;
        }
    }

    /// The rows, by collective and size class.
    pub fn entries(&self) -> Vec<TuneEntry> {
        self.entries.values().cloned().collect()
    }

    fn entry(&mut self, collective: &str, bytes: u64) -> &mut TuneEntry {
        let c = class(bytes);
        self.entries
            .entry((collective.to_string(), c))
            .or_insert_with(|| TuneEntry {
                collective: collective.to_string(),
                class: c,
                ..TuneEntry::default()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Algorithm::*;

    #[test]
    fn a_wrong_pick_is_corrected_after_one_call_and_kept_while_it_holds() {
        let mut t = Tuner::default();
        let model = [(Clustered, 1.0), (Hierarchical, 2.0), (Ring, 5.0)];
        assert_eq!(t.choose("allreduce", 1 << 20, model), Clustered);
        // The model was wrong: clustered took 4 s.
        t.record("allreduce", 1 << 20, Clustered, 4.0);
        assert_eq!(t.choose("allreduce", 1 << 20, model), Hierarchical);
        t.record("allreduce", 1 << 20, Hierarchical, 2.1);
        for _ in 0..3 {
            assert_eq!(t.choose("allreduce", 1 << 20, model), Hierarchical);
            t.record("allreduce", 1 << 20, Hierarchical, 2.0);
        }
        let e = &t.entries()[0];
        assert_eq!(e.switches, 1);
        assert_eq!(e.calls, 5);
        // Another size class is its own row.
        assert_eq!(t.choose("allreduce", 1 << 10, model), Clustered);
    }

    #[test]
    fn a_pick_far_faster_than_predicted_has_the_close_runner_up_tried_once() {
        let mut t = Tuner::default();
        let model = [(Hierarchical, 1.86), (Clustered, 2.21), (Ring, 2.5)];
        assert_eq!(t.choose("allgather", 16 << 20, model), Hierarchical);
        // Twice as fast as predicted: the model cannot tell 1.86 from 2.21 here.
        t.record("allgather", 16 << 20, Hierarchical, 0.90);
        assert_eq!(t.entries()[0].trying, Some(Clustered));
        assert_eq!(t.choose("allgather", 16 << 20, model), Clustered);
        t.record("allgather", 16 << 20, Clustered, 0.79);
        // The faster is kept, and nothing more is tried though clustered is far off its
        // prediction too and ring is within its error: one try per class.
        for _ in 0..3 {
            assert_eq!(t.choose("allgather", 16 << 20, model), Clustered);
            t.record("allgather", 16 << 20, Clustered, 0.80);
        }
        assert!(!t.entries()[0].measured_s.contains_key(&Ring));
        // New predictions (the links measured again) allow one more try.
        let remeasured = [(Hierarchical, 1.0), (Clustered, 5.0), (Ring, 1.2)];
        assert_eq!(t.choose("allgather", 16 << 20, remeasured), Hierarchical);
        t.record("allgather", 16 << 20, Hierarchical, 2.0);
        assert_eq!(t.entries()[0].trying, Some(Ring));
        // Where the model is right, nothing is tried.
        assert_eq!(t.choose("allgather", 1 << 20, model), Hierarchical);
        t.record("allgather", 1 << 20, Hierarchical, 2.0);
        assert_eq!(t.choose("allgather", 1 << 20, model), Hierarchical);
        // A try whose call failed (nothing recorded) is not repeated.
        let mut t = Tuner::default();
        t.choose("allgather", 100, model);
        t.record("allgather", 100, Hierarchical, 0.5);
        assert_eq!(t.choose("allgather", 100, model), Clustered);
        assert_eq!(t.choose("allgather", 100, model), Hierarchical);
    }

    #[test]
    fn on_cheap_calls_every_algorithm_near_the_best_prediction_is_tried_once() {
        let mut t = Tuner::default();
        let model = [
            (Tree, 0.050),
            (Direct, 0.082),
            (Relayed, 0.120),
            (Hierarchical, 0.121),
            (Ring, 0.5),
        ];
        let mut ran = Vec::new();
        for _ in 0..8 {
            let a = t.choose("gather", 64 << 10, model);
            ran.push(a);
            let seconds = match a {
                Relayed => 0.045,
                Tree => 0.058,
                _ => 0.070,
            };
            t.record("gather", 64 << 10, a, seconds);
        }
        // Within the model's error the pick (tree) looked right; relayed, predicted at
        // 2.4 times, was the fastest. Ring (10 times) is never tried.
        assert_eq!(ran[..4], [Tree, Direct, Relayed, Hierarchical]);
        assert!(ran[4..].iter().all(|a| *a == Relayed), "{ran:?}");
        // Long calls keep to one try, and only when the pick is off the model.
        let mut t = Tuner::default();
        let slow = [(Tree, 0.5), (Direct, 0.8), (Relayed, 1.2)];
        t.choose("gather", 1 << 20, slow);
        t.record("gather", 1 << 20, Tree, 0.55);
        assert_eq!(t.choose("gather", 1 << 20, slow), Tree);
    }

    #[test]
    fn a_changed_network_makes_old_measurements_stale() {
        let mut t = Tuner::default();
        let model = [(Clustered, 1.0), (Hierarchical, 2.0)];
        t.choose("allreduce", 100, model);
        t.record("allreduce", 100, Clustered, 1.0);
        t.choose("allreduce", 100, model);
        t.record("allreduce", 100, Hierarchical, 2.0);
        assert_eq!(t.choose("allreduce", 100, model), Clustered);
        // Clustered's links slowed down: 3 s now; hierarchical's old 2 s is stale, and its
        // prediction (2 s) competes.
        t.record("allreduce", 100, Clustered, 3.0);
        let e = &t.entries()[0];
        assert!(!e.measured_s.contains_key(&Hierarchical));
        assert_eq!(t.choose("allreduce", 100, model), Hierarchical);
    }

    #[test]
    fn a_measurement_made_under_another_model_is_stale() {
        let mut t = Tuner::default();
        t.choose("allreduce", 100, [(Clustered, 1.0), (Ring, 2.0)]);
        t.record("allreduce", 100, Clustered, 5.0);
        // Ring (2 s predicted) beats clustered's measured 5 s.
        assert_eq!(
            t.choose("allreduce", 100, [(Clustered, 1.0), (Ring, 2.0)]),
            Ring
        );
        t.record("allreduce", 100, Ring, 2.0);
        // The nodes measured the links again: clustered is now predicted at 0.5 s, its
        // old 5 s was made under a model that no longer holds.
        assert_eq!(
            t.choose("allreduce", 100, [(Clustered, 0.5), (Ring, 2.0)]),
            Clustered
        );
    }
}
