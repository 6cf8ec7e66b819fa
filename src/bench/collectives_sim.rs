//! `collectives-sim`: the large collectives in the simulator with bandwidth, side by side
//! with the same contenders as [`super::collectives_large`] (its tables and plot serve
//! both).
//!
//! The simulated nodes first measure the network themselves: the simulator runs the tree
//! cores with packet trains through its bandwidth pipes until every node's cluster
//! bandwidth view is complete (the topology's figures reach the pipes only). Then, for
//! each collective, size and contender, the planner's own code ([`Ask`]) plans the
//! operation on that node's measured view (the default through a decision table of its
//! own, nine calls per size, each call's simulated time recorded, as a node's planner
//! does), the plan becomes its graph of transfers ([`dag`]), and the simulator times the
//! graph through the same pipes ([`crate::sim::bulk::replay`]). The plans are the ones a
//! node would send; what the simulator leaves out is the executors' CPU and QUIC's
//! ramp-up.

use super::collectives_large::{Collective, Contender, Outcome, Row, SIZES};
use crate::proto::bulk::dag;
use crate::proto::bulk::model::Network;
use crate::proto::bulk::paths::Direction;
use crate::proto::bulk::plans::Ask;
use crate::proto::bulk::{Algorithm, Control, Elem, ReduceOp, Tuner};
use crate::proto::{self, NodeId};
use crate::sim::{NetModel, Sim, SimConfig};
use crate::topology::Topology;
use anyhow::{Context, bail};
use std::time::{Duration, Instant};

/// Default calls per size (the decision table may switch between them; on cheap calls it
/// tries every close algorithm once, up to four of them, and the median is then still a
/// settled call).
const REPEAT: usize = 9;
/// How long the nodes may take to measure every cluster pair, virtual time.
const MEASURE_LIMIT: Duration = Duration::from_secs(120);

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub topology: Topology,
    pub nodes_per_cluster: usize,
    /// Sizes above this are skipped.
    pub max_bytes: u64,
    pub collectives: Vec<Collective>,
    pub seed: u64,
    /// Virtual time the nodes keep measuring once every view is complete.
    pub settle: Duration,
    /// The cluster (by name) whose first node is the root of reduce, scatter and gather;
    /// the first cluster's if none.
    pub root: Option<String>,
}

/// Runs the benchmark; `progress` gets one line at a time.
pub fn run(opts: &Options, progress: &dyn Fn(&str)) -> anyhow::Result<Outcome> {
    let wall = Instant::now();
    let mut topo = opts.topology.clone();
    for c in &mut topo.clusters {
        c.nodes = opts.nodes_per_cluster;
    }
    let defaults = SimConfig::default();
    let cfg = SimConfig {
        seed: opts.seed,
        bandwidth: true,
        core: proto::Config {
            bw_probers: 2,
            ..defaults.core.clone()
        },
        ..defaults
    };
    let mut sim = Sim::new(&topo, cfg);
    let k = topo.clusters.len();
    let complete = |sim: &Sim| {
        sim.live_nodes().iter().all(|&i| {
            let view = sim.core(i).bandwidth_view();
            view.clusters.len() == k && view.complete()
        })
    };
    let mut waited = Duration::ZERO;
    while !complete(&sim) {
        if waited >= MEASURE_LIMIT {
            bail!("the simulated nodes had not measured every cluster pair after {waited:?}");
        }
        sim.run_for(Duration::from_secs(1));
        waited += Duration::from_secs(1);
    }
    // Some routine trains more, so the medians rest on several.
    sim.run_for(opts.settle);
    progress(&format!(
        "collectives-sim: {} nodes measured every cluster pair after {:.0} s (virtual)",
        sim.ids().len(),
        waited.as_secs_f64()
    ));
    let mut members: Vec<NodeId> = sim.ids().to_vec();
    members.sort();
    let index = |id: NodeId| sim.index_of(id).expect("a node of the run");
    let cluster_of: Vec<usize> = members.iter().map(|m| sim.cluster_of(index(*m))).collect();
    let mut file_groups: Vec<Vec<NodeId>> = vec![Vec::new(); k];
    for (m, c) in members.iter().zip(&cluster_of) {
        file_groups[*c].push(*m);
    }
    // The root of reduce, scatter and gather: the first cluster's first node (as in
    // collectives-large); the smallest id plans the others.
    let root_cluster = match &opts.root {
        None => 0,
        Some(name) => (topo.clusters.iter())
            .position(|c| c.name == *name)
            .with_context(|| format!("no cluster {name} in {}", topo.name))?,
    };
    let root = (0..sim.ids().len())
        .find(|i| sim.cluster_of(*i) == root_cluster)
        .map(|i| sim.ids()[i])
        .context("the root's cluster has no nodes")?;
    let net = NetModel::from_topology(&topo);
    let n = members.len();
    let mut tuners = [Tuner::default(), Tuner::default()];
    let mut rows = Vec::new();
    for &collective in &opts.collectives {
        let planner = match collective {
            Collective::Allreduce | Collective::Allgather => members[0],
            _ => root,
        };
        let view = sim.core(index(planner)).bandwidth_view();
        let measured = Network::from_view(&view, &members, None);
        let fixed = Network::from_view(&view, &members, Some(&file_groups));
        let sizes: Vec<usize> = measured.groups.iter().map(Vec::len).collect();
        let mbit =
            |v: &[f64]| -> Vec<String> { v.iter().map(|b| format!("{:.1}", b / 1e6)).collect() };
        let wide: Vec<Vec<String>> = measured.wide_bps.iter().map(|r| mbit(r)).collect();
        progress(&format!(
            "collectives-sim: {} planned on the view of {}: clusters of {sizes:?} members, Mbit/s inside {:?}, between {wide:?}",
            collective.name(),
            planner.short(),
            mbit(&measured.lan_bps),
        ));
        let tuner = &mut tuners[usize::from(planner == root)];
        for bytes in SIZES.into_iter().filter(|b| *b <= opts.max_bytes) {
            let each = vec![bytes / n as u64; n];
            let ask = match collective {
                Collective::Allreduce | Collective::Reduce => Ask::Reduce {
                    len: bytes / 4,
                    elem: Elem::F32,
                    op: ReduceOp::Sum,
                    root: (collective == Collective::Reduce).then_some(root),
                },
                Collective::Scatter | Collective::Gather => Ask::Route {
                    direction: match collective {
                        Collective::Scatter => Direction::Scatter,
                        _ => Direction::Gather,
                    },
                    root,
                    sizes: &each,
                },
                Collective::Allgather => Ask::Allgather { sizes: &each },
            };
            for contender in collective.contenders() {
                let network = match contender {
                    Contender::Forced(Algorithm::Hierarchical) => &fixed,
                    _ => &measured,
                };
                let repeat = if contender == Contender::Default {
                    REPEAT
                } else {
                    1
                };
                let mut calls = Vec::new();
                for _ in 0..repeat {
                    let algorithm = match contender {
                        Contender::Forced(a) => a,
                        Contender::Default => {
                            let p = ask.predict(network, &members);
                            tuner.choose(ask.collective(), ask.bytes(), p)
                        }
                    };
                    let plan = ask.plan(network, &members, Vec::new(), algorithm, 0);
                    let (transfers, predicted) = match &plan {
                        Control::Plan(p) => (dag::of_bulk(p), p.predicted_s),
                        Control::RoutePlan(p) => (dag::of_route(p), p.predicted_s),
                        Control::SpreadPlan(p) => (dag::of_spread(p), p.predicted_s),
                        _ => bail!("no graph for {plan:?}"),
                    };
                    let took = crate::sim::bulk::replay(&net, &cluster_of, &transfers);
                    let seconds = took.as_secs_f64();
                    let replay =
                        |t: &[dag::Transfer]| crate::sim::bulk::replay(&net, &cluster_of, t);
                    match &plan {
                        Control::Plan(p) if contender == Contender::Default => {
                            progress(&patterns_side_by_side(p, seconds, &replay));
                            if !p.relays.is_empty() {
                                progress(&relays_side_by_side(network, p, seconds, &replay));
                            }
                        }
                        Control::SpreadPlan(p)
                            if contender == Contender::Default
                                && p.algorithm == Algorithm::Relayed =>
                        {
                            progress(&spread_patterns(network, p, seconds, &replay));
                        }
                        _ => {}
                    }
                    if contender == Contender::Default {
                        tuner.record(ask.collective(), ask.bytes(), algorithm, seconds);
                    }
                    calls.push((algorithm, seconds, predicted));
                }
                let mut times: Vec<f64> = calls.iter().map(|c| c.1).collect();
                times.sort_by(f64::total_cmp);
                progress(&format!(
                    "collectives-sim: {} {} {}: {:.3} s ({})",
                    collective.name(),
                    super::large::size_label(bytes),
                    contender.name(),
                    times[times.len() / 2],
                    calls.last().map_or("-", |c| c.0.name())
                ));
                rows.push(Row {
                    collective,
                    bytes,
                    contender,
                    completion_s: times[times.len() / 2],
                    calls,
                });
            }
        }
    }
    let mut table = tuners[0].entries();
    table.extend(tuners[1].entries());
    Ok(Outcome {
        benchmark: "collectives-sim".into(),
        topology: topo.name.clone(),
        nodes: n,
        rows,
        table,
        tuning: Vec::new(),
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

/// The patterns the model chose inside the clusters for a default allreduce or reduce,
/// and the same plan timed with chains and with binomial trees everywhere (side by side,
/// same pipes).
fn patterns_side_by_side(
    plan: &crate::proto::bulk::BulkPlan,
    seconds: f64,
    replay: &dyn Fn(&[dag::Transfer]) -> Duration,
) -> String {
    use crate::proto::bulk::{BulkPlan, Inside};
    let names: Vec<&str> = (0..plan.groups.len())
        .map(|g| plan.inside(g).name())
        .collect();
    let every = |inside: Inside| {
        let p = BulkPlan {
            inside: vec![inside; plan.groups.len()],
            ..plan.clone()
        };
        replay(&dag::of_bulk(&p)).as_secs_f64()
    };
    let (chains, trees) = (every(Inside::Chain), every(Inside::Binomial));
    format!(
        "collectives-sim:   inside the clusters {names:?}: {seconds:.3} s; chains everywhere \
         {chains:.3} s, binomial trees everywhere {trees:.3} s; chosen / best {:.2}",
        seconds / chains.min(trees).max(1e-9)
    )
}

/// The patterns the model chose inside the clusters for a default allgather, and the same
/// allgather planned with stars, chains and binomial trees everywhere (side by side, same
/// pipes).
fn spread_patterns(
    network: &Network,
    plan: &crate::proto::bulk::spread::SpreadPlan,
    seconds: f64,
    replay: &dyn Fn(&[dag::Transfer]) -> Duration,
) -> String {
    use crate::proto::bulk::{Inside, spread};
    let names: Vec<&str> = plan.inside.iter().map(|i| i.name()).collect();
    let every = |inside: Inside| {
        let all = vec![inside; network.groups.len()];
        let p = spread::plan_with(network, plan.algorithm, &plan.members, &plan.sizes, &all);
        let forced = spread::SpreadPlan {
            trees: p.trees,
            chunk: p.chunk,
            ..plan.clone()
        };
        replay(&dag::of_spread(&forced)).as_secs_f64()
    };
    let times = [Inside::Star, Inside::Chain, Inside::Binomial].map(every);
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    format!(
        "collectives-sim:   inside the clusters {names:?}: {seconds:.3} s; stars everywhere \
         {:.3} s, chains {:.3} s, binomial trees {:.3} s; chosen / best {:.2}",
        times[0],
        times[1],
        times[2],
        seconds / best.max(1e-9)
    )
}

/// A relayed clustered plan against the same plan with every partial straight to its
/// owner (the shares the model gives that), same pipes.
fn relays_side_by_side(
    network: &Network,
    plan: &crate::proto::bulk::BulkPlan,
    seconds: f64,
    replay: &dyn Fn(&[dag::Transfer]) -> Duration,
) -> String {
    use crate::proto::bulk::{BulkPlan, model};
    let root = (plan.root).and_then(|id| (network.groups.iter()).position(|g| g.contains(&id)));
    let direct = BulkPlan {
        relays: Vec::new(),
        shares: model::split(plan.len, &model::shares_to(network, root)),
        ..plan.clone()
    };
    let straight = replay(&dag::of_bulk(&direct)).as_secs_f64();
    // A chunk relays when some group's next group, up or down, is not the owner.
    let through = (plan.relays.iter())
        .filter(|r| {
            let owner = (0..r.up.len()).find(|g| r.up[*g] as usize == *g);
            let off = |next: &[u32]| next.iter().any(|x| Some(*x as usize) != owner);
            off(&r.up) || off(&r.down)
        })
        .count();
    format!(
        "collectives-sim:   relayed through third clusters ({through} of {} chunks): \
         {seconds:.3} s; straight to the owners {straight:.3} s; relayed / straight {:.2}",
        plan.relays.len(),
        seconds / straight.max(1e-9)
    )
}
