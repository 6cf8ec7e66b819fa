//! large: 1, 16 and 64 MiB broadcasts on das-4 with emulated bandwidth over real QUIC,
//! pipelined against store-and-forward (the measurement lives in `overlay::bench::large`).

use super::{Cli, progress, topology};

pub(crate) fn large(
    cli: &Cli,
    nodes_per_cluster: usize,
    max_mib: usize,
) -> anyhow::Result<serde_json::Value> {
    use overlay::bench::{large, large_report};
    let opts = large::Options {
        topology: topology("das-4")?,
        nodes_per_cluster,
        root_cluster: "VU".into(),
        sizes_mib: large::SIZES_MIB
            .into_iter()
            .filter(|&m| m <= max_mib)
            .collect(),
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
