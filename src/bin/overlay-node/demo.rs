//! `overlay-node demo`: an in-process overlay over real QUIC on 127.0.0.1 with emulated WAN
//! latency (phoenix-27 by default); waits until every tree is wide-area optimal.

use anyhow::Context;
use overlay::admin::render_text;
use overlay::local::LocalOverlay;
use overlay::proto::Config;
use overlay::topology::Topology;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options of `demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Topology file (default: the embedded phoenix-27).
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// Print one JSON object instead of the trees.
    #[arg(long)]
    json: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// How many trees to print (text mode).
    #[arg(long, default_value_t = 2)]
    show: usize,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let topology = match &args.topology {
        Some(path) => Topology::load(path)?,
        None => Topology::builtin("phoenix-27").context("embedded topology missing")?,
    };
    let name = topology.name.clone();
    let wall = Instant::now();
    let overlay = LocalOverlay::start(topology, Config::wan()).await?;
    let started_ms = wall.elapsed().as_millis();
    if !args.json {
        eprintln!(
            "{} nodes of {name} started in {started_ms} ms; waiting for the trees",
            overlay.nodes.len()
        );
    }
    let (check, converged) = overlay
        .wait_optimal(Duration::from_secs(args.timeout), Duration::from_secs(2))
        .await;
    let converged_ms = converged.map(|d| d.as_millis() as u64);
    if args.json {
        let out = serde_json::json!({
            "topology": name,
            "nodes": check.nodes,
            "trees": check.trees,
            "spanning": check.spanning,
            "wide_area_optimal": check.wide_area_optimal,
            "converged_ms": converged_ms,
            "wall_ms": wall.elapsed().as_millis() as u64,
        });
        println!("{out}");
    } else {
        for node in overlay.nodes.iter().take(args.show) {
            if let Ok(tree) = overlay.nodes[0].tree_snapshot(node.id()).await {
                println!("{}", render_text(&tree));
            }
        }
        match converged_ms {
            Some(ms) => println!(
                "{}: {} nodes, {}/{} trees wide-area optimal; converged {ms} ms after the first node started",
                name, check.nodes, check.wide_area_optimal, check.trees
            ),
            None => println!(
                "{}: {} nodes, only {}/{} trees wide-area optimal ({} spanning) after {} s",
                name,
                check.nodes,
                check.wide_area_optimal,
                check.trees,
                check.spanning,
                args.timeout
            ),
        }
    }
    let ok = converged_ms.is_some();
    overlay.shutdown().await;
    if !ok {
        anyhow::bail!("the trees did not converge within {} s", args.timeout);
    }
    Ok(())
}
