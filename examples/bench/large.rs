//! large: 1, 16 and 64 MiB broadcasts with emulated bandwidth over real QUIC (das-4 from
//! VU unless told otherwise): default, single-tree and store-and-forward side by side (the
//! measurement lives in `overlay::bench::large`).

use super::{Cli, progress, topology};

pub(crate) fn large(
    cli: &Cli,
    nodes_per_cluster: usize,
    max_mib: usize,
    topology_name: &str,
    root: &str,
    contenders: &[overlay::bench::large::Contender],
) -> anyhow::Result<serde_json::Value> {
    use overlay::bench::{large, large_report};
    let opts = large::Options {
        topology: topology(topology_name)?,
        nodes_per_cluster,
        root_cluster: root.into(),
        sizes_mib: large::SIZES_MIB
            .into_iter()
            .filter(|&m| m <= max_mib)
            .collect(),
        contenders: if contenders.is_empty() {
            large::Contender::ALL.to_vec()
        } else {
            contenders.to_vec()
        },
    };
    let outcome = large::run(&opts, &progress)?;
    std::fs::create_dir_all(&cli.out)?;
    std::fs::write(cli.out.join(large_report::SVG), large_report::svg(&outcome))?;
    if !cli.json {
        println!(
            "{}",
            large_report::text(&outcome, &cli.out.display().to_string())
        );
    }
    Ok(serde_json::to_value(&outcome)?)
}

/// The crossover table (1 KiB to 64 MiB, default against single-tree and multi-tree).
pub(crate) fn crossover(
    cli: &Cli,
    topology_name: &str,
    root: &str,
    max_mib: u64,
    nodes_per_cluster: usize,
) -> anyhow::Result<serde_json::Value> {
    use overlay::bench::crossover;
    let opts = crossover::Options {
        topology: topology(topology_name)?,
        nodes_per_cluster,
        root_cluster: root.into(),
        max_bytes: max_mib.saturating_mul(1 << 20),
    };
    let outcome = crossover::run(&opts, &progress)?;
    if !cli.json {
        println!("{}", crossover::text(&outcome));
    }
    Ok(serde_json::to_value(&outcome)?)
}

/// Which sizes, collectives and contenders `collectives-large` runs.
pub(crate) struct Selection<'a> {
    pub min_mib: u64,
    pub max_mib: u64,
    pub collectives: &'a [overlay::bench::collectives_large::Collective],
    pub contenders: &'a [String],
}

impl Selection<'_> {
    /// Everything up to `max_mib`.
    pub(crate) fn all(max_mib: u64) -> Selection<'static> {
        Selection {
            min_mib: 0,
            max_mib,
            collectives: &[],
            contenders: &[],
        }
    }
}

/// Large collectives over real QUIC: the default against every algorithm forced.
pub(crate) fn collectives_large(
    cli: &Cli,
    topology_name: &str,
    nodes_per_cluster: usize,
    pick: Selection<'_>,
) -> anyhow::Result<serde_json::Value> {
    use overlay::bench::collectives_large as bench;
    let opts = bench::Options {
        topology: topology(topology_name)?,
        nodes_per_cluster,
        max_bytes: pick.max_mib.saturating_mul(1 << 20),
        min_bytes: pick.min_mib.saturating_mul(1 << 20),
        collectives: if pick.collectives.is_empty() {
            bench::Collective::ALL.to_vec()
        } else {
            pick.collectives.to_vec()
        },
        contenders: pick.contenders.to_vec(),
    };
    let outcome = bench::run(&opts, &progress)?;
    std::fs::create_dir_all(&cli.out)?;
    let report = overlay::bench::collectives_large_report::svg(&outcome);
    std::fs::write(cli.out.join(bench::SVG), report)?;
    if !cli.json {
        println!(
            "{}",
            overlay::bench::collectives_large_report::text(&outcome)
        );
    }
    Ok(serde_json::to_value(&outcome)?)
}

/// The large collectives in the simulator: the default against every algorithm forced.
pub(crate) fn collectives_sim(
    cli: &Cli,
    topology_name: &str,
    max_mib: u64,
    nodes_per_cluster: usize,
    collectives: &[overlay::bench::collectives_large::Collective],
    (settle_s, root): (u64, Option<String>),
) -> anyhow::Result<serde_json::Value> {
    use overlay::bench::collectives_large as bench;
    let opts = overlay::bench::collectives_sim::Options {
        topology: topology(topology_name)?,
        nodes_per_cluster,
        max_bytes: max_mib.saturating_mul(1 << 20),
        collectives: if collectives.is_empty() {
            bench::Collective::ALL.to_vec()
        } else {
            collectives.to_vec()
        },
        seed: cli.seed,
        settle: std::time::Duration::from_secs(settle_s),
        root,
    };
    let outcome = overlay::bench::collectives_sim::run(&opts, &progress)?;
    std::fs::create_dir_all(&cli.out)?;
    let report = overlay::bench::collectives_large_report::svg(&outcome);
    std::fs::write(cli.out.join(SIM_SVG), report)?;
    if !cli.json {
        println!(
            "{}",
            overlay::bench::collectives_large_report::text(&outcome)
        );
    }
    Ok(serde_json::to_value(&outcome)?)
}

/// File name of the simulator run's plot.
pub(crate) const SIM_SVG: &str = "collectives-sim.svg";
