//! Large collectives in one process: an allreduce of a 4 MiB f32 vector, then a scatter and
//! a gather of 256 KiB pieces, every node taking part.
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
use std::collections::HashMap;
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
            .token(first.token().clone())
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

    // Allreduce: node i contributes (i + 1) * (j % 5) at j; exact in f32.
    let len = (args.mib << 20) as usize / 4;
    let calls = nodes.iter().enumerate().map(|(i, node)| async move {
        let mut v: Vec<f32> = (0..len).map(|j| ((i + 1) * (j % 5)) as f32).collect();
        let r = node
            .allreduce_slice("example-sum", &mut v, ReduceOp::Sum)
            .await;
        r.map(|r| (v, r))
    });
    let total = (n * (n + 1) / 2) as f32;
    for (i, out) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let (v, r) = out.with_context(|| format!("allreduce on n{}", i + 1))?;
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
