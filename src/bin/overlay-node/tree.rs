//! `overlay-node tree ROOT`: one root's tree, assembled by the running node from every
//! member's answer.

use anyhow::bail;
use overlay::admin::{AdminRequest, AdminResponse, render_dot, render_text, request};

/// Output formats of `tree`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Format {
    /// Indented text.
    Text,
    /// Graphviz DOT.
    Dot,
}

/// Options of `tree`.
#[derive(clap::Args, Debug)]
pub struct TreeArgs {
    /// The root: a member's name, or its id (short or full, a unique prefix is enough).
    root: String,
    #[command(flatten)]
    dir: crate::dirs::DataDirArg,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
}

pub async fn run(args: TreeArgs) -> anyhow::Result<()> {
    let req = AdminRequest::Tree { root: args.root };
    let AdminResponse::Tree(tree) = request(&args.dir.resolve()?, &req).await? else {
        bail!("unexpected answer from the node");
    };
    match args.format {
        Format::Text => print!("{}", render_text(&tree)),
        Format::Dot => print!("{}", render_dot(&tree)),
    }
    Ok(())
}
