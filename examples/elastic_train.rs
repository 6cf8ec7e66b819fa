//! An elastic data-parallel loop: workers allreduce a float vector every step, a worker
//! leaves mid-run and a new one joins, and the loop resumes from the last committed step
//! with new ranks and ends with the exact expected result.
//!
//! Every worker joins the group `train` and loops:
//! 1. `rendezvous(2..=16)`: a round with an epoch, the members and this worker's rank;
//! 2. agrees with the round on where to resume: an allreduce (max) of each member's last
//!    committed step, so a newcomer takes up the others' state;
//! 3. each step, allreduces (sum) a vector of ones plus one flag: "I see the group changed".
//!    Each element must come back as the round's size; the step is then committed (the
//!    running mean grows by exactly one). A flag raised anywhere makes every member go
//!    back to 1 after this step, together; a member lost mid-step fails the step with
//!    `RoundBroken` on every member, and the step is run again in the next round.
//!
//! At the end every element of every worker's mean equals the number of steps, exactly.
//!
//!     cargo run --release --example elastic_train
//!     cargo run --release --example elastic_train -- --workers 4 --steps 20 --len 100000

use anyhow::{Context, bail, ensure};
use clap::Parser;
use overlay::api::{NodeError, RendezvousOptions};
use overlay::bulk::ReduceOp;
use overlay::{JoinToken, Node};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Parser, Clone)]
struct Args {
    /// Workers at the start.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Steps of the loop.
    #[arg(long, default_value_t = 16)]
    steps: u64,
    /// The computation of one step, in milliseconds (slept).
    #[arg(long, default_value_t = 250)]
    step_ms: u64,
    /// Elements of the vector.
    #[arg(long, default_value_t = 10_000)]
    len: usize,
}

/// How a worker's run ended.
#[derive(Debug)]
enum End {
    /// It finished every step with this mean vector, over these rounds.
    Done { mean: Vec<f64>, epochs: Vec<u64> },
    /// It left at this step, as told.
    Left(u64),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.workers >= 2 && args.steps >= 4,
        "needs 2 workers and 4 steps at least"
    );
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let seed = Node::builder().listen(any).start().await?;
    let token = seed.token();
    let mut tasks = Vec::new();
    let mut nodes = Vec::new();
    for w in 0..args.workers {
        let node = join(seed.local_addr(), &token).await?;
        // The second worker leaves at a third of the run.
        let quit = (w == 1).then_some(args.steps / 3);
        nodes.push(node.clone());
        tasks.push(tokio::spawn(train(node, args.clone(), quit)));
    }
    // A new worker joins once the one that left is behind.
    while STEP.load(Ordering::Relaxed) < args.steps / 3 + 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let late = join(seed.local_addr(), &token).await?;
    println!("a new worker {} joins", late.id().short());
    tasks.push(tokio::spawn(train(late, args.clone(), None)));
    let mut finished = 0;
    for t in tasks {
        match t.await.context("worker task")?? {
            End::Done { mean, epochs } => {
                let exact = mean.iter().all(|m| *m == args.steps as f64);
                ensure!(exact, "a mean is not {}: {:?}", args.steps, &mean[..4]);
                println!(
                    "worker done, exact mean {} over epochs {epochs:?}",
                    args.steps
                );
                finished += 1;
            }
            End::Left(step) => println!("worker left at step {step}"),
        }
    }
    ensure!(
        finished == args.workers,
        "{finished} finished of {}",
        args.workers
    );
    println!("elastic training: {finished} workers finished every step with the exact result");
    seed.leave().await;
    Ok(())
}

async fn join(seed: SocketAddr, token: &JoinToken) -> anyhow::Result<Node> {
    let node = Node::builder()
        .listen("127.0.0.1:0".parse()?)
        .join(seed)
        .token(token.clone())
        .start()
        .await?;
    Ok(node)
}

/// The furthest step any worker committed (for the demo's timing only).
static STEP: AtomicU64 = AtomicU64::new(0);

async fn train(node: Node, args: Args, quit: Option<u64>) -> anyhow::Result<End> {
    let (steps, len) = (args.steps, args.len);
    let group = node.group("train")?;
    group.join().await?;
    let mut committed = 0u64;
    let mut mean = vec![0.0f64; len];
    let mut epochs = Vec::new();
    while committed < steps {
        let options = RendezvousOptions::new(2..=16, Duration::from_secs(20));
        let round = group.rendezvous(options).await?;
        epochs.push(round.epoch);
        let me = node.id().short();
        println!(
            "{me}: epoch {} rank {} of {}",
            round.epoch,
            round.rank,
            round.members.len()
        );
        // Resume from the furthest committed step of the round (a newcomer starts there).
        let mut at = [committed as f64];
        let name = "resume";
        match round.allreduce_slice(name, &mut at, ReduceOp::Max).await {
            Ok(_) => {}
            Err(NodeError::RoundBroken { .. }) => continue,
            Err(e) => bail!(e),
        }
        if at[0] as u64 > committed {
            committed = at[0] as u64;
            mean = vec![committed as f64; len];
        }
        while committed < steps {
            if quit == Some(committed) {
                node.leave().await;
                return Ok(End::Left(committed));
            }
            tokio::time::sleep(Duration::from_millis(args.step_ms)).await; // "compute"
            let changed = !round.changes().is_empty();
            let mut v = vec![1.0f64; len + 1];
            v[len] = f64::from(u8::from(changed));
            let name = format!("step-{committed}");
            match round.allreduce_slice(&name, &mut v, ReduceOp::Sum).await {
                Ok(_) => {}
                Err(NodeError::RoundBroken { reason, .. }) => {
                    println!("{me}: step {committed} not committed ({reason})");
                    break;
                }
                Err(e) => bail!(e),
            }
            let n = round.members.len() as f64;
            ensure!(
                v[..len].iter().all(|x| *x == n),
                "step {committed}: a sum is not {n}"
            );
            for m in &mut mean {
                *m += v[0] / n;
            }
            committed += 1;
            STEP.fetch_max(committed, Ordering::Relaxed);
            if v[len] > 0.0 {
                break; // the group changed: a new round after this step, all together
            }
        }
    }
    group.leave().await?;
    Ok(End::Done { mean, epochs })
}
