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
    let cluster_names: Vec<String> = topology.clusters.iter().map(|c| c.name.clone()).collect();
    let wall = Instant::now();
    let overlay = LocalOverlay::start(topology, Config::wan()).await?;
    let started_ms = wall.elapsed().as_millis();
    if !args.json {
        eprintln!(
            "{} nodes of {name} started in {started_ms} ms; waiting for the trees",
            overlay.nodes.len()
        );
    }
    let mut last_report = Instant::now();
    let progress = |_: &[overlay::api::NodeStatus], c: &overlay::local::OverlayCheck| {
        if args.json || last_report.elapsed() < Duration::from_secs(2) {
            return;
        }
        last_report = Instant::now();
        eprintln!(
            "{:>5.1} s: {}/{} nodes see every member, {}/{} trees span, {}/{} wide-area optimal",
            wall.elapsed().as_secs_f64(),
            c.full_membership,
            c.nodes,
            c.spanning,
            c.trees,
            c.wide_area_optimal,
            c.trees
        );
    };
    let (check, converged) = overlay
        .wait_optimal_observed(
            Duration::from_secs(args.timeout),
            Duration::from_secs(2),
            Duration::from_millis(200),
            progress,
        )
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
        println!("{}", crate::json::tidy(out));
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
    if !ok {
        let name_of = |id| {
            overlay
                .nodes
                .iter()
                .position(|n| n.id() == id)
                .and_then(|i| cluster_names.get(overlay.clusters[i]))
                .map(|c| format!("{} in {c}", id.short()))
                .unwrap_or_else(|| id.short())
        };
        for (root, why) in check.lagging.iter().take(10) {
            eprintln!("  tree of {}: {why}", name_of(*root));
        }
        if check.full_membership < check.nodes {
            eprintln!(
                "  {} of {} nodes do not see every member alive yet",
                check.nodes - check.full_membership,
                check.nodes
            );
        }
    }
    overlay.shutdown().await;
    if !ok {
        anyhow::bail!("the trees did not converge within {} s", args.timeout);
    }
    Ok(())
}
