//! Running a node until SIGINT, SIGTERM or `overlay-node leave`, then leaving gracefully.

use crate::settings::{DEFAULT_LISTEN, Resolved, RunArgs, read_token_file};
use anyhow::{Context, bail};
use overlay::api::Node;
use overlay::net::token::JoinToken;
use std::net::SocketAddr;
use std::time::Duration;

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let Resolved { settings, token } = args.resolve()?;
    let data_dir = settings
        .data_dir
        .clone()
        .expect("resolve fills the data directory");
    let mut builder = Node::builder()
        .listen_default(DEFAULT_LISTEN.parse()?)
        .data_dir(&data_dir);
    if let Some(listen) = settings.listen {
        builder = builder.listen(listen);
    }
    if let Some(spec) = &settings.advertise {
        builder = builder.advertise(resolve_one("--advertise", spec).await?);
    }
    if let Some(name) = &settings.name {
        builder = builder.name(name.clone());
    }
    if let Some(secs) = settings.join_timeout {
        builder = builder.join_timeout(Duration::from_secs(secs));
    }
    let token = match (token, &settings.token_file) {
        (Some(t), _) => Some(t.parse::<JoinToken>().context("--token")?),
        (None, Some(file)) => Some(
            read_token_file(file)?
                .parse::<JoinToken>()
                .with_context(|| format!("--token-file {}", file.display()))?,
        ),
        (None, None) => None,
    };
    if let Some(token) = token {
        builder = builder.token(token);
    }
    for spec in &settings.join {
        builder = builder.join(resolve_one("--join", spec).await?);
    }
    // A new overlay is one this start creates: no join address and no token kept.
    let creates = settings.join.is_empty() && !data_dir.join(overlay::api::files::TOKEN).exists();
    let node = builder.start().await.context("cannot start the node")?;
    println!(
        "node {} ({}) listening on {}",
        node.id().short(),
        node.id().to_hex(),
        node.local_addr()
    );
    if node.advertised_addr() != node.local_addr() {
        println!("advertised to the others as {}", node.advertised_addr());
    }
    if creates {
        println!(
            "to join this overlay: overlay-node --listen ADDR --join {} --token {} --data-dir DIR",
            node.advertised_addr(),
            node.token()
        );
    }
    overlay::admin::register_json_reducers(&node)
        .await
        .context("registering the JSON reducers")?;
    let admin = tokio::spawn(overlay::admin::serve(node.clone(), data_dir.clone()));
    tokio::select! {
        signal = wait_for_signal() => {
            signal?;
            tracing::info!("signal received: leaving");
            node.leave().await;
        }
        _ = wait_stopped(&node) => tracing::info!("left the overlay"),
    }
    let _ = admin.await;
    Ok(())
}

/// Resolves HOST:PORT to one address, with an error naming the option.
async fn resolve_one(option: &str, spec: &str) -> anyhow::Result<SocketAddr> {
    let mut addrs = match tokio::net::lookup_host(spec).await {
        Ok(a) => a,
        Err(e) => bail!("{option} {spec}: cannot resolve (expected HOST:PORT): {e}"),
    };
    addrs
        .next()
        .with_context(|| format!("{option} {spec}: no address"))
}

/// Returns once the node has stopped (`overlay-node leave`).
async fn wait_stopped(node: &Node) {
    while !node.is_stopped() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
