//! Runs the deterministic simulator on a topology and reports how the trees form.
//!
//! ```text
//! cargo run --release --example sim -- --topology topologies/phoenix-168.toml --seed 1
//! cargo run --release --example sim -- --topology phoenix-27 --json
//! cargo run --release --example sim -- --topology topologies/das-4.toml --dot 0
//! cargo run --release --example sim -- --topology topologies/phoenix-27.toml --churn 20
//! cargo run --release --example sim -- --topology topologies/scale-1000.toml --scale 2
//! cargo run --release --example sim -- --topology topologies/scale-1000.toml --timeline
//! cargo run --release --example sim -- --topology das-4 --timeline --explain-heard --trace 3,17,20
//! ```
//!
//! The run lasts until every tree is spanning and wide-area optimal (site optimal on
//! topologies with sites) and has stayed so, unchanged, for `--stable-seconds`; or until
//! `--max-seconds` of simulated time. With `--churn`, random joins, leaves and crashes
//! (that share of the nodes) follow over `--churn-window-seconds`, then the run continues
//! until it is converged again, and the repair figures are reported.

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use overlay::proto::gossip::GossipConfig;
use overlay::proto::rng::SplitMix64;
use overlay::proto::{Config, Time};
use overlay::sim::{Report, Sim, SimConfig, SimNode, TracePair};
use overlay::topology::Topology;
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod timeline;
use timeline::print_timeline;

// Thousands of nodes in one process allocate and free large tables all the time (every
// node's view of the clusters, its record sets): the system allocator handed the pages
// back and faulted them in again (2000 nodes to 8 s simulated: 114 s of wall on it, 87 s
// on mimalloc).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Simulate the overlay on a topology in virtual time and report convergence figures.
#[derive(Parser, Debug)]
#[command(about, long_about = None, allow_negative_numbers = true)]
struct Args {
    /// Topology file (see topologies/README.md), or the name of a shipped one (e.g. phoenix-27).
    #[arg(long)]
    topology: String,
    /// Seed of the run: the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of the readable summary.
    #[arg(long)]
    json: bool,
    /// Write the tree of this root as Graphviz dot: a node index (0-based, nodes numbered
    /// cluster by cluster in file order) or a node's short id (or a unique prefix of it).
    #[arg(long, value_name = "ROOT")]
    dot: Option<String>,
    /// Where to write the dot file (default: <topology name>-root<N>.dot).
    #[arg(long, value_name = "PATH", requires = "dot")]
    dot_out: Option<PathBuf>,
    /// After convergence, joins, leaves and crashes of this percentage of the nodes.
    #[arg(long, value_name = "PERCENT")]
    churn: Option<f64>,
    /// Simulated seconds over which the churn is spread.
    #[arg(long, default_value_t = 5.0)]
    churn_window_seconds: f64,
    /// Simulated seconds to run at most (per phase: initial convergence, then churn).
    #[arg(long, default_value_t = 120.0)]
    max_seconds: f64,
    /// Probability that a message is lost.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Lose messages silently: the sender is not told (by default it is, as the QUIC
    /// driver tells its core of the frames it drops).
    #[arg(long)]
    silent_losses: bool,
    /// How long the trees must stay optimal and unchanged to call the run converged.
    #[arg(long, default_value_t = 5.0)]
    stable_seconds: f64,
    /// Multiply every cluster's node count by this factor (same latency matrix), e.g. 2 on
    /// scale-1000 for 2000 nodes.
    #[arg(long, value_name = "FACTOR")]
    scale: Option<f64>,
    /// Core presets: wan, lan or test.
    #[arg(long, default_value = "wan")]
    preset: String,
    /// Time dilation: every latency of the topology and every clock and latency threshold
    /// of the protocol multiplied by this factor (the setting of `bench quic --dilate`);
    /// `--max-seconds` and `--stable-seconds` are multiplied too.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    dilate: u32,
    /// How nodes learn of each other: `gossip` runs the membership protocol in every node
    /// (joins through the first node, failures found by probes; its messages count in the
    /// traffic), `oracle` tells every node of joins, leaves and crashes after a fixed delay.
    #[arg(long, default_value = "oracle", value_parser = ["oracle", "gossip"])]
    membership: String,
    /// Model the topology's bandwidths: each message is serialized on its sender's NIC and
    /// on the shared link between the two clusters (bounded queues, tail drop).
    #[arg(long)]
    bandwidth: bool,
    /// Print to stderr, every simulated second until convergence, how many nodes track
    /// the tree of every live member (`knows_all`: the members they know), how many trees
    /// span every node and how many are wide-area optimal, the tree edges entering a
    /// cluster beyond the one it needs (`extra_entries`), how many edges into such
    /// clusters end at a leaf (`leaf_entries`), and, with twelve trees or fewer left, what
    /// is wrong with them: where a cold start spends its time. Once every tree has been
    /// optimal, each check that finds one no longer is gets a line (a "break").
    #[arg(long)]
    timeline: bool,
    /// With --timeline: also list, for each entry of a tree left entering a cluster
    /// twice, what it heard in that tree from every member of its cluster, and its path
    /// to the root with each hop's serial and dist.
    #[arg(long, requires = "timeline")]
    explain_heard: bool,
    /// Record every message between two nodes, marking those about one root's tree
    /// (node indices `A,B,ROOT`, as --timeline names them), and print them to stderr at
    /// the end.
    #[arg(long, value_name = "A,B,ROOT", value_parser = trace_pair)]
    trace: Option<TracePair>,
    /// Rounds in which a node's first sweep meets every member (the core's
    /// `sweep_rounds`; the preset's unless told).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    sweep_rounds: Option<u32>,
    /// Share the trees of a cluster's roots outside it from this many members on (the
    /// core's `shared_trees_from`; off unless told).
    #[arg(long, value_name = "MEMBERS")]
    shared_trees_from: Option<usize>,
    /// Measure a random sample of this many members, then only where cluster discovery
    /// points (the core's `sweep_limit`; every member unless told).
    #[arg(long, value_name = "MEMBERS", value_parser = clap::value_parser!(u32).range(1..))]
    sweep_limit: Option<u32>,
    /// Flat clusters: a node under a cluster neighbour moves to a shallower one (the core's
    /// `flatten_clusters`; off unless told).
    #[arg(long)]
    flatten: bool,
    /// With `--membership gossip`: news within this many milliseconds of a node's last
    /// rumor push waits and goes in one rumor (the membership's `rumor_gap`; 0 unless told)
    #[arg(long, value_name = "MS", default_value_t = 0)]
    rumor_gap: u64,
}

/// Parses `--trace A,B,ROOT`.
fn trace_pair(arg: &str) -> Result<TracePair, String> {
    let parts: Vec<usize> = (arg.split(','))
        .map(|p| p.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("expected three node indices A,B,ROOT: {e}"))?;
    match parts[..] {
        [a, b, root] => Ok(TracePair { a, b, root }),
        _ => Err(format!(
            "expected three node indices A,B,ROOT, got {}",
            parts.len()
        )),
    }
}

/// Figures of the churn phase.
#[derive(serde::Serialize)]
struct ChurnOut {
    percent: f64,
    actions: usize,
    started_ms: f64,
    last_action_ms: f64,
    /// Start of the stable period after the churn (ms since t = 0).
    reconverged_ms: Option<f64>,
    /// How long after the last action the trees were optimal again for good.
    reconverged_after_last_action_ms: Option<f64>,
    repair_ms_max: Option<f64>,
    repair_ms_mean: Option<f64>,
    unrepaired: usize,
}

/// The JSON object printed with `--json`.
#[derive(serde::Serialize)]
struct Output {
    #[serde(flatten)]
    report: Report,
    converged: bool,
    wall_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    churn: Option<ChurnOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dot_file: Option<String>,
}

fn seconds(name: &str, v: f64) -> Result<Duration> {
    ensure!(
        v.is_finite() && v > 0.0,
        "--{name} must be a positive number of seconds, got {v}"
    );
    Ok(Duration::from_secs_f64(v))
}

fn load_topology(arg: &str) -> Result<Topology> {
    match Topology::load(arg) {
        Ok(t) => Ok(t),
        Err(e) => {
            let is_path =
                arg.contains('/') || arg.ends_with(".toml") || std::path::Path::new(arg).exists();
            if let Some(t) = Topology::builtin(arg).filter(|_| !is_path) {
                return Ok(t);
            }
            Err(e).with_context(|| {
                let names: Vec<&str> = Topology::builtin_names().collect();
                format!(
                    "cannot load topology {arg:?} (shipped topologies: {})",
                    names.join(", ")
                )
            })
        }
    }
}

fn resolve_root<N: SimNode>(sim: &Sim<N>, arg: &str) -> Result<usize> {
    if let Ok(i) = arg.parse::<usize>() {
        ensure!(
            i < sim.total_nodes(),
            "--dot {i}: there are only {} nodes (0..{})",
            sim.total_nodes(),
            sim.total_nodes()
        );
        return Ok(i);
    }
    let want = arg.to_ascii_lowercase();
    let hits: Vec<usize> = (0..sim.total_nodes())
        .filter(|&i| sim.id(i).short().starts_with(&want))
        .collect();
    match hits.as_slice() {
        [i] => Ok(*i),
        [] => bail!("--dot {arg:?}: no node index or short id matches"),
        _ => bail!(
            "--dot {arg:?}: the prefix matches {} nodes; give more characters",
            hits.len()
        ),
    }
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    let max = seconds("max-seconds", args.max_seconds)? * args.dilate;
    let stable_for = seconds("stable-seconds", args.stable_seconds)? * args.dilate;
    ensure!(
        (0.0..=1.0).contains(&args.loss),
        "--loss must be between 0 and 1, got {}",
        args.loss
    );
    if let Some(p) = args.churn {
        ensure!(
            p.is_finite() && (0.0..=100.0).contains(&p),
            "--churn must be a percentage (0 to 100), got {p}"
        );
    }
    let window = seconds("churn-window-seconds", args.churn_window_seconds)?;
    let mut core = match args.preset.as_str() {
        "wan" => Config::wan(),
        "lan" => Config::lan(),
        "test" => Config::test(),
        other => bail!("--preset must be wan, lan or test, got {other:?}"),
    }
    .dilated(args.dilate);
    if args.shared_trees_from.is_some() {
        core.shared_trees_from = args.shared_trees_from;
    }
    core.flatten_clusters |= args.flatten;
    if let Some(limit) = args.sweep_limit {
        core.sweep_limit = Some(limit as usize);
    }
    if let Some(rounds) = args.sweep_rounds {
        core.sweep_rounds = rounds as usize;
    }
    let mut topo = load_topology(&args.topology)?.dilated(args.dilate);
    if let Some(f) = args.scale {
        ensure!(f.is_finite() && f > 0.0, "--scale must be positive");
        topo = topo.scaled(f);
    }

    let wall = Instant::now();
    let cfg = SimConfig {
        seed: args.seed,
        core,
        loss: args.loss,
        report_losses: !args.silent_losses,
        stable_for,
        membership_delay: SimConfig::default().membership_delay * args.dilate,
        failure_detection: SimConfig::default().failure_detection * args.dilate,
        bandwidth: args.bandwidth,
        trace: args.trace,
        ..SimConfig::default()
    };
    if args.membership == "gossip" {
        let gossip = GossipConfig {
            rumor_gap: Duration::from_millis(args.rumor_gap),
            ..GossipConfig::default()
        }
        .slowed(args.dilate);
        let sim = Sim::with_membership(&topo, cfg, gossip);
        return finish(sim, &args, &topo, max, window, wall);
    }
    finish(Sim::new(&topo, cfg), &args, &topo, max, window, wall)
}

/// Runs the simulation built by [`run`] and prints its figures.
fn finish<N: SimNode>(
    mut sim: Sim<N>,
    args: &Args,
    topo: &Topology,
    max: Duration,
    window: Duration,
    wall: Instant,
) -> Result<()> {
    let dot_root = args
        .dot
        .as_deref()
        .map(|a| resolve_root(&sim, a))
        .transpose()?;
    if let Some(t) = args.trace {
        let n = sim.total_nodes();
        ensure!(
            t.a < n && t.b < n && t.root < n,
            "--trace {},{},{}: node indices must be below {n}",
            t.a,
            t.b,
            t.root
        );
    }
    if args.timeline {
        print_timeline(&mut sim, max, args.explain_heard);
    }
    let converged = sim.run_until_converged(max).is_some();

    let churn = match args.churn {
        None => None,
        Some(percent) => {
            if !converged && !args.json {
                eprintln!(
                    "warning: not converged after {:.0} s; starting the churn anyway",
                    max.as_secs_f64()
                );
            }
            sim.set_check_interval(Duration::from_millis(10));
            let start = sim.now() + Duration::from_millis(100);
            let mut rng = SplitMix64::new(args.seed ^ 0xC4_u64.rotate_left(56));
            let plan = sim.schedule_churn(percent, start..start + window, &mut rng);
            let last = plan.last().map_or(start, |p| p.0);
            let again = sim.run_until_converged(max);
            let r = sim.report();
            let ms = |t: Time| t.as_micros() as f64 / 1e3;
            Some(ChurnOut {
                percent,
                actions: plan.len(),
                started_ms: ms(start),
                last_action_ms: ms(last),
                reconverged_ms: again.map(|d| d.as_secs_f64() * 1e3),
                reconverged_after_last_action_ms: again
                    .map(|d| (d.as_secs_f64() * 1e3 - ms(last)).max(0.0)),
                repair_ms_max: r.repair_ms_max,
                repair_ms_mean: r.repair_ms_mean,
                unrepaired: r.unrepaired,
            })
        }
    };

    let dot_file = match dot_root {
        None => None,
        Some(root) => {
            ensure!(
                sim.is_alive(root),
                "--dot {root}: that node left or crashed during the churn"
            );
            let path = args
                .dot_out
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("{}-root{root}.dot", topo.name)));
            std::fs::write(&path, sim.dot(root))
                .with_context(|| format!("cannot write {}", path.display()))?;
            Some(path.display().to_string())
        }
    };
    let wall_ms = wall.elapsed().as_secs_f64() * 1e3;
    let report = sim.report();
    // (To stderr, before the report: with --json too.)
    if let Some(t) = args.trace {
        eprintln!("messages between {} and {} (root {}):", t.a, t.b, t.root);
        for line in sim.traced() {
            eprintln!("  {line}");
        }
    }

    if args.json {
        let out = Output {
            report,
            converged,
            wall_ms,
            churn,
            dot_file,
        };
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    println!("{report}");
    println!("wall time           {wall_ms:.0} ms");
    if !converged {
        println!("NOT converged within {:.0} simulated s", max.as_secs_f64());
        let why = sim.explain(3);
        if !why.is_empty() {
            println!("{why}");
        }
    }
    if let Some(c) = &churn {
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1} ms"));
        println!(
            "churn {:.0}%: {} actions from {:.0} ms to {:.0} ms; re-converged at {} ({} after the last action)",
            c.percent,
            c.actions,
            c.started_ms,
            c.last_action_ms,
            opt(c.reconverged_ms),
            opt(c.reconverged_after_last_action_ms)
        );
        println!(
            "repair (until every tree spans every live node again): max {}, mean {}, {} unrepaired",
            opt(c.repair_ms_max),
            opt(c.repair_ms_mean),
            c.unrepaired
        );
    }
    if let (Some(root), Some(path)) = (dot_root, &dot_file) {
        println!("tree of root {root} ({}) written to {path}", sim.id(root));
    }
    Ok(())
}
