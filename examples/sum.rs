//! A distributed sum with `reduce` and `allreduce`.
//!
//! Every node publishes one number under the key `sum.value`. One node then calls
//! `reduce("sum.value", Reducer::Sum(NumKind::U64))`: the values are added hop by hop up
//! that node's spanning tree, and the answer says who is counted (`contributors`) and who
//! is not (`missing`, `declined`). An `allreduce` does the same and then hands the result
//! to every node, which receives it through its `deliveries()` stream.
//!
//! In one process (the default): 8 nodes on 127.0.0.1, node `i` publishes `i * i`; `n8`
//! reduces, `n1` allreduces, and the sums are checked against `1² + 2² + ... + 8²`:
//!
//!     cargo run --release --example sum
//!     cargo run --release --example sum -- --nodes 20
//!
//! Across machines, one node per process. The first starts the overlay and prints the
//! command that joins it; the node started with `--reduce` waits until `--wait-for` nodes
//! are members, reduces, checks the sum against a `gather` of the same values, and
//! allreduces; every other node prints the result it receives and exits:
//!
//!     # machine A (starts the overlay, prints the token)
//!     cargo run --release --example sum -- --listen 10.0.0.1:7600 --value 3
//!     # machine B
//!     cargo run --release --example sum -- --listen 10.0.0.2:7600 --join 10.0.0.1:7600 --token ovl1-... --value 4
//!     # machine C: reduces once all three are members
//!     cargo run --release --example sum -- --listen 10.0.0.3:7600 --join 10.0.0.1:7600 --token ovl1-... --value 5 --reduce --wait-for 3
//!
//! The program exits with a non-zero status when a sum is wrong.

use anyhow::{Context, bail};
use clap::Parser;
use futures::StreamExt;
use overlay::api::{Delivery, Node, Reduced, decode_reduce_outcome};
use overlay::net::token::JoinToken;
use overlay::proto::{DeliveryKind, Liveness, NodeId, NumKind, Reducer};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The key every node publishes its number under.
const KEY: &str = "sum.value";

/// A distributed sum with reduce and allreduce (see the top of examples/sum.rs).
#[derive(Parser, Debug)]
#[command(name = "sum")]
struct Args {
    /// In one process: how many nodes to start (default 8).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64),
          conflicts_with_all = ["listen", "join", "value", "reduce"])]
    nodes: Option<u64>,
    /// One node per process: the address to listen on, e.g. 10.0.0.1:7600.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// One node per process: join the overlay through the member at this address.
    #[arg(long, requires = "token")]
    join: Option<SocketAddr>,
    /// The overlay's join token (printed by its first node).
    #[arg(long, requires = "join")]
    token: Option<JoinToken>,
    /// One node per process: the number this node contributes (default 1, so the sum
    /// counts the nodes).
    #[arg(long)]
    value: Option<u64>,
    /// One node per process: this node starts the reduce and prints it.
    #[arg(long)]
    reduce: bool,
    /// With --reduce: wait until this many nodes (this one included) are members.
    #[arg(long, requires = "reduce", default_value_t = 1)]
    wait_for: usize,
    /// A name shown to the other members.
    #[arg(long)]
    name: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let one_node =
        args.listen.is_some() || args.join.is_some() || args.value.is_some() || args.name.is_some();
    if one_node || args.reduce {
        one_node_per_process(args).await
    } else {
        in_one_process(args.nodes.unwrap_or(8) as usize).await
    }
}

/// The default: `n` nodes in this process, node `i` publishes `i * i`.
async fn in_one_process(n: usize) -> anyhow::Result<()> {
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
    let names: HashMap<NodeId, String> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| (node.id(), format!("n{}", i + 1)))
        .collect();
    println!(
        "{} on 127.0.0.1; node n<i> publishes i*i under \"{KEY}\"",
        count(n, "node")
    );

    // Every node receives the allreduce result through its deliveries; subscribe first.
    let mut streams: Vec<_> = nodes.iter().map(|x| x.deliveries()).collect();
    for (i, node) in nodes.iter().enumerate() {
        let i = i as u64 + 1;
        node.publish_value(KEY, &vec![i * i]).await?;
    }
    // A reduce counts the members its root knows: wait until everyone knows everyone.
    wait_for_members(&nodes, n, Duration::from_secs(20)).await?;

    let expected: u64 = (1..=n as u64).map(|i| i * i).sum();
    let mut wrong: Vec<String> = Vec::new();

    // Reduce from the last node.
    let reducer = &nodes[n - 1];
    let r = reducer.reduce(KEY, Reducer::Sum(NumKind::U64)).await?;
    let sum = single(&r)?;
    println!(
        "\nreduce from n{n}: sum {} in {:.1} ms",
        show(sum),
        ms(r.elapsed)
    );
    print_who(&r, &names);
    println!(
        "  expected 1² + ... + {n}² = {expected}: {}",
        verdict(sum, expected)
    );
    if sum != Some(expected) || r.contributors.len() != n {
        wrong.push("the reduce".into());
    }

    // Allreduce from the first node: every node receives the same outcome.
    let a = nodes[0].allreduce(KEY, Reducer::Sum(NumKind::U64)).await?;
    let sum = single(&a)?;
    println!(
        "\nallreduce from n1: sum {} from {} in {:.1} ms; every node receives it:",
        show(sum),
        count(a.contributors.len(), "contributor"),
        ms(a.elapsed)
    );
    let mut bad = 0;
    for (i, stream) in streams.iter_mut().enumerate() {
        let received = next_allreduce(stream, nodes[0].id(), Duration::from_secs(10)).await;
        let line = match received {
            Some((value, contributors)) => {
                let ok = value == Some(expected) && contributors == n;
                bad += usize::from(!ok);
                format!(
                    "sum {} from {}{}",
                    show(value),
                    count(contributors, "contributor"),
                    if ok { "" } else { "  WRONG" }
                )
            }
            None => {
                bad += 1;
                "nothing received  WRONG".to_string()
            }
        };
        println!("  n{}: {line}", i + 1);
    }
    if sum != Some(expected) {
        wrong.push("the allreduce".into());
    }
    if bad > 0 {
        wrong.push(format!("{bad} of {n} allreduce deliveries"));
    }

    // Each leave waits up to half a second for its goodbyes to go out: leave together.
    futures::future::join_all(nodes.iter().map(|node| node.leave())).await;
    if !wrong.is_empty() {
        bail!("wrong results: {}", wrong.join(", "));
    }
    println!("\nall sums are {expected}: ok");
    Ok(())
}

/// One node in this process (the others run elsewhere).
async fn one_node_per_process(args: Args) -> anyhow::Result<()> {
    let value = args.value.unwrap_or(1);
    let mut builder = Node::builder();
    if let Some(addr) = args.listen {
        builder = builder.listen(addr);
    }
    if let Some(name) = &args.name {
        builder = builder.name(name.clone());
    }
    if let Some(addr) = args.join {
        builder = builder.join(addr);
    }
    if let Some(token) = args.token {
        builder = builder.token(token);
    }
    let node = builder.start().await.context("starting the node")?;
    let mut deliveries = node.deliveries();
    node.publish_value(KEY, &vec![value]).await?;
    println!(
        "node {} listening on {}, contributes {value}",
        node.id().short(),
        node.local_addr()
    );
    println!(
        "others join with: cargo run --release --example sum -- --listen ADDR --join {} --token {} --value N",
        node.local_addr(),
        node.token()
    );

    let outcome = if args.reduce {
        reduce_and_check(&node, args.wait_for).await
    } else {
        println!("waiting for a node started with --reduce (Ctrl-C to leave)");
        tokio::select! {
            got = next_allreduce(&mut deliveries, None, Duration::MAX) => {
                match got {
                    Some((sum, nodes)) => println!("received the allreduce result: sum {} from {}", show(sum), count(nodes, "node")),
                    None => println!("the node stopped"),
                }
                // Other nodes may still be confirming the allreduce through this one (it
                // can be their parent in the reducer's tree): give them a moment.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            _ = tokio::signal::ctrl_c() => println!("leaving"),
        }
        Ok(())
    };
    node.leave().await;
    outcome
}

/// The `--reduce` node: waits for the members, reduces, checks the sum against a gather
/// of the same values, and allreduces so that every node receives the result.
async fn reduce_and_check(node: &Node, wait_for: usize) -> anyhow::Result<()> {
    if wait_for > 1 {
        println!("waiting until {wait_for} nodes are members");
    }
    wait_for_members(
        std::slice::from_ref(node),
        wait_for,
        Duration::from_secs(300),
    )
    .await?;
    let names: HashMap<NodeId, String> = node
        .members()
        .await?
        .into_iter()
        .map(|m| (m.id, m.name))
        .collect();

    // A node that has joined but not published yet declines: try again for a while.
    let deadline = Instant::now() + Duration::from_secs(5);
    let r = loop {
        let r = node.reduce(KEY, Reducer::Sum(NumKind::U64)).await?;
        if r.declined.is_empty() || Instant::now() >= deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let sum = single(&r)?;
    println!("reduce: sum {} in {:.1} ms", show(sum), ms(r.elapsed));
    print_who(&r, &names);

    // The same values collected one by one, added here.
    let g = node.gather(KEY, Vec::new()).await?;
    let values: HashMap<NodeId, Vec<u64>> = g.decode()?.into_iter().collect();
    let contributors: BTreeSet<NodeId> = r.contributors.iter().copied().collect();
    let gathered: BTreeSet<NodeId> = values.keys().copied().collect();
    // (The built-in sum saturates; so does this one.)
    let expected = values
        .values()
        .flatten()
        .fold(0u64, |a, v| a.saturating_add(*v));
    let problem = if contributors != gathered {
        Some("the members changed between the reduce and the gather: cannot check the sum".into())
    } else {
        println!(
            "  expected (a gather of the same {} values, added here) {expected}: {}",
            values.len(),
            verdict(sum, expected)
        );
        (sum != Some(expected)).then(|| {
            format!(
                "the reduce gave {}, the values add up to {expected}",
                show(sum)
            )
        })
    };

    // Sent even when the check failed, so that the waiting nodes finish.
    let a = node.allreduce(KEY, Reducer::Sum(NumKind::U64)).await?;
    println!(
        "allreduce: sum {} sent to every node ({} contributors, {} missing)",
        show(single(&a)?),
        a.contributors.len(),
        a.missing.len()
    );
    match problem {
        Some(p) => bail!(p),
        None => Ok(()),
    }
}

/// Waits until each node lists at least `n` alive members (itself included).
async fn wait_for_members(nodes: &[Node], n: usize, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut ready = true;
        for node in nodes {
            let alive = node
                .members()
                .await?
                .iter()
                .filter(|m| m.state == Liveness::Alive)
                .count();
            ready &= alive >= n;
        }
        if ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("fewer than {n} members after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The next allreduce result in `stream` (from `root`, when given): its sum and how many
/// nodes it counts. `None` if nothing came within `timeout` or the node stopped.
async fn next_allreduce(
    stream: &mut (impl futures::Stream<Item = Result<Delivery, overlay::Lagged>> + Unpin),
    root: impl Into<Option<NodeId>>,
    timeout: Duration,
) -> Option<(Option<u64>, usize)> {
    let root = root.into();
    let wait = async {
        while let Some(d) = stream.next().await {
            // Fell behind: what was dropped is gone; the next allreduce result still counts.
            let Ok(d) = d else { continue };
            if d.kind != DeliveryKind::AllReduce || root.is_some_and(|r| r != d.root) {
                continue;
            }
            let outcome = decode_reduce_outcome(&d).ok()?;
            let sum = outcome
                .value
                .and_then(|v| postcard::from_bytes::<Vec<u64>>(&v).ok())
                .and_then(|v| v.first().copied());
            return Some((sum, outcome.contributors.len()));
        }
        None
    };
    tokio::time::timeout(timeout, wait)
        .await
        .unwrap_or_default()
}

/// The one number in a reduce of one-element vectors (`None`: nobody contributed).
fn single(r: &Reduced) -> anyhow::Result<Option<u64>> {
    let v: Option<Vec<u64>> = r.values()?;
    Ok(v.and_then(|v| v.first().copied()))
}

fn print_who(r: &Reduced, names: &HashMap<NodeId, String>) {
    let name = |id: &NodeId| names.get(id).cloned().unwrap_or_else(|| id.short());
    let list = |ids: &[NodeId]| {
        let mut v: Vec<String> = ids.iter().map(name).collect();
        v.sort_by_key(|s| (s.len(), s.clone()));
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(" ")
        }
    };
    println!(
        "  contributors ({}): {}",
        r.contributors.len(),
        list(&r.contributors)
    );
    println!(
        "  missing: {}; declined: {}",
        list(&r.missing),
        list(&r.declined)
    );
}

/// "1 node", "2 nodes".
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn show(v: Option<u64>) -> String {
    v.map_or("(none)".to_string(), |v| v.to_string())
}

fn verdict(got: Option<u64>, expected: u64) -> &'static str {
    if got == Some(expected) { "ok" } else { "WRONG" }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
