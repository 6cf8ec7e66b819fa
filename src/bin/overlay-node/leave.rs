//! `overlay-node leave`: the running node leaves the overlay gracefully and exits.

use crate::dirs::DataDirArg;
use overlay::admin::{AdminRequest, AdminResponse, request};

/// Options of `leave`.
#[derive(clap::Args, Debug)]
pub struct LeaveArgs {
    #[command(flatten)]
    dir: DataDirArg,
}

pub async fn run(args: LeaveArgs) -> anyhow::Result<()> {
    match request(&args.dir.resolve()?, &AdminRequest::Leave).await? {
        AdminResponse::Left => {
            println!("the node is leaving the overlay");
            Ok(())
        }
        other => anyhow::bail!("unexpected answer from the node: {other:?}"),
    }
}
