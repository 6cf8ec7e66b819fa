//! One call of each collective on every node, checked exactly: what ran, when the last
//! node returned, what the planner predicted.

use super::{Collective, Contender};
use crate::api::{Algorithm, BulkOptions, BulkReport, Node, NodeError, ReduceOp};
use crate::proto::NodeId;
use anyhow::{Context, bail};
use bytes::Bytes;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// What a contender's calls ask for: the algorithm forced (none for the default), and for
/// the static hierarchy the topology file's clusters.
pub(super) fn options_for(contender: Contender, file_groups: &[Vec<NodeId>]) -> BulkOptions {
    BulkOptions {
        algorithm: match contender {
            Contender::Default => None,
            Contender::Forced(a) => Some(a),
        },
        groups: (contender == Contender::Forced(Algorithm::Hierarchical))
            .then(|| file_groups.to_vec()),
        timeout: Duration::from_secs(900),
        ..BulkOptions::default()
    }
}

/// Node `i`'s value at `j`: small integers, so f32 sums are exact in any order.
fn value(i: usize, j: usize) -> f32 {
    ((i + 1) * (j % 5)) as f32
}

/// One allreduce (or reduce to the first node) on every node: (what ran, completion s,
/// predicted s). Fails if any node failed or got a wrong result.
pub(super) async fn reduce(
    nodes: &[Node],
    (collective, contender): (Collective, Contender),
    name: &str,
    bytes: u64,
    file_groups: &[Vec<NodeId>],
) -> anyhow::Result<(Algorithm, f64, f64)> {
    let len = (bytes / 4) as usize;
    let n = nodes.len();
    let options = options_for(contender, file_groups);
    let root = (collective == Collective::Reduce).then(|| nodes[0].id());
    let start = Instant::now();
    let calls = nodes.iter().enumerate().map(|(i, node)| {
        let (node, options, name) = (node.clone(), options.clone(), name.to_string());
        tokio::spawn(async move {
            let mut data: Vec<f32> = (0..len).map(|j| value(i, j)).collect();
            let report = match root {
                Some(r) => {
                    (node.reduce_slice_with(&name, r, &mut data, ReduceOp::Sum, options)).await
                }
                None => (node.allreduce_slice_with(&name, &mut data, ReduceOp::Sum, options)).await,
            };
            let done = start.elapsed().as_secs_f64();
            // The result where it is due; elsewhere (a reduce) the vector unchanged.
            let total = if root.is_none() || i == 0 {
                (n * (n + 1) / 2) as f32
            } else {
                (i + 1) as f32
            };
            let exact = data
                .iter()
                .enumerate()
                .all(|(j, v)| *v == total * (j % 5) as f32);
            (report.map(|r| (exact, r)), done)
        })
    });
    tally(calls, collective.name(), |_, exact| *exact).await
}

/// Waits for every node's call (each gives its output, its report and when it returned)
/// and gives what ran, when the last returned and the prediction; fails if a call failed,
/// `right(i, output)` says node `i`'s output is wrong, or a report misses a contributor.
async fn tally<T>(
    calls: impl IntoIterator<Item = JoinHandle<(Result<(T, BulkReport), NodeError>, f64)>>,
    what: &str,
    right: impl Fn(usize, &T) -> bool,
) -> anyhow::Result<(Algorithm, f64, f64)> {
    let results = futures::future::join_all(calls).await;
    let n = results.len();
    let mut last: f64 = 0.0;
    let mut ran = None;
    for (i, r) in results.into_iter().enumerate() {
        let (out, done) = r.context("a call panicked")?;
        let (got, report) = out.with_context(|| format!("node {i}"))?;
        if !right(i, &got) || report.contributors.len() != n {
            bail!("node {i}: a wrong {what} ({report:?})");
        }
        last = last.max(done);
        ran = Some((report.algorithm, report.predicted.as_secs_f64()));
    }
    let (algorithm, predicted) = ran.context("no nodes")?;
    Ok((algorithm, last, predicted))
}

/// A piece of member `i`: its index repeated.
fn piece(i: usize, len: usize) -> Bytes {
    Bytes::from(vec![i as u8; len])
}

/// One scatter or gather on every node, the first node the root: (what ran, completion s,
/// predicted s). Fails if any node failed or a piece came wrong.
pub(super) async fn routed(
    nodes: &[Node],
    (collective, contender): (Collective, Contender),
    name: &str,
    bytes: u64,
    file_groups: &[Vec<NodeId>],
) -> anyhow::Result<(Algorithm, f64, f64)> {
    let n = nodes.len();
    let each = (bytes / n as u64) as usize;
    let root = nodes[0].id();
    let options = options_for(contender, file_groups);
    let ids: Vec<NodeId> = nodes.iter().map(Node::id).collect();
    let start = Instant::now();
    let calls = nodes.iter().enumerate().map(|(i, node)| {
        let (node, options, name, ids) =
            (node.clone(), options.clone(), name.to_string(), ids.clone());
        tokio::spawn(async move {
            let out = match (collective, i) {
                (Collective::Scatter, 0) => {
                    let pieces = ids
                        .iter()
                        .enumerate()
                        .map(|(j, id)| (*id, piece(j, each)))
                        .collect();
                    node.scatter_pieces(&name, pieces, options)
                        .await
                        .map(|(p, r)| (vec![(ids[0], p)], r))
                }
                (Collective::Scatter, _) => node
                    .scatter_receive(&name, root, options)
                    .await
                    .map(|(p, r)| (vec![(ids[i], p)], r)),
                _ => {
                    node.gather_pieces(&name, root, piece(i, each), options)
                        .await
                }
            };
            (out, start.elapsed().as_secs_f64())
        })
    });
    let want = |i: usize| -> Vec<(NodeId, Bytes)> {
        match (collective, i) {
            (Collective::Scatter, _) => vec![(ids[i], piece(i, each))],
            (_, 0) => {
                // The root gets the pieces in id order.
                let mut all: Vec<(NodeId, Bytes)> = (ids.iter().enumerate())
                    .map(|(j, id)| (*id, piece(j, each)))
                    .collect();
                all.sort_by_key(|(id, _)| *id);
                all
            }
            _ => Vec::new(),
        }
    };
    tally(calls, collective.name(), |i, got| *got == want(i)).await
}

/// One allgather on every node, equal pieces: (what ran, completion s, predicted s).
/// Fails if any node failed or did not get every piece whole.
pub(super) async fn allgather(
    nodes: &[Node],
    name: &str,
    bytes: u64,
    contender: Contender,
    file_groups: &[Vec<NodeId>],
) -> anyhow::Result<(Algorithm, f64, f64)> {
    let n = nodes.len();
    let each = (bytes / n as u64) as usize;
    let options = options_for(contender, file_groups);
    let mut want: Vec<(NodeId, Bytes)> = (nodes.iter().enumerate())
        .map(|(j, node)| (node.id(), piece(j, each)))
        .collect();
    want.sort_by_key(|(id, _)| *id);
    let start = Instant::now();
    let calls = nodes.iter().enumerate().map(|(i, node)| {
        let (node, options, name) = (node.clone(), options.clone(), name.to_string());
        tokio::spawn(async move {
            let out = node.allgather_pieces(&name, piece(i, each), options).await;
            (out, start.elapsed().as_secs_f64())
        })
    });
    tally(calls, "allgather", |_, got| *got == want).await
}
