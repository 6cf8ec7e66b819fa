//! `overlay-node members`: the members a running node knows, with their state and RTT.

use crate::dirs::DataDirArg;
use crate::json::tidy;
use overlay::admin::{AdminRequest, AdminResponse, request};

/// Options of `members`.
#[derive(clap::Args, Debug)]
pub struct MembersArgs {
    #[command(flatten)]
    dir: DataDirArg,
    /// Print JSON (an array, one object per member).
    #[arg(long)]
    json: bool,
    /// Only the members alive now.
    #[arg(long)]
    alive: bool,
}

pub async fn run(args: MembersArgs) -> anyhow::Result<()> {
    let AdminResponse::Status(s) = request(&args.dir.resolve()?, &AdminRequest::Status).await?
    else {
        anyhow::bail!("unexpected answer from the node");
    };
    let members: Vec<_> = s
        .members
        .iter()
        .filter(|m| !args.alive || m.state == overlay::proto::Liveness::Alive)
        .collect();
    if args.json {
        println!("{}", tidy(serde_json::to_value(&members)?));
        return Ok(());
    }
    println!(
        "{:<10} {:<16} {:<40} {:<8} {:>9}",
        "id", "name", "address", "state", "rtt ms"
    );
    for m in members {
        let rtt = m.rtt_ms.map(|r| format!("{r:.2}")).unwrap_or("-".into());
        let me = if m.id == s.id { " (this node)" } else { "" };
        println!(
            "{:<10} {:<16} {:<40} {:<8} {:>9}{me}",
            m.id.short(),
            m.name,
            m.addr.to_string(),
            format!("{:?}", m.state).to_lowercase(),
            rtt
        );
    }
    Ok(())
}
