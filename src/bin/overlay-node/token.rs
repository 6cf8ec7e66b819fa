//! `overlay-node token show`: the join token kept in a node's data directory.

use crate::dirs::DataDirArg;
use anyhow::Context;

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
}

pub fn run(args: TokenArgs) -> anyhow::Result<()> {
    let TokenAction::Show(dir) = args.action;
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
