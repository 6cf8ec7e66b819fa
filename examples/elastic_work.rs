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
use overlay::api::Node;
use overlay::net::token::JoinToken;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

#[path = "elastic_work/coordinator.rs"]
mod coordinator;
#[path = "elastic_work/demo.rs"]
mod demo;
#[path = "elastic_work/worker.rs"]
mod worker;

use coordinator::{Coordinator, Job};
use demo::in_one_process;
use worker::Worker;

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
