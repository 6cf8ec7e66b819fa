//! `overlay-node health`: exit 0 when the running node answers and is part of a working
//! overlay, 1 otherwise (for systemd and container probes).

use crate::dirs::DataDirArg;
use overlay::admin::{AdminRequest, AdminResponse, request};
use overlay::api::NodeStatus;
use overlay::proto::Liveness;
use std::time::Duration;

/// Options of `health`.
#[derive(clap::Args, Debug)]
pub struct HealthArgs {
    #[command(flatten)]
    dir: DataDirArg,
    /// Seconds to wait for the node's answer.
    #[arg(long, default_value_t = 5)]
    timeout: u64,
}

/// Healthy: the node answers and, if it knows other members, one of them is alive.
/// Returns a one-line summary, or why it is not healthy.
pub fn verdict(s: &NodeStatus) -> Result<String, String> {
    let others = s.members.iter().filter(|m| m.id != s.id);
    let (known, alive) = others.fold((0, 0), |(k, a), m| {
        let counted = !matches!(m.state, Liveness::Left);
        let up = matches!(m.state, Liveness::Alive);
        (k + counted as usize, a + up as usize)
    });
    if known > 0 && alive == 0 {
        return Err(format!("none of the {known} other members is alive"));
    }
    // Trees without a path heal by themselves (a newcomer has none for a moment): shown,
    // not failed, so a probe does not restart a node that is only settling.
    let cut_off = s.trees.iter().filter(|t| !t.connected).count();
    let settling = if cut_off > 0 {
        format!(" ({cut_off} without a path to their root yet)")
    } else {
        String::new()
    };
    Ok(format!(
        "{alive} of {known} other members alive, {} trees{settling}",
        s.trees.len()
    ))
}

pub async fn run(args: HealthArgs) -> anyhow::Result<()> {
    let dir = args.dir.resolve()?;
    let answer = tokio::time::timeout(
        Duration::from_secs(args.timeout),
        request(&dir, &AdminRequest::Status),
    )
    .await;
    let status = match answer {
        Err(_) => anyhow::bail!(
            "unhealthy: the node did not answer within {} s",
            args.timeout
        ),
        Ok(Err(e)) => anyhow::bail!("unhealthy: {e}"),
        Ok(Ok(AdminResponse::Status(s))) => s,
        Ok(Ok(other)) => anyhow::bail!("unhealthy: unexpected answer {other:?}"),
    };
    match verdict(&status) {
        Ok(summary) => {
            println!("healthy: {summary}");
            Ok(())
        }
        Err(reason) => anyhow::bail!("unhealthy: {reason}"),
    }
}
