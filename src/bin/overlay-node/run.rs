//! Running a node until SIGINT or SIGTERM, then leaving gracefully.

use anyhow::{Context, bail};
use overlay::api::Node;
use overlay::net::token::JoinToken;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Options of a running node.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Address to listen on for peers (UDP, QUIC).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7400")]
    listen: SocketAddr,
    /// Join the overlay through the member at HOST:PORT (repeat to give fallbacks).
    #[arg(long, value_name = "HOST:PORT")]
    join: Vec<String>,
    /// The overlay's join token (printed by its first node).
    #[arg(
        long,
        env = "OVERLAY_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// Directory for the node's key, the token and the admin socket; a restart with the
    /// same directory keeps the node's id.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// A readable name shown to other members.
    #[arg(long)]
    name: Option<String>,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let Some(data_dir) = args.data_dir else {
        bail!("--data-dir is required to run a node (it keeps the node's key and token)");
    };
    let mut builder = Node::builder().listen(args.listen).data_dir(&data_dir);
    if let Some(name) = args.name {
        builder = builder.name(name);
    }
    if let Some(token) = args.token {
        let token: JoinToken = token.parse().context("--token")?;
        builder = builder.token(token);
    }
    for spec in &args.join {
        let addr = tokio::net::lookup_host(spec)
            .await
            .with_context(|| format!("--join {spec}: cannot resolve (expected HOST:PORT)"))?
            .next()
            .with_context(|| format!("--join {spec}: no address"))?;
        builder = builder.join(addr);
    }
    let node = builder.start().await.context("cannot start the node")?;
    println!(
        "node {} ({}) listening on {}",
        node.id().short(),
        node.id().to_hex(),
        node.local_addr()
    );
    if args.join.is_empty() {
        println!(
            "to join this overlay: overlay-node --listen ADDR --join {} --token {} --data-dir DIR",
            node.local_addr(),
            node.token()
        );
    }
    let admin = tokio::spawn(overlay::admin::serve(node.clone(), data_dir.clone()));
    wait_for_signal().await?;
    tracing::info!("signal received: leaving");
    node.leave().await;
    let _ = admin.await;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
