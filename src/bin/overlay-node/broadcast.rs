//! `overlay-node broadcast`: broadcast a text or a file from a running node along its tree.

use anyhow::{Context, bail};
use overlay::admin::{AdminResponse, broadcast_request, request};
use overlay::proto::collective::MAX_INLINE_PAYLOAD;
use std::path::PathBuf;

/// Options of `broadcast`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["file", "text"])))]
pub struct BroadcastArgs {
    /// The running node's data directory.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Broadcast this file's bytes.
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Broadcast this text.
    #[arg(long, value_name = "TEXT")]
    text: Option<String>,
    /// Print one JSON object: op, delivered, missing, elapsed_ms.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: BroadcastArgs) -> anyhow::Result<()> {
    let payload = match (&args.file, args.text) {
        (Some(f), _) => std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?,
        (None, Some(t)) => t.into_bytes(),
        (None, None) => bail!("give --file or --text"),
    };
    if payload.len() > MAX_INLINE_PAYLOAD {
        bail!(
            "payload of {} bytes exceeds the limit of {MAX_INLINE_PAYLOAD} bytes",
            payload.len()
        );
    }
    let AdminResponse::Broadcast(r) = request(&args.data_dir, &broadcast_request(&payload)).await?
    else {
        bail!("unexpected answer from the node");
    };
    let elapsed_ms = r.elapsed.as_secs_f64() * 1e3;
    if args.json {
        let out = serde_json::json!({
            "op": format!("{:016x}", r.op),
            "delivered": r.delivered,
            "missing": r.missing,
            "elapsed_ms": elapsed_ms,
        });
        println!("{out}");
    } else {
        println!(
            "broadcast {:016x}: {} bytes delivered to {} members in {elapsed_ms:.1} ms",
            r.op,
            payload.len(),
            r.delivered.len()
        );
        if !r.missing.is_empty() {
            let ids: Vec<String> = r.missing.iter().map(|m| m.short()).collect();
            println!("missing: {}", ids.join(" "));
        }
    }
    Ok(())
}
