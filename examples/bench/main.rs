//! Benchmarks, contenders side by side in one run (docs/DESIGN.md §8). Ratios are printed; absolute
//! times are shown but never asserted.
//!
//! ```text
//! cargo run --release --example bench -- fig5 [--json] [--seed N] [--out docs]
//! cargo run --release --example bench -- collectives [--json]
//! cargo run --release --example bench -- convergence [--json] [--threads N]
//! cargo run --release --example bench -- overhead [--json] [--threads N] [--with-2000]
//! cargo run --release --example bench -- quic [--quic-topology T] [--slowdown K] [--dilate D]
//! cargo run --release --example bench -- large [--json] [--nodes-per-cluster N] [--max-mib M] [--topology NAME|FILE] [--root CLUSTER] [--contenders default,single-tree,store-and-forward]
//! cargo run --release --example bench -- crossover [--json] [--max-mib M] [--topology NAME|FILE] [--root CLUSTER] [--nodes-per-cluster N]
//! cargo run --release --example bench -- collectives-sim [--json] [--max-mib M] [--topology NAME|FILE] [--nodes-per-cluster N] [--collectives ...] [--settle-s S] [--root CLUSTER]
//! cargo run --release --example bench -- collectives-large [--json] [--max-mib M] [--topology NAME|FILE] [--nodes-per-cluster N] [--min-mib M] [--collectives allreduce,reduce,scatter,gather,allgather] [--contenders default,NAME,...]
//! cargo build --release && cargo run --release --example bench -- soak [--minutes N] [--nodes N] [--churners N]
//! cargo run --release --example bench -- all          # all of the above, writes docs/
//! ```
//!
//! convergence and overhead share their simulator runs (in `all`, each topology converges
//! once): cold start until every tree is wide-area optimal and stable, then 10 s of steady
//! traffic (the overhead figure), then (convergence: phoenix-168 and scale-1000) 10% of the
//! nodes crash and the repair is timed. Overhead also runs at 500 nodes and, with
//! `--with-2000`, at 2000 nodes: scale-1000 with every cluster's node count halved or
//! doubled (`Topology::scaled`, same latency matrix). The runs go side by side on
//! `--threads` threads (default 2); each is single-threaded and deterministic.
//!
//! fig5 (the paper's Fig. 5): phoenix-168, 1 KB broadcasts from six roots (two per
//! cluster). Contenders: a topology-unaware binomial tree over node ids (MPICH), the static
//! MagPIe tree (a coordinator per cluster fed by a flat tree, binomial inside clusters),
//! our live trees, and the lower bound (shortest one-way latency path). All four are timed
//! with one cost model (20 µs CPU per message sent and received, the link latency, 1 KB
//! serialized at the link's bandwidth); "ours" uses the trees the protocol built in the
//! simulator, and is also measured by running real broadcasts in the simulator.

mod collectives;
mod fig5;
mod large;
mod markdown;
mod quic;
mod sim_jobs;
mod soak;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use overlay::bench::quantile;
use overlay::proto::{Command, Event, Start, StartKind};
use overlay::sim::{Sim, SimConfig};
use overlay::topology::Topology;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use collectives::collectives;
use fig5::fig5;
use large::{Selection, collectives_large, collectives_sim, crossover, large};
use markdown::markdown;
use quic::quic;
use sim_jobs::{
    convergence, convergence_report, overhead, overhead_report, run_sim_jobs, sim_jobs,
};

#[derive(Parser, Debug)]
#[command(about = "Benchmarks: contenders side by side, ratios printed")]
struct Cli {
    #[command(subcommand)]
    what: What,
    /// Print one JSON object per benchmark instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Simulator seed.
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// Where plots and BENCHMARKS.md go (`all` and `fig5`).
    #[arg(long, global = true, default_value = "docs")]
    out: PathBuf,
    /// The topology of the real-QUIC run (`quic`). phoenix-27 is `all`'s; phoenix-168
    /// fits two cores with `--dilate 20` (11-14 min), and keeps its result apart
    /// (quic-<topology>.json and fig5-quic-<topology>.svg in `--out`).
    #[arg(long, global = true, default_value = quic::ALL_TOPOLOGY)]
    quic_topology: String,
    /// The real-QUIC run's protocol clocks are slowed by this factor, so that every node
    /// of the topology fits on this machine's cores (`quic`).
    #[arg(long, global = true, default_value_t = 1)]
    slowdown: u32,
    /// Time dilation of the real-QUIC run (`quic`, and in `all`): the emulated network's
    /// latencies and every protocol clock multiplied by this factor, the delivery times
    /// divided by it. The nodes sharing two cores then get this many times more CPU
    /// against the network, as each would have on a machine of its own. 1: none (the run
    /// then measures the shared run queue as much as the trees); phoenix-168 converges at
    /// 20, and needs 40 before the shared cores stop delaying a wide in-cluster spread.
    #[arg(long, global = true, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    dilate: u32,
    /// Simulator runs of `convergence` and `overhead` (and `all`) executed side by side
    /// (each run is single-threaded and deterministic, so this changes only wall time).
    #[arg(long, global = true, default_value_t = 2)]
    threads: usize,
    /// Also measure overhead at 2000 nodes (scale-1000 with every cluster doubled). Not in
    /// `all` by default: converging 2000 nodes in the simulator takes far longer than the
    /// 15 minutes `all` is meant to take on a 2-core machine.
    #[arg(long, global = true)]
    with_2000: bool,
}

#[derive(Subcommand, Debug, Clone)]
enum What {
    /// Per-node completion times of 1 KB broadcasts on phoenix-168 (the paper's Fig. 5).
    Fig5,
    /// Gather and reduce latency against broadcast latency on the same trees.
    Collectives,
    /// Time until every tree is wide-area optimal, and repair after 10% crash.
    Convergence,
    /// Control bytes per node per second against the number of nodes.
    Overhead,
    /// Fig. 5, convergence and repair over real QUIC: every node in this process over the
    /// emulated-latency socket; the static trees run over the same QUIC stack.
    Quic,
    /// 1, 16 and 64 MiB broadcasts with emulated bandwidth over real QUIC: the default
    /// (planned from measured bandwidths), the latency tree, store-and-forward (see
    /// overlay::bench::large).
    Large {
        /// Nodes started in every cluster.
        #[arg(long, default_value_t = overlay::bench::large::DEFAULT_NODES_PER_CLUSTER)]
        nodes_per_cluster: usize,
        /// Skip payloads larger than this many MiB (for a quick look).
        #[arg(long, default_value_t = usize::MAX)]
        max_mib: usize,
        /// The topology: a name under topologies/ or a file.
        #[arg(long, default_value = "das-4")]
        topology: String,
        /// The cluster whose first node broadcasts.
        #[arg(long, default_value = "VU")]
        root: String,
        /// The contenders to run, comma-separated (default, single-tree,
        /// store-and-forward); all of them unless told.
        #[arg(long, value_delimiter = ',', value_parser = contender)]
        contenders: Vec<overlay::bench::large::Contender>,
    },
    /// Broadcasts from 1 KiB to 64 MiB with emulated bandwidth over real QUIC: the default
    /// against the latency tree and the packed trees, where it switches and whether it
    /// picks the faster (see overlay::bench::crossover).
    Crossover {
        /// The topology: a name under topologies/ or a file.
        #[arg(long, default_value = "das-4")]
        topology: String,
        /// The cluster whose first node broadcasts.
        #[arg(long, default_value = "VU")]
        root: String,
        /// Skip payloads larger than this many MiB.
        #[arg(long, default_value_t = 64)]
        max_mib: u64,
        /// Nodes started in every cluster.
        #[arg(long, default_value_t = overlay::bench::large::DEFAULT_NODES_PER_CLUSTER)]
        nodes_per_cluster: usize,
    },
    /// Allreduce and reduce of f32 vectors, scatter, gather and allgather of pieces, from
    /// 64 KiB to 64 MiB with emulated bandwidth over real QUIC, every node taking part: the
    /// default against each algorithm forced (see overlay::bench::collectives_large).
    CollectivesLarge {
        /// The topology: a name under topologies/ or a file.
        #[arg(long, default_value = "das-4")]
        topology: String,
        /// Skip vectors larger than this many MiB.
        #[arg(long, default_value_t = 16)]
        max_mib: u64,
        /// Nodes started in every cluster.
        #[arg(long, default_value_t = overlay::bench::collectives_large::DEFAULT_NODES_PER_CLUSTER)]
        nodes_per_cluster: usize,
        /// Skip vectors smaller than this many MiB (0: from 64 KiB).
        #[arg(long, default_value_t = 0)]
        min_mib: u64,
        /// The collectives to measure, comma-separated (allreduce, reduce, scatter, gather,
        /// allgather); all of them unless told. The online-tuning run comes with scatter
        /// when the sizes include 2 MiB and every contender runs.
        #[arg(long, value_delimiter = ',', value_parser = collective)]
        collectives: Vec<overlay::bench::collectives_large::Collective>,
        /// The contenders to run, comma-separated (default and algorithm names); all of
        /// them unless told.
        #[arg(long, value_delimiter = ',')]
        contenders: Vec<String>,
    },
    /// The same collectives in the simulator with bandwidth: the simulated nodes measure
    /// the network, the planner's code plans each call on what they measured, and the
    /// simulator times the plan's transfers (see overlay::bench::collectives_sim).
    CollectivesSim {
        /// The topology: a name under topologies/ or a file.
        #[arg(long, default_value = "das-4")]
        topology: String,
        /// Skip sizes larger than this many MiB.
        #[arg(long, default_value_t = 64)]
        max_mib: u64,
        /// Nodes started in every cluster.
        #[arg(long, default_value_t = overlay::bench::collectives_large::DEFAULT_NODES_PER_CLUSTER)]
        nodes_per_cluster: usize,
        /// The collectives to measure, comma-separated; all of them unless told.
        #[arg(long, value_delimiter = ',', value_parser = collective)]
        collectives: Vec<overlay::bench::collectives_large::Collective>,
        /// Virtual seconds the nodes keep measuring once every view is complete.
        #[arg(long, default_value_t = 20)]
        settle_s: u64,
        /// The cluster whose first node is the root of reduce, scatter and gather (the
        /// first cluster's unless told).
        #[arg(long)]
        root: Option<String>,
    },
    /// Real `overlay-node` processes on loopback for minutes with churn, broadcasts and
    /// collectives: RSS, descriptors, tasks and traffic at the start and the end, and
    /// deliveries lost or duplicated (see examples/bench/soak.rs). Not part of `all`.
    Soak(soak::SoakArgs),
    /// Everything above but `soak`; writes docs/BENCHMARKS.md and the plots, carrying over the
    /// sections of the old report marked as kept (figures from runs `all` does not make).
    All,
}

fn contender(name: &str) -> Result<overlay::bench::large::Contender, String> {
    use overlay::bench::large::Contender;
    Contender::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Contender::ALL.iter().map(|c| c.name()).collect();
        format!("no contender {name:?}; there are {}", names.join(", "))
    })
}

fn collective(name: &str) -> Result<overlay::bench::collectives_large::Collective, String> {
    use overlay::bench::collectives_large::Collective;
    let names: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
    (Collective::ALL.into_iter().find(|c| c.name() == name))
        .ok_or_else(|| format!("no collective {name:?}; there are {}", names.join(", ")))
}

fn topology(name: &str) -> anyhow::Result<Topology> {
    let file = PathBuf::from(name);
    let path = if file.extension().is_some_and(|e| e == "toml") {
        file
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("topologies")
            .join(format!("{name}.toml"))
    };
    Topology::load(&path).with_context(|| format!("loading {}", path.display()))
}

fn progress(msg: &str) {
    eprintln!("[bench] {msg}");
}

/// A converged phoenix-168 simulation.
fn converged_sim(topo: &Topology, seed: u64) -> anyhow::Result<(Sim, Duration)> {
    let mut sim = Sim::new(
        topo,
        SimConfig {
            seed,
            ..SimConfig::default()
        },
    );
    let Some(t) = sim.run_until_converged(Duration::from_secs(120)) else {
        bail!("{} did not converge in 120 simulated s", topo.name);
    };
    Ok((sim, t))
}

/// The roots: the first two nodes of every cluster.
fn roots(sim: &Sim) -> Vec<usize> {
    let mut r = Vec::new();
    let mut seen: HashMap<usize, usize> = HashMap::new();
    for i in 0..sim.total_nodes() {
        let c = sim.cluster_of(i);
        let n = seen.entry(c).or_default();
        if *n < 2 {
            r.push(i);
            *n += 1;
        }
    }
    r
}

/// Starts `what` at `root`, runs 3 s, returns (node, µs after the start, sender) of the
/// deliveries `pick` selects, and the report's elapsed µs.
fn run_op(
    sim: &mut Sim,
    root: usize,
    nonce: u64,
    what: StartKind,
    pick: impl Fn(&Event) -> bool,
) -> (Vec<(usize, f64, overlay::proto::NodeId)>, f64) {
    sim.record_events(true);
    let t0 = sim.now();
    sim.command(
        root,
        Command::Start(Start {
            group: None,
            nonce,
            timeout: Duration::from_secs(5),
            what,
        }),
    );
    sim.run_for(Duration::from_secs(3));
    let mut got = Vec::new();
    let mut report = f64::NAN;
    for (t, node, ev) in sim.take_events() {
        let us = t.saturating_since(t0).as_secs_f64() * 1e6;
        if let Event::Report(r) = &ev
            && r.op.is_some_and(|o| o.nonce == nonce)
        {
            report = r.elapsed.as_secs_f64() * 1e6;
        }
        if pick(&ev)
            && let Event::Delivered(d) = &ev
        {
            got.push((node, us, d.from));
        }
    }
    sim.record_events(false);
    (got, report)
}

struct Contender {
    name: &'static str,
    times_ms: Vec<f64>,
}

fn summary(c: &Contender) -> (f64, f64) {
    let mut v = c.times_ms.clone();
    v.sort_by(f64::total_cmp);
    (quantile(&v, 0.5), *v.last().unwrap_or(&f64::NAN))
}

/// A number from the results, NaN where it is missing.
pub(crate) fn num(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Seconds from the results to one decimal, `-` where they are missing (not converged).
pub(crate) fn secs(v: &serde_json::Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.1}"))
}

/// One send-order comparison of fig5 (`planned` or `trees_alone`): most descendants first
/// median and max, id order median and max, then the ratio's median and max.
pub(crate) fn send_order_row(o: &serde_json::Value) -> [f64; 6] {
    [
        num(&o["descendants_first_ms"][0]),
        num(&o["descendants_first_ms"][1]),
        num(&o["id_order_ms"][0]),
        num(&o["id_order_ms"][1]),
        num(&o["ratio"]["median"]),
        num(&o["ratio"]["max"]),
    ]
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Logs only when asked (RUST_LOG=overlay=debug, say), on stderr beside the progress.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let wall = Instant::now();
    let results = match cli.what.clone() {
        What::Fig5 => vec![fig5(&cli)?],
        What::Collectives => vec![collectives(&cli)?],
        What::Convergence => vec![convergence(&cli)?],
        What::Overhead => vec![overhead(&cli)?],
        What::Quic => vec![quic(&cli)?],
        What::Large {
            nodes_per_cluster,
            max_mib,
            topology,
            root,
            contenders,
        } => vec![large(
            &cli,
            nodes_per_cluster,
            max_mib,
            &topology,
            &root,
            &contenders,
        )?],
        What::Crossover {
            topology,
            root,
            max_mib,
            nodes_per_cluster,
        } => vec![crossover(
            &cli,
            &topology,
            &root,
            max_mib,
            nodes_per_cluster,
        )?],
        What::CollectivesLarge {
            topology,
            max_mib,
            min_mib,
            nodes_per_cluster,
            collectives,
            contenders,
        } => {
            let pick = Selection {
                min_mib,
                max_mib,
                collectives: &collectives,
                contenders: &contenders,
            };
            vec![collectives_large(&cli, &topology, nodes_per_cluster, pick)?]
        }
        What::CollectivesSim {
            topology,
            max_mib,
            nodes_per_cluster,
            collectives,
            settle_s,
            root,
        } => vec![collectives_sim(
            &cli,
            &topology,
            max_mib,
            nodes_per_cluster,
            &collectives,
            (settle_s, root),
        )?],
        What::Soak(args) => {
            let report = soak::soak(&args)?;
            if !cli.json {
                print!("{}", report.text());
            }
            vec![serde_json::to_value(&report)?]
        }
        What::All => {
            // The real-QUIC Fig. 5 first and alone: it times sub-millisecond hops, which
            // anything else running beside it would disturb.
            let quic_run = quic(&cli)?;
            // Then, at once: one set of simulator runs for convergence and overhead
            // (scale-1000 and phoenix-168 are converged once; their overhead window comes
            // before the crash), fig5 and collectives (deterministic simulations: the
            // machine's load changes only their wall time), and the large broadcasts,
            // which mostly wait on the emulated links' bandwidth.
            let (first, runs, big) = std::thread::scope(|s| {
                let sims = s.spawn(|| {
                    run_sim_jobs(&sim_jobs(true, true, cli.with_2000), cli.seed, cli.threads)
                });
                // The crossover after the large broadcasts, not beside them: both keep
                // the emulated wide-area links full.
                let big = s.spawn(|| {
                    let nodes = overlay::bench::large::DEFAULT_NODES_PER_CLUSTER;
                    let large = large(&cli, nodes, usize::MAX, "das-4", "VU", &[])?;
                    let crossover = crossover(&cli, "das-4", "VU", 64, nodes)?;
                    let per_cluster = overlay::bench::collectives_large::DEFAULT_NODES_PER_CLUSTER;
                    let allreduce =
                        collectives_large(&cli, "das-4", per_cluster, Selection::all(16))?;
                    Ok::<_, anyhow::Error>([large, crossover, allreduce])
                });
                let first = fig5(&cli).and_then(|f| Ok(vec![f, collectives(&cli)?]));
                (
                    first,
                    sims.join().expect("simulator runs do not panic"),
                    big.join().expect("the large broadcasts do not panic"),
                )
            });
            let (mut all, runs) = (first?, runs?);
            all.push(convergence_report(&cli, &runs));
            all.push(overhead_report(&cli, &runs)?);
            // Real-QUIC runs on other topologies (phoenix-168), from separate runs; not the
            // one just made (`all --quic-topology phoenix-168` saves it too).
            let saved = quic::saved_runs(&cli.out)?;
            let others: Vec<serde_json::Value> = saved
                .into_iter()
                .filter(|r| r["topology"] != quic_run["topology"])
                .collect();
            all.push(quic_run);
            all.extend(others);
            all.extend(big?);
            // The same collectives in the simulator: deterministic and quick, after the rest.
            let per_cluster = overlay::bench::collectives_large::DEFAULT_NODES_PER_CLUSTER;
            all.push(collectives_sim(
                &cli,
                "das-4",
                64,
                per_cluster,
                &[],
                (20, None),
            )?);
            all
        }
    };
    if cli.json {
        for r in &results {
            println!("{r}");
        }
    }
    if let What::All = cli.what {
        std::fs::write(
            cli.out.join("bench-results.json"),
            serde_json::to_string_pretty(&results)?,
        )?;
        // Sections from runs `all` does not make are carried over from the report replaced.
        let report = cli.out.join("BENCHMARKS.md");
        let kept = std::fs::read_to_string(&report)
            .map(|old| markdown::kept_sections(&old))
            .unwrap_or_default();
        std::fs::write(&report, markdown(&results, cli.seed) + &kept)?;
        progress(&format!(
            "all done in {:.0} s; results in {}/bench-results.json",
            wall.elapsed().as_secs_f64(),
            cli.out.display()
        ));
    }
    Ok(())
}
