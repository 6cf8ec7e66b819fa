//! `overlay-netns plan TOPOLOGY [--nodes-per-cluster N]`: the layout for the scripts.

use overlay::testbed::Plan;
use overlay::topology::Topology;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// Topology file (format: topologies/README.md).
    topology: PathBuf,
    /// Nodes in every cluster (default: each cluster's `nodes` from the file).
    #[arg(long, value_name = "N")]
    nodes_per_cluster: Option<usize>,
}

pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let topology = Topology::load(&args.topology)?;
    let plan = Plan::new(topology, args.nodes_per_cluster)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.topology.display()))?;
    print!("{}", plan.to_lines());
    Ok(ExitCode::SUCCESS)
}
