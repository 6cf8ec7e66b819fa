//! `overlay-node reduce count`: counts the members with a reduce along the running node's
//! tree (each contributes 1).

use anyhow::bail;
use overlay::admin::{AdminRequest, AdminResponse, request};

/// What to reduce.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum What {
    /// The number of members (each contributes 1).
    Count,
}

/// Options of `reduce`.
#[derive(clap::Args, Debug)]
pub struct ReduceArgs {
    /// What to reduce.
    what: What,
    #[command(flatten)]
    dir: crate::dirs::DataDirArg,
    /// Print one JSON object: count, contributors, missing, elapsed_ms.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: ReduceArgs) -> anyhow::Result<()> {
    let What::Count = args.what;
    let AdminResponse::Count(r) = request(&args.dir.resolve()?, &AdminRequest::ReduceCount).await?
    else {
        bail!("unexpected answer from the node");
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "count {} ({} contributors) in {:.1} ms",
        r.count,
        r.contributors.len(),
        r.elapsed_ms
    );
    if !r.missing.is_empty() {
        let ids: Vec<String> = r.missing.iter().map(|m| m.short()).collect();
        println!("missing: {}", ids.join(" "));
    }
    Ok(())
}
