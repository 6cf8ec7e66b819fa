//! `overlay-node publish KEY VALUE`: the JSON value this node contributes when any member
//! gathers or reduces KEY.

use crate::dirs::DataDirArg;
use overlay::admin::{AdminRequest, AdminResponse, request};

/// Options of `publish`.
#[derive(clap::Args, Debug)]
pub struct PublishArgs {
    /// The key (any name other than the built-in `info` and `count`).
    key: String,
    /// The value, as JSON: `3.5`, `[1, 2, 3]`, `"text"`, `{"load": 0.3}`.
    value: String,
    #[command(flatten)]
    dir: DataDirArg,
}

pub async fn run(args: PublishArgs) -> anyhow::Result<()> {
    if let Err(e) = serde_json::from_str::<serde_json::Value>(&args.value) {
        anyhow::bail!(
            "the value {:?} is not JSON ({e}); quote text as '\"text\"'",
            args.value
        );
    }
    let req = AdminRequest::Publish {
        key: args.key.clone(),
        json: args.value,
    };
    match request(&args.dir.resolve()?, &req).await? {
        AdminResponse::Published => {
            println!("published under {:?}", args.key);
            Ok(())
        }
        other => anyhow::bail!("unexpected answer from the node: {other:?}"),
    }
}
