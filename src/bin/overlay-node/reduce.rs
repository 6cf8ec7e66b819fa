//! `overlay-node reduce KEY`: combines every member's value under KEY along the running
//! node's tree (`reduce count` counts the members: each contributes 1).

use anyhow::bail;
use overlay::admin::{AdminRequest, AdminResponse, JsonOp, request};
use overlay::proto::NodeId;

/// Options of `reduce`.
#[derive(clap::Args, Debug)]
pub struct ReduceArgs {
    /// The key members published their values under (`overlay-node publish`), or `count`.
    key: String,
    /// How values combine: numbers, or arrays of numbers element by element.
    #[arg(long, value_enum, default_value = "sum")]
    op: Op,
    #[command(flatten)]
    dir: crate::dirs::DataDirArg,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// `--op` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Op {
    /// The sum.
    Sum,
    /// The smallest.
    Min,
    /// The largest.
    Max,
}

pub async fn run(args: ReduceArgs) -> anyhow::Result<()> {
    let dir = args.dir.resolve()?;
    if args.key == "count" {
        let AdminResponse::Count(r) = request(&dir, &AdminRequest::ReduceCount).await? else {
            bail!("unexpected answer from the node");
        };
        if args.json {
            crate::json::print_pretty(&r)?;
            return Ok(());
        }
        println!(
            "count {} ({} contributors) in {:.1} ms",
            r.count,
            r.contributors.len(),
            r.elapsed_ms
        );
        print_ids("missing", &r.missing);
        return Ok(());
    }
    let op = match args.op {
        Op::Sum => JsonOp::Sum,
        Op::Min => JsonOp::Min,
        Op::Max => JsonOp::Max,
    };
    let req = AdminRequest::Reduce {
        key: args.key.clone(),
        op,
    };
    let AdminResponse::Reduced(r) = request(&dir, &req).await? else {
        bail!("unexpected answer from the node");
    };
    if args.json {
        crate::json::print_pretty(&r)?;
        return Ok(());
    }
    match &r.value {
        Some(v) => println!(
            "{:?} of {}: {v} ({} contributors, {:.1} ms)",
            op,
            args.key,
            r.contributors.len(),
            r.elapsed_ms
        ),
        None => println!("nobody has a value under {:?}", args.key),
    }
    print_ids("without a value", &r.declined);
    print_ids("missing", &r.missing);
    Ok(())
}

fn print_ids(what: &str, ids: &[NodeId]) {
    if !ids.is_empty() {
        let ids: Vec<String> = ids.iter().map(|m| m.short()).collect();
        println!("{what}: {}", ids.join(" "));
    }
}
