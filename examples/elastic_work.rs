//! Elastic work: workers join and leave while a coordinator hands out work with `scatter`
//! and collects the results with `gather`.
//!
//! The job is to count the primes below `--limit` (default 2,000,000), cut into `--chunks`
//! pieces (default 24). Each round the coordinator
//!
//! 1. asks who is there: a `gather` of the key `elastic.worker`, which every worker
//!    publishes its name under (other members decline);
//! 2. gives each worker `--per-worker` chunks (default 1) with one `scatter`; a worker
//!    receives its item through its `deliveries()` stream, counts the primes by trial
//!    division and publishes the counts under the round's key `elastic.result.<round>`;
//! 3. `gather`s that key until every worker that took an item has answered, has left, or
//!    the deadline passed. Chunks of workers that left or did not answer are reported
//!    missing and go back to the front of the queue for the next round;
//! 4. checks every count against a sieve computed here.
//!
//! When every chunk is counted, the coordinator checks the total, `broadcast`s "done" (the
//! workers stop) and exits with a non-zero status if any answer was wrong.
//!
//! In one process (the default): a coordinator and 6 workers on 127.0.0.1. Between rounds
//! the oldest worker leaves (`leave()`) and a new one joins, and worker w4 leaves in round 2
//! right after taking its item, so its chunk is reported missing and redistributed:
//!
//!     cargo run --release --example elastic_work
//!     cargo run --release --example elastic_work -- --workers 10 --chunks 60 --limit 5000000
//!
//! Across machines, one role per process. The coordinator prints the command that joins
//! it; start and stop workers whenever you like (Ctrl-C makes a worker leave gracefully,
//! `--quit-on-item N` makes it leave right after taking its N-th item, without answering):
//!
//!     # machine A: the coordinator waits for 2 workers, pauses 2 s between rounds
//!     cargo run --release --example elastic_work -- --role coordinator --listen 10.0.0.1:7500 --min-workers 2 --pause-ms 2000
//!     # machines B, C, ...
//!     cargo run --release --example elastic_work -- --role worker --listen 10.0.0.2:7500 --join 10.0.0.1:7500 --token ovl1-...

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use futures::StreamExt;
use futures::stream::BoxStream;
use overlay::api::{Delivery, Node};
use overlay::net::token::JoinToken;
use overlay::proto::{DeliveryKind, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Every worker publishes its name under this key; a gather of it lists the workers.
const WORKER_KEY: &str = "elastic.worker";

/// The key workers publish their answers of `round` under.
fn result_key(round: u32) -> String {
    format!("elastic.result.{round}")
}

/// How long the coordinator waits for the answers of one round.
const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// Deadline of each collective operation the coordinator starts.
const OP_TIMEOUT: Duration = Duration::from_secs(3);

/// Elastic work with scatter and gather (see the top of examples/elastic_work.rs).
#[derive(Parser, Debug)]
#[command(name = "elastic_work")]
struct Args {
    /// Run one role in this process (across machines); without it, a coordinator and
    /// several workers run here.
    #[arg(long, value_enum)]
    role: Option<Role>,
    /// The address to listen on, e.g. 10.0.0.1:7500 (default 127.0.0.1 and any port).
    #[arg(long, requires = "role")]
    listen: Option<SocketAddr>,
    /// Join the overlay through the member at this address (workers need it).
    #[arg(
        long,
        requires = "role",
        requires = "token",
        required_if_eq("role", "worker")
    )]
    join: Option<SocketAddr>,
    /// The overlay's join token (printed by the coordinator).
    #[arg(long, requires = "join")]
    token: Option<JoinToken>,
    /// A name shown to the other members (default: the node's short id).
    #[arg(long, requires = "role")]
    name: Option<String>,
    /// Coordinator: count the primes below this number.
    #[arg(long, default_value_t = 2_000_000,
          value_parser = clap::value_parser!(u64).range(10..=100_000_000))]
    limit: u64,
    /// Coordinator: cut the job into this many chunks.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    chunks: u64,
    /// Coordinator: chunks each worker gets per round.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000))]
    per_worker: u64,
    /// Coordinator: wait for at least this many workers before each round.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    min_workers: u64,
    /// Coordinator: pause between rounds, in ms (to add or stop workers by hand).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pause_ms: u64,
    /// Coordinator: give up after this many rounds.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    max_rounds: u32,
    /// In one process: how many workers to start.
    #[arg(long, default_value_t = 6, conflicts_with = "role",
          value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// Worker: leave right after taking the N-th item, without answering.
    #[arg(long, requires = "role", value_parser = clap::value_parser!(u32).range(1..))]
    quit_on_item: Option<u32>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Hands out the work and checks the answers.
    Coordinator,
    /// Counts primes in the chunks it is given.
    Worker,
}

/// A piece of the job: count the primes in `start..end`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
struct Chunk {
    index: u32,
    start: u64,
    end: u64,
}

/// What the coordinator scatters to one worker.
#[derive(Serialize, Deserialize, Debug)]
struct WorkItem {
    round: u32,
    chunks: Vec<Chunk>,
}

/// What a worker publishes under the round's key: each chunk with its count.
#[derive(Serialize, Deserialize, Debug)]
struct WorkResult {
    round: u32,
    counts: Vec<(Chunk, u64)>,
}

/// What the coordinator broadcasts at the end.
#[derive(Serialize, Deserialize, Debug)]
enum Control {
    Done { primes: u64 },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.chunks > args.limit {
        bail!(
            "--chunks {} is more than --limit {}: every chunk needs at least one number",
            args.chunks,
            args.limit
        );
    }
    match args.role {
        None => in_one_process(&args).await,
        Some(Role::Coordinator) => coordinator_process(&args).await,
        Some(Role::Worker) => worker_process(&args).await,
    }
}

/// A node builder from the flags shared by both roles.
fn builder(args: &Args, default_name: &str) -> overlay::api::NodeBuilder {
    let mut b = Node::builder().name(args.name.clone().unwrap_or(default_name.to_string()));
    if let Some(addr) = args.listen {
        b = b.listen(addr);
    }
    if let Some(addr) = args.join {
        b = b.join(addr);
    }
    if let Some(token) = &args.token {
        b = b.token(token.clone());
    }
    b.op_timeout(OP_TIMEOUT)
}

// ---------------------------------------------------------------------------------------
// The demo in one process.
// ---------------------------------------------------------------------------------------

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
struct Demo {
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
            .token(self.coordinator.token().clone())
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
    async fn churn(&mut self) -> anyhow::Result<()> {
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

async fn in_one_process(args: &Args) -> anyhow::Result<()> {
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

// ---------------------------------------------------------------------------------------
// One role per process.
// ---------------------------------------------------------------------------------------

async fn coordinator_process(args: &Args) -> anyhow::Result<()> {
    let node = builder(args, "coordinator")
        .start()
        .await
        .context("starting the coordinator")?;
    println!(
        "coordinator {} on {}; job: count the primes below {} in {} chunks",
        node.id().short(),
        node.local_addr(),
        args.limit,
        args.chunks
    );
    println!(
        "workers join with: cargo run --release --example elastic_work -- --role worker --listen ADDR --join {} --token {}",
        node.local_addr(),
        node.token()
    );
    let mut coordinator = Coordinator::new(node.clone(), Job::new(args.limit, args.chunks), args);
    let outcome = tokio::select! {
        outcome = coordinator.run(None) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    node.leave().await;
    outcome
}

async fn worker_process(args: &Args) -> anyhow::Result<()> {
    let node = builder(args, "")
        .start()
        .await
        .context("starting the worker")?;
    let name = args.name.clone().unwrap_or_else(|| node.id().short());
    println!(
        "worker {name} on {} joined the overlay; waiting for work (Ctrl-C to leave)",
        node.local_addr()
    );
    let worker = Worker::start(node.clone(), name, args.quit_on_item, true).await?;
    let outcome = tokio::select! {
        outcome = worker.run() => {
            // Other members may still be confirming the "done" broadcast through this
            // node (it can be their parent in the coordinator's tree): give them a moment.
            tokio::time::sleep(Duration::from_secs(1)).await;
            outcome
        }
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    println!("leaving");
    node.leave().await;
    outcome
}

// ---------------------------------------------------------------------------------------
// The worker.
// ---------------------------------------------------------------------------------------

struct Worker {
    node: Node,
    name: String,
    deliveries: BoxStream<'static, Delivery>,
    quit_on_item: Option<u32>,
    verbose: bool,
}

impl Worker {
    /// Subscribes to the node's deliveries, then announces itself as a worker (in this
    /// order, so that no item sent after the announcement is missed).
    async fn start(
        node: Node,
        name: String,
        quit_on_item: Option<u32>,
        verbose: bool,
    ) -> anyhow::Result<Worker> {
        let deliveries = node.deliveries().boxed();
        node.publish_value(WORKER_KEY, &name).await?;
        Ok(Worker {
            node,
            name,
            deliveries,
            quit_on_item,
            verbose,
        })
    }

    /// Works on every item delivered until the coordinator says "done" or the node stops
    /// (the caller then makes it leave), or until the `quit_on_item`-th item: then it
    /// leaves at once, without answering.
    async fn run(mut self) -> anyhow::Result<()> {
        let mut items = 0;
        let mut last_key: Option<String> = None;
        while let Some(d) = self.deliveries.next().await {
            match d.kind {
                DeliveryKind::Scatter => {
                    let Ok(item) = d.decode::<WorkItem>() else {
                        println!("{}: ignoring an item that does not decode", self.name);
                        continue;
                    };
                    items += 1;
                    if self.quit_on_item == Some(items) {
                        println!(
                            "   ({} took its item of round {} and leaves without answering)",
                            self.name, item.round
                        );
                        self.node.leave().await;
                        break;
                    }
                    let t = Instant::now();
                    let chunks = item.chunks.clone();
                    let counts = tokio::task::spawn_blocking(move || {
                        chunks
                            .iter()
                            .map(|c| (*c, count_primes(c.start, c.end)))
                            .collect::<Vec<_>>()
                    })
                    .await?;
                    if self.verbose {
                        for (c, n) in &counts {
                            println!(
                                "round {}: chunk {} [{}, {}) has {n} primes ({:.0} ms)",
                                item.round,
                                c.index,
                                c.start,
                                c.end,
                                t.elapsed().as_secs_f64() * 1e3
                            );
                        }
                    }
                    let key = result_key(item.round);
                    let result = WorkResult {
                        round: item.round,
                        counts,
                    };
                    self.node.publish_value(&key, &result).await?;
                    // The previous round's answer is no longer needed.
                    if let Some(old) = last_key.replace(key)
                        && old != result_key(item.round)
                    {
                        self.node.withdraw(&old).await?;
                    }
                }
                DeliveryKind::Broadcast => {
                    if let Ok(Control::Done { primes }) = d.decode::<Control>() {
                        if self.verbose {
                            println!("the coordinator is done: {primes} primes");
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Counts the primes in `start..end` by trial division (the coordinator checks with a
/// sieve, a different method).
fn count_primes(start: u64, end: u64) -> u64 {
    (start..end).filter(|&n| is_prime(n)).count() as u64
}

fn is_prime(n: u64) -> bool {
    if n < 4 {
        return n >= 2;
    }
    if n.is_multiple_of(2) || n.is_multiple_of(3) {
        return false;
    }
    let mut d = 5;
    while d * d <= n {
        if n.is_multiple_of(d) || n.is_multiple_of(d + 2) {
            return false;
        }
        d += 6;
    }
    true
}

// ---------------------------------------------------------------------------------------
// The coordinator.
// ---------------------------------------------------------------------------------------

/// The job: the chunks, the answers so far, and the counts a sieve gives.
struct Job {
    limit: u64,
    chunks: Vec<Chunk>,
    /// Primes in each chunk, computed here with a sieve.
    expected: Vec<u64>,
    /// Chunks not counted yet, in the order they will be handed out.
    queue: VecDeque<Chunk>,
    /// Each counted chunk's answer.
    answers: BTreeMap<u32, u64>,
    /// Answers that disagreed with the sieve.
    wrong: usize,
    /// Chunks handed out again after a worker left or did not answer.
    redistributed: usize,
}

impl Job {
    fn new(limit: u64, chunks: u64) -> Job {
        let chunks: Vec<Chunk> = (0..chunks)
            .map(|k| Chunk {
                index: k as u32,
                start: limit * k / chunks,
                end: limit * (k + 1) / chunks,
            })
            .collect();
        let composite = sieve(limit);
        let expected = chunks
            .iter()
            .map(|c| (c.start..c.end).filter(|&n| !composite[n as usize]).count() as u64)
            .collect();
        Job {
            limit,
            queue: chunks.iter().copied().collect(),
            chunks,
            expected,
            answers: BTreeMap::new(),
            wrong: 0,
            redistributed: 0,
        }
    }

    fn finished(&self) -> bool {
        self.answers.len() == self.chunks.len()
    }
}

/// `composite[n]` for every `n < limit` (0 and 1 count as composite).
fn sieve(limit: u64) -> Vec<bool> {
    let limit = limit as usize;
    let mut composite = vec![false; limit];
    for n in composite.iter_mut().take(2) {
        *n = true;
    }
    let mut p = 2;
    while p * p < limit {
        if !composite[p] {
            for m in (p * p..limit).step_by(p) {
                composite[m] = true;
            }
        }
        p += 1;
    }
    composite
}

struct Coordinator {
    node: Node,
    job: Job,
    per_worker: usize,
    min_workers: usize,
    pause: Duration,
    max_rounds: u32,
    /// Everyone who answered at least once.
    helped: BTreeSet<String>,
}

impl Coordinator {
    fn new(node: Node, job: Job, args: &Args) -> Coordinator {
        Coordinator {
            node,
            job,
            per_worker: args.per_worker as usize,
            min_workers: args.min_workers as usize,
            pause: Duration::from_millis(args.pause_ms),
            max_rounds: args.max_rounds,
            helped: BTreeSet::new(),
        }
    }

    /// Runs rounds until every chunk is counted (the demo changes the workers in between),
    /// tells the workers to stop, and checks the total.
    async fn run(&mut self, mut demo: Option<&mut Demo>) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut round = 0;
        while !self.job.finished() {
            if round == self.max_rounds {
                bail!(
                    "{} of {} chunks still not counted after {round} rounds",
                    self.job.queue.len(),
                    self.job.chunks.len()
                );
            }
            round += 1;
            let workers = self.wait_for_workers().await?;
            self.round(round, workers).await?;
            if self.job.finished() {
                break;
            }
            if let Some(demo) = demo.as_deref_mut() {
                demo.churn().await?;
            }
            tokio::time::sleep(self.pause).await;
        }

        let total: u64 = self.job.answers.values().sum();
        let report = self
            .node
            .broadcast_value(&Control::Done { primes: total })
            .await?;
        let expected: u64 = self.job.expected.iter().sum();
        println!(
            "\ndone in {} and {:.1} s: {} counted, {} handed out again; {} helped",
            count(round as usize, "round"),
            started.elapsed().as_secs_f64(),
            count(self.job.chunks.len(), "chunk"),
            self.job.redistributed,
            count(self.helped.len(), "worker")
        );
        println!(
            "primes below {}: {total} from the workers, {expected} from a sieve here: {}",
            self.job.limit,
            if total == expected && self.job.wrong == 0 {
                "ok"
            } else {
                "WRONG"
            }
        );
        println!(
            "\"done\" broadcast to {} members ({} missing)",
            report.delivered.len(),
            report.missing.len()
        );
        if self.job.wrong > 0 {
            bail!(
                "{} disagreed with the sieve",
                count(self.job.wrong, "answer")
            );
        }
        if total != expected {
            bail!("the workers counted {total} primes, the sieve {expected}");
        }
        Ok(())
    }

    /// The workers present now (a gather of [`WORKER_KEY`]), sorted by name; waits until
    /// there are at least `min_workers`.
    async fn wait_for_workers(&self) -> anyhow::Result<Vec<(NodeId, String)>> {
        let mut told = None;
        loop {
            let g = self.node.gather(WORKER_KEY, Vec::new()).await?;
            let mut workers: Vec<(NodeId, String)> = g.decode()?;
            workers.sort_by(|a, b| natural(&a.1).cmp(&natural(&b.1)).then(a.0.cmp(&b.0)));
            if workers.len() >= self.min_workers {
                return Ok(workers);
            }
            if told != Some(workers.len()) {
                println!(
                    "waiting for workers: {} of at least {}",
                    workers.len(),
                    self.min_workers
                );
                told = Some(workers.len());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// One round: split, scatter, gather, check.
    async fn round(&mut self, round: u32, workers: Vec<(NodeId, String)>) -> anyhow::Result<()> {
        let names: HashMap<NodeId, String> = workers.iter().cloned().collect();
        let name = |id: &NodeId| names.get(id).cloned().unwrap_or_else(|| id.short());

        // Split: each worker takes up to `per_worker` chunks from the front of the queue.
        let mut plan: Vec<(NodeId, Vec<Chunk>)> = Vec::new();
        for (id, _) in &workers {
            let take = self.per_worker.min(self.job.queue.len());
            if take == 0 {
                break;
            }
            plan.push((*id, self.job.queue.drain(..take).collect()));
        }
        let chunks_of: HashMap<NodeId, &Vec<Chunk>> = plan.iter().map(|(id, c)| (*id, c)).collect();
        let idle: Vec<String> = workers[plan.len()..]
            .iter()
            .map(|(_, n)| n.clone())
            .collect();
        println!(
            "\nround {round}: {} present ({}), {} to hand out",
            count(workers.len(), "worker"),
            workers
                .iter()
                .map(|(_, n)| n.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            count(
                plan.iter().map(|(_, c)| c.len()).sum::<usize>() + self.job.queue.len(),
                "chunk"
            )
        );

        // Scatter: one item per worker.
        let mut items = HashMap::new();
        for (id, chunks) in &plan {
            let item = WorkItem {
                round,
                chunks: chunks.clone(),
            };
            items.insert(*id, postcard::to_allocvec(&item)?);
        }
        let scattered = self.node.scatter(items).await?;
        let mut missing: Vec<(NodeId, &str)> = Vec::new();
        for id in &scattered.unknown {
            missing.push((*id, "was no longer a member when the items went out"));
        }
        for id in &scattered.missing {
            missing.push((*id, "did not confirm taking its item"));
        }

        // Gather until every worker that took an item has answered or is gone.
        let mut pending: BTreeSet<NodeId> = scattered
            .delivered
            .iter()
            .filter(|id| chunks_of.contains_key(id))
            .copied()
            .collect();
        let mut answers: HashMap<NodeId, WorkResult> = HashMap::new();
        let deadline = Instant::now() + ANSWER_DEADLINE;
        let key = result_key(round);
        let t = Instant::now();
        while !pending.is_empty() {
            let g = self.node.gather(&key, Vec::new()).await?;
            for (id, bytes) in &g.items {
                if !pending.remove(id) {
                    continue;
                }
                match postcard::from_bytes::<WorkResult>(bytes) {
                    Ok(r) if r.round == round => {
                        answers.insert(*id, r);
                    }
                    _ => missing.push((*id, "sent an answer that does not decode")),
                }
            }
            // A worker still counting declines (no value yet); one that neither answered
            // nor declined has left (or did not answer in time).
            let counting: BTreeSet<NodeId> = g.declined.iter().copied().collect();
            for id in pending.iter().filter(|id| !counting.contains(id)) {
                missing.push((*id, "left without answering"));
            }
            pending.retain(|id| counting.contains(id));
            if Instant::now() >= deadline {
                for id in &pending {
                    missing.push((*id, "did not answer in time"));
                }
                break;
            }
            if !pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }

        // Check and record the answers; chunks without one go back to the front.
        let mut round_total = 0;
        let mut round_expected = 0;
        let mut back: Vec<Chunk> = Vec::new();
        for (id, chunks) in &plan {
            let Some(result) = answers.get(id) else {
                back.extend(chunks);
                continue;
            };
            let mut line = Vec::new();
            for chunk in chunks {
                let Some((_, primes)) = result.counts.iter().find(|(c, _)| c == chunk) else {
                    line.push(format!("chunk {} not answered", chunk.index));
                    back.push(*chunk);
                    continue;
                };
                let expected = self.job.expected[chunk.index as usize];
                let verdict = if *primes == expected {
                    ""
                } else {
                    self.job.wrong += 1;
                    "  WRONG"
                };
                line.push(format!(
                    "chunk {:>2} [{}, {}): {primes} primes{verdict}",
                    chunk.index, chunk.start, chunk.end
                ));
                round_total += primes;
                round_expected += expected;
                self.job.answers.insert(chunk.index, *primes);
            }
            self.helped.insert(name(id));
            println!("  {:<6} {}", name(id), line.join("; "));
        }
        back.sort_by_key(|c| c.index);
        self.job.redistributed += back.len();
        for chunk in back.iter().rev() {
            self.job.queue.push_front(*chunk);
        }

        let worked: Vec<String> = plan
            .iter()
            .filter(|(id, _)| answers.contains_key(id))
            .map(|(id, _)| name(id))
            .collect();
        println!("  worked: {}", list(&worked));
        let missing_text: Vec<String> = missing
            .iter()
            .map(|(id, why)| {
                let chunks: Vec<String> = chunks_of
                    .get(id)
                    .map(|cs| cs.iter().map(|c| c.index.to_string()).collect())
                    .unwrap_or_default();
                let chunks = match chunks.len() {
                    1 => format!("chunk {}", chunks[0]),
                    _ => format!("chunks {}", chunks.join(", ")),
                };
                format!("{} ({why}; {chunks} back in the queue)", name(id))
            })
            .collect();
        println!("  missing: {}", list(&missing_text));
        if !idle.is_empty() {
            println!("  idle (nothing left to hand out): {}", idle.join(" "));
        }
        println!(
            "  round answer: {round_total} primes; the sieve says {round_expected}: {}; {} of {} chunks done (answers in {:.0} ms)",
            if round_total == round_expected {
                "ok"
            } else {
                "WRONG"
            },
            self.job.answers.len(),
            self.job.chunks.len(),
            t.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    }
}

/// "1 chunk", "2 chunks".
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Sorts "w2" before "w10".
fn natural(name: &str) -> (usize, &str) {
    (name.len(), name)
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}
