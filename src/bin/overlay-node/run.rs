//! Running a node until SIGINT, SIGTERM or `overlay-node leave`, then leaving gracefully.

use crate::http;
use crate::settings::{DEFAULT_LISTEN, Resolved, RunArgs, read_token_file};
use anyhow::{Context, bail};
use overlay::api::Node;
use overlay::net::token::JoinToken;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// "Keep trying": a century, which an `Instant` can still hold.
const JOIN_FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let Resolved { settings, token } = args.resolve()?;
    let data_dir = settings
        .data_dir
        .clone()
        .expect("resolve fills the data directory");
    // Bound before the node starts: a port that cannot be had fails the start, before the
    // node joins anyone.
    let metrics = match settings.metrics {
        // The same address twice is one listener serving both.
        Some(addr) if settings.http != Some(addr) => Some(http::listen("--metrics", addr).await?),
        _ => None,
    };
    let web = match settings.http {
        Some(addr) => Some(http::listen("--http", addr).await?),
        None => None,
    };
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
    if settings.shared_trees_from.is_some() || settings.sweep_limit.is_some() {
        builder = builder.config(overlay::Config {
            shared_trees_from: settings.shared_trees_from.map(|n| n as usize),
            sweep_limit: settings.sweep_limit.map(|n| n as usize),
            ..overlay::Config::wan()
        });
    }
    // A daemon never exits because joining is slow (a seed busy with a join storm, a
    // network still coming up): without --join-timeout it keeps trying.
    let join_timeout = settings
        .join_timeout
        .map_or(JOIN_FOREVER, Duration::from_secs);
    builder = builder.join_timeout(join_timeout);
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
    // While it joins (seeds slow or not up yet: by default it waits forever), the admin
    // socket says so instead of "no running node answers".
    let joining: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>> = Arc::default();
    let builder = {
        let (joining, dir) = (joining.clone(), data_dir.clone());
        builder.on_joining(move |addrs| {
            let through = addrs
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let task = tokio::spawn(async move {
                if let Err(e) = overlay::admin::serve_while_joining(dir, through).await {
                    tracing::warn!(error = %e, "no admin socket while joining");
                }
            });
            *joining.lock().expect("joining lock") = Some(task);
        })
    };
    let started = builder.start().await;
    let placeholder = joining.lock().expect("joining lock").take();
    if let Some(task) = placeholder {
        task.abort();
        let _ = task.await;
    }
    let node = started.context("cannot start the node")?;
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
        // The token goes in the environment, where other users' `ps` does not show it.
        println!("to join this overlay: {}", node.join_command());
    }
    overlay::admin::register_json_reducers(&node)
        .await
        .context("registering the JSON reducers")?;
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
    tokio::select! {
        signal = wait_for_signal() => {
            signal?;
            tracing::info!("signal received: leaving");
            node.leave().await;
        }
        () = node.stopped() => tracing::info!("left the overlay"),
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
