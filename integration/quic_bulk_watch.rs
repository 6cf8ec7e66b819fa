//! Long large collectives watched and cancelled, over real QUIC on das-4 (two nodes per
//! cluster, bandwidths emulated): progress moves while the data moves; a participant
//! that cancels stops the operation for every caller with an error naming it (no one
//! waits out a timeout), and so does a planner that cancels; the overlay runs the next
//! operation as usual.
//!
//! `cargo test --release --test integration quic_bulk_watch -- --nocapture` prints times.

use crate::quic_bandwidth::start_das4;
use overlay::bulk::{BulkOptions, BulkPhase, BulkReport, BulkTask, ReduceOp};
use overlay::{Node, NodeError};
use std::time::{Duration, Instant};

type Task = BulkTask<(Vec<f32>, BulkReport)>;

/// 8 MiB of f32 on every node: several seconds over das-4's slow links.
fn start_all(nodes: &[Node], name: &str) -> Vec<Task> {
    (nodes.iter())
        .map(|n| {
            n.start_allreduce(
                name,
                vec![1.0f32; 2 << 20],
                ReduceOp::Sum,
                BulkOptions::default(),
            )
        })
        .collect()
}

/// Waits until `task` has moved some of its data.
async fn until_running(task: &Task) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p = task.progress();
        if p.phase == BulkPhase::Running && p.parts_done > 0 && p.sent_bytes > 0 {
            assert!(p.parts_total >= p.parts_done, "{p:?}");
            return;
        }
        assert!(Instant::now() < deadline, "never ran: {p:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every task ends with an error soon after the cancel: `canceller`'s own says so, the
/// others' name `why`.
async fn all_stop(tasks: Vec<(usize, Task)>, canceller: usize, why: &str) -> Duration {
    let start = Instant::now();
    let mut results: Vec<(usize, Result<_, NodeError>)> = Vec::new();
    for (i, t) in tasks {
        let r = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .unwrap_or_else(|_| panic!("node {i} still waits 30 s after the cancel"));
        results.push((i, r.map(|_| ())));
    }
    for (i, r) in results {
        let e = r.expect_err("a cancelled operation commits nowhere");
        let text = e.to_string();
        if i == canceller {
            assert!(
                text.contains("cancelled by this caller"),
                "node {i}: {text}"
            );
        } else {
            assert!(text.contains(why), "node {i}: {text}");
        }
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_allreduce_stops_everywhere_and_the_next_one_runs() {
    let _net = crate::common::real_network();
    let (_topo, overlay) = start_das4().await;
    let nodes = overlay.nodes.clone();
    let mut by_id: Vec<usize> = (0..nodes.len()).collect();
    by_id.sort_by_key(|i| nodes[*i].id());
    let planner = by_id[0];
    let participant = by_id[by_id.len() - 1];

    // A participant cancels in the middle.
    let tasks = start_all(&nodes, "watched");
    until_running(&tasks[participant]).await;
    let before = tasks[participant].progress();
    tasks[participant].cancel();
    let short = nodes[participant].id().short();
    let tasks = tasks.into_iter().enumerate().collect();
    let took = all_stop(tasks, participant, &format!("cancelled by {short}")).await;
    println!(
        "participant cancelled at {}/{} parts ({} bytes sent): everyone stopped within {took:?}",
        before.parts_done, before.parts_total, before.sent_bytes
    );

    // The planner cancels: dropping its task is a cancel too.
    let tasks = start_all(&nodes, "watched-2");
    until_running(&tasks[planner]).await;
    let (mine, others): (Vec<_>, Vec<_>) = tasks
        .into_iter()
        .enumerate()
        .partition(|(i, _)| *i == planner);
    drop(mine);
    let took = all_stop(others, planner, "cancelled by its planner").await;
    println!("planner dropped its task: everyone stopped within {took:?}");

    // The overlay is fine: a small allreduce commits everywhere, watched to the end.
    let tasks: Vec<_> = (nodes.iter())
        .map(|n| {
            n.start_allreduce(
                "after",
                vec![2.0f32; 1000],
                ReduceOp::Sum,
                BulkOptions::default(),
            )
        })
        .collect();
    for t in tasks {
        let watch = t.watch().clone();
        let (v, report) = tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("no hang")
            .expect("the next operation commits");
        assert_eq!(report.contributors.len(), nodes.len());
        assert!(v.iter().all(|x| *x == 2.0 * nodes.len() as f32));
        let p = watch.progress();
        assert_eq!(p.phase, BulkPhase::Finished);
        assert_eq!(p.parts_done, p.parts_total, "{p:?}");
    }
    overlay.shutdown().await;
}
