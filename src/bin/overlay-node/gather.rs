//! `overlay-node gather info`: every member's id, name, address and uptime, gathered along
//! the running node's tree.

use anyhow::bail;
use overlay::admin::{AdminRequest, AdminResponse, request};

/// What to gather.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum What {
    /// Each member's id, name, address and uptime.
    Info,
}

/// Options of `gather`.
#[derive(clap::Args, Debug)]
pub struct GatherArgs {
    /// What to gather.
    what: What,
    #[command(flatten)]
    dir: crate::dirs::DataDirArg,
    /// Print one JSON object: nodes, missing, elapsed_ms.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: GatherArgs) -> anyhow::Result<()> {
    let What::Info = args.what;
    let AdminResponse::Info(r) = request(&args.dir.resolve()?, &AdminRequest::GatherInfo).await?
    else {
        bail!("unexpected answer from the node");
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "{:<10} {:<16} {:<22} {:>10}",
        "id", "name", "address", "uptime s"
    );
    for n in &r.nodes {
        println!(
            "{:<10} {:<16} {:<22} {:>10.1}",
            n.id.short(),
            n.name,
            n.addr,
            n.uptime_ms as f64 / 1e3
        );
    }
    println!(
        "{} members answered in {:.1} ms",
        r.nodes.len(),
        r.elapsed_ms
    );
    if !r.missing.is_empty() {
        let ids: Vec<String> = r.missing.iter().map(|m| m.short()).collect();
        println!("missing: {}", ids.join(" "));
    }
    Ok(())
}
