//! The coordinator: the job, the rounds of scatter and gather, and the check of every count.

use crate::demo::Demo;
use crate::{ANSWER_DEADLINE, Args, Chunk, Control, WORKER_KEY, WorkItem, WorkResult, result_key};
use anyhow::bail;
use overlay::api::Node;
use overlay::proto::NodeId;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The job: the chunks, the answers so far, and the counts a sieve gives.
pub(crate) struct Job {
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
    pub(crate) fn new(limit: u64, chunks: u64) -> Job {
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

pub(crate) struct Coordinator {
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
    pub(crate) fn new(node: Node, job: Job, args: &Args) -> Coordinator {
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
    pub(crate) async fn run(&mut self, mut demo: Option<&mut Demo>) -> anyhow::Result<()> {
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
pub(crate) fn count(n: usize, what: &str) -> String {
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
