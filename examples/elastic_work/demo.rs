//! The demo in one process: a coordinator and workers that join and leave between rounds.

use crate::coordinator::{Coordinator, Job, count};
use crate::worker::Worker;
use crate::{Args, WORKER_KEY, builder};
use anyhow::Context;
use overlay::api::Node;
use overlay::proto::NodeId;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// A worker started by the demo.
struct DemoWorker {
    name: String,
    /// Leaves by itself in round 2.
    quits: bool,
    node: Node,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// The demo's side of elasticity: starts workers, and between rounds makes one leave and
/// another join.
pub(crate) struct Demo {
    coordinator: Node,
    workers: Vec<DemoWorker>,
    started: usize,
}

impl Demo {
    async fn add_worker(&mut self, quit_on_item: Option<u32>) -> anyhow::Result<String> {
        self.started += 1;
        let name = format!("w{}", self.started);
        let node = Node::builder()
            .name(name.clone())
            .join(self.coordinator.local_addr())
            .token(self.coordinator.token())
            .start()
            .await
            .with_context(|| format!("starting worker {name}"))?;
        let worker = Worker::start(node.clone(), name.clone(), quit_on_item, false).await?;
        let task = tokio::spawn(worker.run());
        self.workers.push(DemoWorker {
            name: name.clone(),
            quits: quit_on_item.is_some(),
            node,
            task,
        });
        Ok(name)
    }

    /// Between rounds: the oldest running worker leaves, a new one joins.
    pub(crate) async fn churn(&mut self) -> anyhow::Result<()> {
        let mut gone = None;
        if let Some(i) = self
            .workers
            .iter()
            .position(|w| !w.quits && !w.node.is_stopped())
        {
            let w = self.workers.remove(i);
            w.node.leave().await;
            w.task.await??;
            gone = Some(w.name);
        }
        let name = self.add_worker(None).await?;
        match &gone {
            Some(left) => println!("-- {left} leaves, {name} joins"),
            None => println!("-- {name} joins"),
        }
        self.settle().await
    }

    /// Waits (up to 10 s) until the coordinator's gather of [`WORKER_KEY`] lists exactly
    /// the running workers, so that the next round sees the latest changes.
    async fn settle(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            // (A worker that quit may still be leaving: only count those running now.)
            let running: BTreeSet<NodeId> = self
                .workers
                .iter()
                .filter(|w| !w.node.is_stopped())
                .map(|w| w.node.id())
                .collect();
            let g = self.coordinator.gather(WORKER_KEY, Vec::new()).await?;
            let seen: BTreeSet<NodeId> = g.items.iter().map(|(id, _)| *id).collect();
            if seen == running {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn shutdown(self) -> anyhow::Result<()> {
        // The workers stopped working on the coordinator's "done"; now everyone leaves
        // (together: each leave waits up to half a second for its goodbyes to go out).
        let nodes = self.workers.iter().map(|w| &w.node);
        futures::future::join_all(nodes.chain([&self.coordinator]).map(|n| n.leave())).await;
        for w in self.workers {
            w.task.await??;
        }
        Ok(())
    }
}

pub(crate) async fn in_one_process(args: &Args) -> anyhow::Result<()> {
    let node = builder(args, "coordinator").start().await?;
    let job = Job::new(args.limit, args.chunks);
    println!(
        "coordinator on {}; job: count the primes below {} in {} chunks",
        node.local_addr(),
        args.limit,
        args.chunks
    );
    let mut demo = Demo {
        coordinator: node.clone(),
        workers: Vec::new(),
        started: 0,
    };
    // One worker (w4, or the last one if there are fewer) leaves in round 2 right after
    // taking its item.
    let n = args.workers as usize;
    let quitter = if n >= 2 { n.min(4) } else { 0 };
    for i in 1..=n {
        demo.add_worker((i == quitter).then_some(2)).await?;
    }
    println!(
        "{} joined: {}{}",
        count(n, "worker"),
        demo.workers
            .iter()
            .map(|w| w.name.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        if quitter > 0 {
            format!(" (w{quitter} will leave in round 2 without answering)")
        } else {
            String::new()
        }
    );
    demo.settle().await?;
    let mut coordinator = Coordinator::new(node, job, args);
    let outcome = coordinator.run(Some(&mut demo)).await;
    demo.shutdown().await?;
    outcome
}
