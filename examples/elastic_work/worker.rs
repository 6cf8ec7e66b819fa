//! The worker: takes its chunks from the deliveries, counts the primes, publishes the counts.

use crate::{Control, WORKER_KEY, WorkItem, WorkResult, result_key};
use futures::StreamExt;
use overlay::api::{Deliveries, Node};
use overlay::proto::DeliveryKind;
use std::time::Instant;

pub(crate) struct Worker {
    node: Node,
    name: String,
    deliveries: Deliveries,
    quit_on_item: Option<u32>,
    verbose: bool,
}

impl Worker {
    /// Subscribes to the node's deliveries, then announces itself as a worker (in this
    /// order, so that no item sent after the announcement is missed).
    pub(crate) async fn start(
        node: Node,
        name: String,
        quit_on_item: Option<u32>,
        verbose: bool,
    ) -> anyhow::Result<Worker> {
        let deliveries = node.deliveries();
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
    pub(crate) async fn run(mut self) -> anyhow::Result<()> {
        let mut items = 0;
        let mut last_key: Option<String> = None;
        while let Some(d) = self.deliveries.next().await {
            let d = match d {
                Ok(d) => d,
                // Items dropped while this worker fell behind are redone by the master,
                // which hands out every item until someone reports it done.
                Err(lagged) => {
                    println!("{}: {lagged}", self.name);
                    continue;
                }
            };
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
