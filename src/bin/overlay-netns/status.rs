//! `overlay-netns status --state-dir DIR`: asks every node of a running testbed for its
//! status (through the admin socket in its data directory) and judges the whole overlay
//! against the topology: membership, spanning and wide-area optimal trees, and the RTTs the
//! nodes measured against twice the topology's one-way latencies. With `--wait SECS`, polls
//! until every tree is wide-area optimal and every pair has an RTT, and reports how long
//! after `run` that was.

use anyhow::{Context, bail};
use overlay::admin::{AdminRequest, AdminResponse, request};
use overlay::api::NodeStatus;
use overlay::proto::Liveness;
use overlay::testbed::{GroupCheck, Plan, RttReport, check_group, rtt_report};
use overlay::topology::Topology;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Options of `status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// The testbed's state directory (written by `netns-scripts/up`).
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Poll until every tree is wide-area optimal and every RTT is measured (for 2 s in a
    /// row), for at most SECS; exit 1 if that does not happen.
    #[arg(long, value_name = "SECS")]
    wait: Option<u64>,
    /// RTT margin: |measured - expected| <= max(MS, REL x expected).
    #[arg(long, default_value_t = 1.0, value_name = "MS")]
    margin_ms: f64,
    /// See --margin-ms.
    #[arg(long, default_value_t = 0.2, value_name = "REL")]
    margin_rel: f64,
}

/// One node's line.
#[derive(Serialize)]
struct NodeRow {
    name: String,
    addr: String,
    pid: Option<u32>,
    running: bool,
    answered: bool,
    id: Option<String>,
    members_alive: usize,
    members_known: usize,
    trees_connected: usize,
    trees: usize,
    error: Option<String>,
}

/// The whole report.
#[derive(Serialize)]
struct Report {
    prefix: String,
    topology: String,
    mode: String,
    partitions: Vec<String>,
    nodes: Vec<NodeRow>,
    check: GroupCheck,
    all_optimal: bool,
    rtt: RttReport,
    /// When `--wait` succeeded: ms from the start of `run` to the first of the stable checks.
    converged_after_run_ms: Option<u64>,
    /// When `--wait` was given: ms spent polling.
    waited_ms: Option<u64>,
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The plan of the testbed in `dir`.
pub fn load_plan(dir: &Path) -> anyhow::Result<Plan> {
    if !dir.join("up-complete").exists() {
        bail!(
            "no testbed is up with state directory {} (run netns-scripts/up first)",
            dir.display()
        );
    }
    let topology = Topology::load(dir.join("topology.toml"))?;
    let npc = read(dir, "nodes-per-cluster");
    let npc = if npc.is_empty() {
        None
    } else {
        Some(
            npc.parse()
                .context("nodes-per-cluster in the state directory")?,
        )
    };
    Ok(Plan::new(topology, npc)?)
}

fn pid_running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command name in parentheses; a zombie has exited.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z")
}

async fn gather(dir: &Path, plan: &Plan) -> Vec<(Result<NodeStatus, String>, Option<u32>)> {
    let asks = plan.nodes.iter().map(|n| {
        let data = dir.join("data").join(&n.name);
        let pid = read(&dir.join("pids"), &format!("{}.pid", n.name))
            .parse()
            .ok();
        async move {
            let ask = request(&data, &AdminRequest::Status);
            let answer = match tokio::time::timeout(Duration::from_secs(5), ask).await {
                Err(_) => Err("no answer within 5 s".to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Ok(Ok(AdminResponse::Status(s))) => Ok(*s),
                Ok(Ok(_)) => Err("unexpected answer".to_string()),
            };
            (answer, pid)
        }
    });
    futures::future::join_all(asks).await
}

fn report(
    dir: &Path,
    plan: &Plan,
    args: &StatusArgs,
    answers: Vec<(Result<NodeStatus, String>, Option<u32>)>,
) -> Report {
    let mut statuses = Vec::new();
    let mut nodes = Vec::new();
    // Nodes `run --max` has not started yet (no pid file) are not judged; one started and
    // gone since is. Before any `run`, every node is (so nothing is called converged).
    let started: Vec<String> = (plan.nodes.iter().zip(&answers))
        .filter(|(_, (_, pid))| pid.is_some())
        .map(|(n, _)| n.name.clone())
        .collect();
    let partial = !started.is_empty() && started.len() < plan.nodes.len();
    let group = partial.then_some(started.as_slice());
    for (n, (answer, pid)) in plan.nodes.iter().zip(answers) {
        let mut row = NodeRow {
            name: n.name.clone(),
            addr: format!("{}:{}", n.ip, overlay::testbed::NODE_PORT),
            pid,
            running: pid.is_some_and(pid_running),
            answered: false,
            id: None,
            members_alive: 0,
            members_known: 0,
            trees_connected: 0,
            trees: 0,
            error: None,
        };
        match answer {
            Ok(s) => {
                row.answered = true;
                row.id = Some(s.id.to_hex());
                row.members_known = s.members.len();
                row.members_alive = s
                    .members
                    .iter()
                    .filter(|m| m.state == Liveness::Alive)
                    .count();
                row.trees = s.trees.len();
                row.trees_connected = s.trees.iter().filter(|t| t.connected).count();
                statuses.push(s);
            }
            Err(e) => row.error = Some(e),
        }
        nodes.push(row);
    }
    let check = check_group(plan, &statuses, group);
    let rtt = rtt_report(plan, &statuses, args.margin_ms, args.margin_rel);
    let partitions = read(dir, "partitions")
        .lines()
        .map(|l| l.trim().replace(' ', " <-/-> "))
        .filter(|l| !l.is_empty())
        .collect();
    Report {
        prefix: read(dir, "prefix"),
        topology: plan.topology.name.clone(),
        mode: read(dir, "mode"),
        partitions,
        nodes,
        all_optimal: check.optimal(),
        check,
        rtt,
        converged_after_run_ms: None,
        waited_ms: None,
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let dir = args.state_dir.clone();
    let plan = load_plan(&dir)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let mut first_ok: Option<(Instant, u64)> = None;
    let mut rep = loop {
        let answers = rt.block_on(gather(&dir, &plan));
        let mut rep = report(&dir, &plan, &args, answers);
        let Some(limit) = args.wait else { break rep };
        let done = rep.all_optimal && rep.rtt.unmeasured == 0;
        if done {
            let (t, wall) = *first_ok.get_or_insert((Instant::now(), now_ms()));
            if t.elapsed() >= Duration::from_secs(2) {
                let run_started: Option<u64> = read(&dir, "run-started").parse().ok();
                rep.converged_after_run_ms = run_started.map(|s| wall.saturating_sub(s));
                break rep;
            }
        } else {
            first_ok = None;
        }
        if started.elapsed() >= Duration::from_secs(limit) {
            break rep;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    if args.wait.is_some() {
        rep.waited_ms = Some(started.elapsed().as_millis() as u64);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        print_text(&rep);
    }
    let failed = args.wait.is_some() && rep.converged_after_run_ms.is_none() && !rep.all_optimal;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_text(r: &Report) {
    let partitions = if r.partitions.is_empty() {
        "none".to_string()
    } else {
        r.partitions.join(", ")
    };
    println!(
        "testbed {}: topology {}, {} nodes, WAN: {}, partitions: {partitions}",
        r.prefix,
        r.topology,
        r.nodes.len(),
        r.mode
    );
    println!(
        "  {:<14} {:<17} {:>8} {:<8} {:>8} {:>8}",
        "node", "address", "pid", "process", "alive", "trees"
    );
    for n in &r.nodes {
        let pid = n.pid.map_or("-".to_string(), |p| p.to_string());
        let process = if n.running { "running" } else { "stopped" };
        if n.answered {
            println!(
                "  {:<14} {:<17} {:>8} {:<8} {:>8} {:>8}",
                n.name,
                n.addr,
                pid,
                process,
                format!("{}/{}", n.members_alive, n.members_known),
                format!("{}/{}", n.trees_connected, n.trees)
            );
        } else if n.pid.is_none() {
            println!("  {:<14} {:<17} {:>8} not started", n.name, n.addr, pid);
        } else {
            println!(
                "  {:<14} {:<17} {:>8} {:<8} no answer: {}",
                n.name,
                n.addr,
                pid,
                process,
                n.error.as_deref().unwrap_or("")
            );
        }
    }
    let c = &r.check.overlay;
    println!(
        "trees: {}/{} spanning, {}/{} wide-area optimal; {}/{} nodes list every node alive",
        c.spanning,
        r.check.expected,
        c.wide_area_optimal,
        r.check.expected,
        c.full_membership,
        r.check.expected
    );
    let t = &r.rtt;
    println!(
        "RTT vs topology (2 x one-way): {} inter-cluster pairs, mean |error| {:.2} ms, max {:.2} ms (max {:.1} %), mean error {:+.1} %; intra-cluster max {:.2} ms over {} pairs; {} unmeasured; {} outside +-max({} ms, {:.0} %)",
        t.inter_pairs,
        t.inter_mean_abs_ms,
        t.inter_max_abs_ms,
        t.inter_max_rel * 100.0,
        t.inter_mean_rel * 100.0,
        t.intra_max_ms,
        t.intra_pairs,
        t.unmeasured,
        t.outside_margin.len(),
        t.margin_abs_ms,
        t.margin_rel * 100.0
    );
    for o in t.outside_margin.iter().take(10) {
        println!("  outside the margin: {o}");
    }
    match (r.waited_ms, r.converged_after_run_ms) {
        (Some(_), Some(ms)) => println!(
            "converged: every tree wide-area optimal and every RTT measured {:.1} s after run started",
            ms as f64 / 1e3
        ),
        (Some(w), None) if r.all_optimal => println!(
            "every tree wide-area optimal (the start of run is not known) after {:.1} s of waiting",
            w as f64 / 1e3
        ),
        (Some(w), None) => println!("NOT converged after {:.1} s of waiting", w as f64 / 1e3),
        (None, _) => {}
    }
}
