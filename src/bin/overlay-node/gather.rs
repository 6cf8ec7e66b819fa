//! `overlay-node gather KEY`: every member's value under KEY (`overlay-node publish`),
//! gathered along the running node's tree; `gather info` gives every member's id, name,
//! address and uptime.

use anyhow::bail;
use overlay::admin::{AdminRequest, AdminResponse, request};

/// Options of `gather`.
#[derive(clap::Args, Debug)]
pub struct GatherArgs {
    /// The key members published their values under, or `info`.
    key: String,
    #[command(flatten)]
    dir: crate::dirs::DataDirArg,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: GatherArgs) -> anyhow::Result<()> {
    let dir = args.dir.resolve()?;
    if args.key != "info" {
        return values(&dir, args.key, args.json).await;
    }
    let AdminResponse::Info(r) = request(&dir, &AdminRequest::GatherInfo).await? else {
        bail!("unexpected answer from the node");
    };
    if args.json {
        crate::json::print_pretty(&r)?;
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

async fn values(dir: &std::path::Path, key: String, json: bool) -> anyhow::Result<()> {
    let AdminResponse::Values(r) = request(dir, &AdminRequest::Gather { key: key.clone() }).await?
    else {
        bail!("unexpected answer from the node");
    };
    if json {
        crate::json::print_pretty(&r)?;
        return Ok(());
    }
    for (id, value) in &r.values {
        println!("{:<10} {value}", id.short());
    }
    println!(
        "{} members have a value under {key:?} ({:.1} ms)",
        r.values.len(),
        r.elapsed_ms
    );
    for (what, ids) in [("without a value", &r.declined), ("missing", &r.missing)] {
        if !ids.is_empty() {
            let ids: Vec<String> = ids.iter().map(|m| m.short()).collect();
            println!("{what}: {}", ids.join(" "));
        }
    }
    Ok(())
}
