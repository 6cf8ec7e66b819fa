//! `overlay-node`: run a node of the overlay, inspect a running one, or run the demo.
//! Thin over the library: argument parsing here, everything else in `overlay`.

mod broadcast;
mod demo;
mod gather;
mod http;
mod reduce;
mod run;
mod status;
mod tree;

use clap::{Parser, Subcommand};

/// A self-organizing overlay node: latency-aware spanning trees over QUIC.
///
/// Without a subcommand, runs a node. The first node of an overlay starts without --join
/// and prints the command that joins it; the others join through any member.
#[derive(Parser, Debug)]
#[command(name = "overlay-node", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    run: run::RunArgs,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Show a running node's members and its place in every tree.
    Status(status::StatusArgs),
    /// Draw one root's tree as the running node sees it.
    Tree(tree::TreeArgs),
    /// Broadcast a text or a file from a running node to every member.
    Broadcast(broadcast::BroadcastArgs),
    /// Gather something from every member through a running node.
    Gather(gather::GatherArgs),
    /// Reduce over every member through a running node.
    Reduce(reduce::ReduceArgs),
    /// Run an in-process overlay over an emulated WAN and report when its trees converge.
    Demo(demo::DemoArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,quinn=warn,rustls=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            None => run::run(cli.run).await,
            Some(Cmd::Status(args)) => status::run(args).await,
            Some(Cmd::Tree(args)) => tree::run(args).await,
            Some(Cmd::Demo(args)) => demo::run(args).await,
            Some(Cmd::Broadcast(args)) => broadcast::run(args).await,
            Some(Cmd::Gather(args)) => gather::run(args).await,
            Some(Cmd::Reduce(args)) => reduce::run(args).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
