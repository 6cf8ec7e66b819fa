//! Running a node until SIGINT or SIGTERM, then leaving gracefully.

use crate::http;
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
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, env = "OVERLAY_METRICS", value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Serve the live web view at http://ADDR/ (with the metrics at /metrics).
    #[arg(long, env = "OVERLAY_HTTP", value_name = "ADDR")]
    http: Option<SocketAddr>,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let Some(data_dir) = args.data_dir else {
        bail!("--data-dir is required to run a node (it keeps the node's key and token)");
    };
    // Bound before the node starts: a port that cannot be had fails the start, before the
    // node joins anyone.
    let metrics = match args.metrics {
        // The same address twice is one listener serving both.
        Some(addr) if args.http != Some(addr) => Some(http::listen("--metrics", addr).await?),
        _ => None,
    };
    let web = match args.http {
        Some(addr) => Some(http::listen("--http", addr).await?),
        None => None,
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
    // Every daemon answers for its RTT row, so a web view on any member shows the matrix.
    if let Err(e) = http::publish_rtt_row(&node).await {
        tracing::debug!(error = %e, "cannot answer for the RTT row");
    }
    if metrics.is_some() || web.is_some() {
        let watch = http::Watch::start(&node);
        if let Some(listener) = metrics {
            println!("metrics on http://{}/metrics", local(&listener));
            let routes = http::Routes::new(node.clone(), watch.clone(), false);
            tokio::spawn(http::serve(listener, std::sync::Arc::new(routes)));
        }
        if let Some(listener) = web {
            println!("web view on http://{}/", local(&listener));
            let routes = http::Routes::new(node.clone(), watch, true);
            tokio::spawn(http::serve(listener, std::sync::Arc::new(routes)));
        }
    }
    let admin = tokio::spawn(overlay::admin::serve(node.clone(), data_dir.clone()));
    wait_for_signal().await?;
    tracing::info!("signal received: leaving");
    node.leave().await;
    let _ = admin.await;
    Ok(())
}

/// The address a listener got (the port chosen when 0 was asked for).
fn local(listener: &tokio::net::TcpListener) -> String {
    listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into())
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
