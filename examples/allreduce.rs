//! Large collectives in one process, every node taking part: an allreduce of a 4 MiB f32
//! vector (run as a watched task, its progress printed), a reduce of it to the last node,
//! a scatter, a gather and an allgather of 256 KiB pieces, and an allreduce of word counts
//! (a map merged by the program's own operation).
//!
//!     cargo run --release --example allreduce
//!     cargo run --release --example allreduce -- --nodes 12 --mib 16
//!
//! On loopback every node sits in one cluster, so the planner's model picks the shapes a
//! LAN suits; on a real wide-area network (or the netns testbed) it plans over the
//! clusters and bandwidths the nodes measure. Each report names the algorithm, its
//! prediction, and the contributors. The program exits with a non-zero status when a
//! result is wrong.

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Parser;
use overlay::bulk::{BulkOptions, ReduceOp};
use overlay::{Liveness, Node, NodeId};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Large collectives in one process (see the top of examples/allreduce.rs).
#[derive(Parser, Debug)]
struct Args {
    /// Nodes to start.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(2..=32))]
    nodes: u64,
    /// The allreduce's vector, MiB.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    mib: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let n = args.nodes as usize;
    let first = Node::builder().name("n1").start().await?;
    let mut nodes = vec![first.clone()];
    for i in 2..=n {
        let node = Node::builder()
            .name(format!("n{i}"))
            .join(first.local_addr())
            .token(first.token())
            .start()
            .await
            .with_context(|| format!("starting node n{i}"))?;
        nodes.push(node);
    }
    // Every caller must see every other as a member: the planner waits for the live ones.
    let t0 = Instant::now();
    while !all_know_all(&nodes).await {
        if t0.elapsed() > Duration::from_secs(30) {
            bail!("the nodes did not all learn of each other within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("{n} nodes on 127.0.0.1");

    // Allreduce: node i contributes (i + 1) * (j % 5) at j; exact in f32. Each call runs as
    // a task; n1's progress is printed while it runs.
    let len = (args.mib << 20) as usize / 4;
    let vector = |i: usize| -> Vec<f32> { (0..len).map(|j| ((i + 1) * (j % 5)) as f32).collect() };
    let tasks: Vec<_> = (nodes.iter().enumerate())
        .map(|(i, node)| {
            node.start_allreduce(
                "example-sum",
                vector(i),
                ReduceOp::Sum,
                BulkOptions::default(),
            )
        })
        .collect();
    while !tasks[0].watch().progress().phase.is_over() {
        let p = tasks[0].progress();
        println!(
            "  n1: {:?}, {}/{} parts, {} KiB sent",
            p.phase,
            p.parts_done,
            p.parts_total,
            p.sent_bytes >> 10
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let total = (n * (n + 1) / 2) as f32;
    for (i, task) in tasks.into_iter().enumerate() {
        let (v, r) = task
            .await
            .with_context(|| format!("allreduce on n{}", i + 1))?;
        if v.iter()
            .enumerate()
            .any(|(j, x)| *x != total * (j % 5) as f32)
        {
            bail!("n{}: a wrong sum", i + 1);
        }
        if i == 0 {
            println!(
                "allreduce of {} MiB f32: {} contributors, {} ({:.3} s, predicted {:.3} s)",
                args.mib,
                r.contributors.len(),
                r.algorithm.name(),
                r.elapsed.as_secs_f64(),
                r.predicted.as_secs_f64()
            );
        }
    }

    // Reduce to the last node: the sum there, every other vector as it was.
    let last = nodes[n - 1].id();
    let calls = nodes.iter().enumerate().map(|(i, node)| async move {
        let mut v = vector(i);
        let r = node
            .reduce_slice("example-reduce", last, &mut v, ReduceOp::Sum)
            .await;
        r.map(|r| (v, r))
    });
    for (i, out) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let (v, r) = out.with_context(|| format!("reduce on n{}", i + 1))?;
        let want = if i == n - 1 { total } else { (i + 1) as f32 };
        if v.iter()
            .enumerate()
            .any(|(j, x)| *x != want * (j % 5) as f32)
        {
            bail!("n{}: a wrong reduce", i + 1);
        }
        if i == n - 1 {
            println!(
                "reduce of {} MiB f32 to n{n}: {} ({:.3} s)",
                args.mib,
                r.algorithm.name(),
                r.elapsed.as_secs_f64()
            );
        }
    }

    // Scatter from n1: every node gets 256 KiB of its own index.
    let ids: Vec<NodeId> = nodes.iter().map(Node::id).collect();
    let root = ids[0];
    let piece = |i: usize| Bytes::from(vec![i as u8; 256 << 10]);
    let pieces: HashMap<NodeId, Bytes> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (*id, piece(i)))
        .collect();
    let calls = nodes.iter().enumerate().map(|(i, node)| {
        let pieces = pieces.clone();
        async move {
            match i {
                0 => {
                    node.scatter_pieces("example-work", pieces, BulkOptions::default())
                        .await
                }
                _ => {
                    node.scatter_receive("example-work", root, BulkOptions::default())
                        .await
                }
            }
        }
    });
    for (i, out) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let (mine, r) = out.with_context(|| format!("scatter on n{}", i + 1))?;
        if mine != piece(i) {
            bail!("n{}: a wrong piece", i + 1);
        }
        if i == 0 {
            println!(
                "scatter of {n} x 256 KiB from n1: {} ({:.3} s)",
                r.algorithm.name(),
                r.elapsed.as_secs_f64()
            );
        }
    }

    // Gather to n1: every node sends back its piece.
    let calls = nodes.iter().enumerate().map(|(i, node)| async move {
        node.gather_pieces("example-results", root, piece(i), BulkOptions::default())
            .await
    });
    for (i, out) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let (all, r) = out.with_context(|| format!("gather on n{}", i + 1))?;
        if i == 0 {
            let whole = all.len() == n
                && all.iter().all(|(id, p)| {
                    ids.iter()
                        .position(|x| x == id)
                        .is_some_and(|j| *p == piece(j))
                });
            if !whole {
                bail!("n1 gathered wrong pieces");
            }
            println!(
                "gather of {n} x 256 KiB to n1: {} ({:.3} s)",
                r.algorithm.name(),
                r.elapsed.as_secs_f64()
            );
        }
    }
    // Allgather: every node ends with every node's piece.
    let calls = nodes.iter().enumerate().map(|(i, node)| async move {
        node.allgather_pieces("example-shards", piece(i), BulkOptions::default())
            .await
    });
    for (i, out) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let (all, r) = out.with_context(|| format!("allgather on n{}", i + 1))?;
        let whole = all.len() == n
            && (all.iter()).all(|(id, p)| {
                ids.iter()
                    .position(|x| x == id)
                    .is_some_and(|j| *p == piece(j))
            });
        if !whole {
            bail!("n{} gathered wrong pieces", i + 1);
        }
        if i == 0 {
            println!(
                "allgather of {n} x 256 KiB: {} ({:.3} s)",
                r.algorithm.name(),
                r.elapsed.as_secs_f64()
            );
        }
    }

    // Word counts merged by the program's own operation (associative).
    let merge = |mut a: BTreeMap<String, u64>, b: BTreeMap<String, u64>| {
        for (word, count) in b {
            *a.entry(word).or_default() += count;
        }
        a
    };
    let calls = nodes.iter().enumerate().map(|(i, node)| async move {
        let words = BTreeMap::from([("node".to_string(), 1), (format!("parity-{}", i % 2), 1)]);
        node.allreduce_value("example-words", words, merge, BulkOptions::default())
            .await
    });
    for (i, out) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let (words, _) = out.with_context(|| format!("word counts on n{}", i + 1))?;
        if words.get("node") != Some(&(n as u64))
            || words.get("parity-0") != Some(&n.div_ceil(2).try_into()?)
        {
            bail!("n{}: wrong word counts {words:?}", i + 1);
        }
        if i == 0 {
            println!("word counts merged on every node: {words:?}");
        }
    }

    for node in &nodes {
        node.leave().await;
    }
    println!("all results exact");
    Ok(())
}

/// Whether every node sees every other alive.
async fn all_know_all(nodes: &[Node]) -> bool {
    for node in nodes {
        let Ok(members) = node.members().await else {
            return false;
        };
        let alive = members
            .iter()
            .filter(|m| m.state == Liveness::Alive)
            .count();
        if alive < nodes.len() {
            return false;
        }
    }
    true
}
