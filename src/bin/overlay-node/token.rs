//! `overlay-node token`: show the join token kept in a node's data directory, or rotate
//! the overlay's token through a running node.

use crate::dirs::DataDirArg;
use anyhow::{Context, bail};
use overlay::admin::{AdminRequest, AdminResponse, request};

/// Options of `token`.
#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    action: TokenAction,
}

#[derive(clap::Subcommand, Debug)]
enum TokenAction {
    /// Print the overlay's join token, to admit another node.
    Show(DataDirArg),
    /// Replace the overlay's join token by a new one and print it: every member gets it
    /// within moments and stays; from then on a node joins only with the new token.
    Rotate(DataDirArg),
}

pub async fn run(args: TokenArgs) -> anyhow::Result<()> {
    match args.action {
        TokenAction::Show(dir) => show(&dir),
        TokenAction::Rotate(dir) => {
            match request(&dir.resolve()?, &AdminRequest::RotateToken).await? {
                AdminResponse::TokenRotated { token } => {
                    println!("{token}");
                    Ok(())
                }
                AdminResponse::Error(e) => bail!("{e}"),
                other => bail!("unexpected answer: {other:?}"),
            }
        }
    }
}

fn show(dir: &DataDirArg) -> anyhow::Result<()> {
    let dir = dir.resolve()?;
    let path = dir.join(overlay::api::files::TOKEN);
    let token = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read the token {} (has a node run with this data directory?)",
            path.display()
        )
    })?;
    println!("{}", token.trim());
    Ok(())
}
