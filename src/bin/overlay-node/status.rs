//! `overlay-node status`: members and trees of a running node, via its admin socket.

use anyhow::bail;
use overlay::admin::{AdminRequest, AdminResponse, request};
use std::path::PathBuf;

/// Options of `status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// The running node's data directory.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let AdminResponse::Status(s) = request(&args.data_dir, &AdminRequest::Status).await? else {
        bail!("unexpected answer from the node");
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    let name_of = |id: overlay::proto::NodeId| {
        s.members
            .iter()
            .find(|m| m.id == id)
            .map(|m| m.name.clone())
            .unwrap_or_else(|| id.short())
    };
    println!(
        "node {} ({}) on {}, up {:.1} s",
        s.id.short(),
        s.name,
        s.addr,
        s.uptime_ms as f64 / 1e3
    );
    println!("\nmembers ({}):", s.members.len());
    println!(
        "  {:<10} {:<16} {:<22} {:<8} {:>9}",
        "id", "name", "address", "state", "rtt ms"
    );
    for m in &s.members {
        let rtt = m
            .rtt_ms
            .map(|r| format!("{r:.2}"))
            .unwrap_or_else(|| "-".into());
        let state = format!("{:?}", m.state).to_lowercase();
        println!(
            "  {:<10} {:<16} {:<22} {:<8} {:>9}",
            m.id.short(),
            m.name,
            m.addr,
            state,
            rtt
        );
    }
    println!("\ntrees ({}):", s.trees.len());
    println!(
        "  {:<16} {:<16} {:>9} {:>7}  children",
        "root", "parent", "dist ms", "serial"
    );
    for t in &s.trees {
        let parent = match (t.root == s.id, t.parent) {
            (true, _) => "(root)".to_string(),
            (false, Some(p)) => name_of(p),
            (false, None) => "(none)".to_string(),
        };
        let children: Vec<String> = t.children.iter().map(|c| name_of(*c)).collect();
        let dist = if t.connected {
            format!("{:.2}", t.dist_ms)
        } else {
            "-".into()
        };
        println!(
            "  {:<16} {:<16} {:>9} {:>7}  {}",
            name_of(t.root),
            parent,
            dist,
            t.serial,
            children.join(" ")
        );
    }
    println!(
        "\nconnections {}, frames in/out {}/{}, rejected frames {}, protocol errors {}, auth failures {}, dropped {}",
        s.connections,
        s.frames_in,
        s.frames_out,
        s.frames_rejected,
        s.protocol_errors,
        s.auth_failures,
        s.packets_dropped
    );
    Ok(())
}
