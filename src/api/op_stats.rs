//! Counts and latencies of the collective operations a node starts through its handles
//! (the node that roots them), for monitoring: [`Node::collective_stats`]. Operations this
//! node only takes part in are not counted here.

use super::Node;
use crate::proto::StartKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upper bounds of the latency histogram's buckets, seconds (the last bucket, +Inf, is
/// implied): from a LAN's millisecond to a slow WAN transfer.
pub const LATENCY_BUCKETS_S: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The operations of one kind started at this node so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectiveStats {
    /// `broadcast`, `broadcast_stream`, `scatter`, `gather`, `allgather`, `reduce`,
    /// `allreduce` or `barrier`.
    pub kind: String,
    /// Operations that returned a report.
    pub completed: u64,
    /// Operations that returned an error.
    pub failed: u64,
    /// Completed operations by latency: entry `i` counts those that took at most
    /// [`LATENCY_BUCKETS_S`]`[i]` and more than the bound before it (not cumulative);
    /// one more entry counts the slower ones.
    pub buckets: Vec<u64>,
    /// Sum of the completed operations' latencies, seconds.
    pub sum_s: f64,
}

/// The node's tally, shared by every clone of its handle.
#[derive(Debug, Default)]
pub(crate) struct Recorder(Mutex<BTreeMap<&'static str, CollectiveStats>>);

impl Recorder {
    /// Runs `op` and records its outcome and how long it took under `kind`.
    pub(crate) async fn time<T, E>(
        &self,
        kind: &'static str,
        op: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let start = Instant::now();
        let result = op.await;
        self.record(kind, start.elapsed(), result.is_ok());
        result
    }

    fn record(&self, kind: &'static str, took: Duration, ok: bool) {
        // A panic elsewhere while holding the lock cannot leave a tally half written.
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let e = all.entry(kind).or_insert_with(|| CollectiveStats {
            kind: kind.to_string(),
            buckets: vec![0; LATENCY_BUCKETS_S.len() + 1],
            ..CollectiveStats::default()
        });
        if !ok {
            e.failed += 1;
            return;
        }
        let s = took.as_secs_f64();
        let i = LATENCY_BUCKETS_S
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(LATENCY_BUCKETS_S.len());
        e.buckets[i] += 1;
        e.completed += 1;
        e.sum_s += s;
    }

    fn snapshot(&self) -> Vec<CollectiveStats> {
        let all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.values().cloned().collect()
    }
}

/// The name an operation is counted under.
pub(crate) fn kind(what: &StartKind) -> &'static str {
    match what {
        StartKind::Broadcast { .. } => "broadcast",
        StartKind::Stream { .. } => "broadcast_stream",
        StartKind::Scatter { .. } => "scatter",
        StartKind::Gather { .. } => "gather",
        StartKind::Reduce { .. } => "reduce",
        StartKind::AllGather { .. } => "allgather",
        StartKind::AllReduce { .. } => "allreduce",
        StartKind::Barrier { .. } => "barrier",
    }
}

impl Node {
    /// The collective operations started through this node's handles so far, by kind
    /// (sorted by kind): how many completed or failed and how long the completed ones
    /// took. Large collectives (`Node::bulk_*`) are not counted.
    pub fn collective_stats(&self) -> Vec<CollectiveStats> {
        self.op_stats.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::{LATENCY_BUCKETS_S, Recorder};
    use std::time::Duration;

    #[test]
    fn outcomes_land_in_their_bucket_and_failures_apart() {
        let r = Recorder::default();
        r.record("gather", Duration::from_millis(3), true);
        r.record("gather", Duration::from_secs(60), true);
        r.record("gather", Duration::from_millis(1), false);
        let s = r.snapshot();
        assert_eq!(s.len(), 1);
        let g = &s[0];
        assert_eq!((g.kind.as_str(), g.completed, g.failed), ("gather", 2, 1));
        assert_eq!(g.buckets.len(), LATENCY_BUCKETS_S.len() + 1);
        assert_eq!(g.buckets[2], 1, "3 ms is in (2.5 ms, 5 ms]");
        assert_eq!(
            g.buckets[LATENCY_BUCKETS_S.len()],
            1,
            "a minute is past every bound"
        );
        assert!((g.sum_s - 60.003).abs() < 1e-9);
    }
}
