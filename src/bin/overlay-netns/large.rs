//! `overlay-netns large --state-dir DIR`: a large broadcast on a running testbed, as a user
//! would send it (`Node::broadcast` with no options, through the admin socket of the first
//! node of one cluster), and its throughput as a share of the max-flow bound.
//!
//! Before sending, waits until that node holds a bandwidth figure for every directed pair of
//! clusters (its own measurements and the others', from the cluster summaries): the default
//! plans from them. The bound is computed from the topology file for the report only; the
//! nodes never see it. Prints the node's measured matrix next to the file's figures.

use crate::status::load_plan;
use anyhow::{Context, bail};
use overlay::admin::{AdminRequest, AdminResponse, broadcast, request};
use overlay::api::NodeStatus;
use overlay::local::payload;
use overlay::proto::NodeId;
use overlay::testbed::Plan;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Options of `large`.
#[derive(clap::Args, Debug)]
pub struct LargeArgs {
    /// The testbed's state directory (written by `netns-scripts/up`).
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// Broadcast from the first node of this cluster (default: the file's first cluster).
    #[arg(long, value_name = "CLUSTER")]
    from: Option<String>,
    /// Payload size in MiB.
    #[arg(long, default_value_t = 16.0, value_name = "MIB")]
    mib: f64,
    /// Broadcasts to send, one after the other.
    #[arg(long, default_value_t = 1, value_name = "N")]
    runs: u32,
    /// How long to wait for the node's bandwidth matrix to be complete.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    wait: u64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// One measured directed cluster pair next to the file's figure.
#[derive(Serialize)]
struct Link {
    from: String,
    to: String,
    measured_mbit: f64,
    file_mbit: Option<f64>,
}

/// One broadcast.
#[derive(Serialize)]
struct Run {
    elapsed_s: f64,
    mbit_per_s: f64,
    share_of_bound: f64,
    delivered: usize,
    missing: Vec<String>,
}

/// The whole report.
#[derive(Serialize)]
struct Report {
    topology: String,
    node: String,
    bytes: usize,
    bound_mbit: f64,
    measured: Vec<Link>,
    runs: Vec<Run>,
}

pub fn run(args: LargeArgs) -> anyhow::Result<ExitCode> {
    let dir = args.state_dir.clone();
    let plan = load_plan(&dir)?;
    let topo = &plan.topology;
    let cluster = match &args.from {
        None => 0,
        Some(name) => topo
            .clusters
            .iter()
            .position(|c| &c.name == name)
            .with_context(|| format!("no cluster {name:?} in {}", topo.name))?,
    };
    if !(args.mib > 0.0 && args.mib <= 1024.0) {
        bail!("--mib must be in (0, 1024], not {}", args.mib);
    }
    let node = plan
        .nodes
        .iter()
        .find(|n| n.cluster == cluster)
        .context("the cluster has no node")?;
    let data = dir.join("data").join(&node.name);
    let bound = overlay::sim::max_flow_mbit(topo, cluster);
    let bytes = (args.mib * (1 << 20) as f64) as usize;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let status = rt.block_on(wait_for_matrix(&data, &plan, args.wait))?;
    let measured = measured_links(&status, &plan);
    let payload = payload(bytes);
    let mut runs = Vec::new();
    for _ in 0..args.runs {
        let r = rt
            .block_on(broadcast(&data, &payload))
            .with_context(|| format!("broadcast from {}", node.name))?;
        let secs = r.elapsed.as_secs_f64().max(1e-9);
        let mbit = bytes as f64 * 8.0 / secs / 1e6;
        let names = names(&status);
        runs.push(Run {
            elapsed_s: secs,
            mbit_per_s: mbit,
            share_of_bound: mbit / bound,
            delivered: r.delivered.len(),
            missing: r.missing.iter().map(|m| name_of(&names, *m)).collect(),
        });
    }
    let report = Report {
        topology: topo.name.clone(),
        node: node.name.clone(),
        bytes,
        bound_mbit: bound,
        measured,
        runs,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, plan.nodes.len());
    }
    let all_delivered = report.runs.iter().all(|r| r.missing.is_empty());
    Ok(if all_delivered {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Polls the node's status until it has a figure for every directed pair of clusters.
async fn wait_for_matrix(data: &Path, plan: &Plan, secs: u64) -> anyhow::Result<NodeStatus> {
    let k = plan.topology.clusters.len();
    let want = k * (k - 1);
    let start = Instant::now();
    loop {
        let have = match request(data, &AdminRequest::Status).await {
            Ok(AdminResponse::Status(s)) => {
                let pairs = s.bandwidth.iter().filter(|b| b.from != b.to).count();
                if pairs >= want {
                    return Ok(*s);
                }
                format!("{pairs} of {want} cluster pairs measured")
            }
            Ok(_) => "an unexpected answer".to_string(),
            Err(e) => e.to_string(),
        };
        if start.elapsed() > Duration::from_secs(secs) {
            bail!("after {secs} s the node still has {have}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn names(status: &NodeStatus) -> HashMap<NodeId, String> {
    status
        .members
        .iter()
        .map(|m| (m.id, m.name.clone()))
        .collect()
}

fn name_of(names: &HashMap<NodeId, String>, id: NodeId) -> String {
    names.get(&id).cloned().unwrap_or_else(|| id.short())
}

/// The node's measured matrix, clusters named as in the file (by the cluster of the member
/// that labels each discovered cluster), with the file's figure beside each entry.
fn measured_links(status: &NodeStatus, plan: &Plan) -> Vec<Link> {
    let names = names(status);
    let cluster_of = |id: NodeId| {
        let name = name_of(&names, id);
        plan.nodes
            .iter()
            .find(|n| n.name == name)
            .map(|n| n.cluster)
    };
    let topo = &plan.topology;
    let mut links: Vec<Link> = status
        .bandwidth
        .iter()
        .filter(|b| b.from != b.to)
        .map(|b| {
            let (from, to) = (cluster_of(b.from), cluster_of(b.to));
            let label = |c: Option<usize>, id: NodeId| {
                c.map_or_else(|| name_of(&names, id), |c| topo.clusters[c].name.clone())
            };
            Link {
                from: label(from, b.from),
                to: label(to, b.to),
                measured_mbit: b.mbit,
                file_mbit: from.zip(to).and_then(|(a, b)| topo.bandwidth_mbit(a, b)),
            }
        })
        .collect();
    links.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
    links
}

fn print_text(r: &Report, members: usize) {
    println!(
        "{} from {}: bandwidth as the node measured it",
        r.topology, r.node
    );
    for l in &r.measured {
        let file = l
            .file_mbit
            .map_or_else(|| "-".to_string(), |f| format!("{f:.1}"));
        println!(
            "  {:>8} -> {:<8} {:>7.2} Mbit/s   (file: {file})",
            l.from, l.to, l.measured_mbit
        );
    }
    let mib = r.bytes as f64 / (1 << 20) as f64;
    for (i, run) in r.runs.iter().enumerate() {
        println!(
            "broadcast {}: {mib} MiB to {} of {members} members in {:.2} s: {:.2} Mbit/s, \
             {:.3} of the max-flow bound ({:.2} Mbit/s from the file, for reporting only)",
            i + 1,
            run.delivered,
            run.elapsed_s,
            run.mbit_per_s,
            run.share_of_bound,
            r.bound_mbit
        );
        if !run.missing.is_empty() {
            println!("  missing: {}", run.missing.join(" "));
        }
    }
}
