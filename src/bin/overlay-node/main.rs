//! `overlay-node`: run a node of the overlay, inspect or drive a running one, or run the
//! demo. Thin over the library: argument parsing here, everything else in `overlay`.

mod broadcast;
mod demo;
mod dirs;
mod gather;
mod health;
mod http;
mod json;
mod leave;
mod listen;
mod logging;
mod members;
mod publish;
mod reduce;
mod run;
mod settings;
mod status;
mod token;
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
    run: settings::RunArgs,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Show a running node's members and its place in every tree.
    Status(status::StatusArgs),
    /// List the members a running node knows.
    Members(members::MembersArgs),
    /// Exit 0 if the running node answers and is part of a working overlay, else 1.
    Health(health::HealthArgs),
    /// Draw one root's tree as the running node sees it.
    Tree(tree::TreeArgs),
    /// Broadcast a text or a file from a running node to every member.
    Broadcast(broadcast::BroadcastArgs),
    /// Print every delivery to a running node as it arrives.
    Listen(listen::ListenArgs),
    /// Set the JSON value this node contributes to gathers and reduces of a key.
    Publish(publish::PublishArgs),
    /// Gather every member's value under a key (or `info`) through a running node.
    Gather(gather::GatherArgs),
    /// Combine every member's value under a key (sum, min, max; or `count`).
    Reduce(reduce::ReduceArgs),
    /// Make a running node leave the overlay gracefully (it then exits).
    Leave(leave::LeaveArgs),
    /// The overlay's join token: show it, or rotate it.
    Token(token::TokenArgs),
    /// The effective settings of a node.
    Config(Box<settings::ConfigArgs>),
    /// Run an in-process overlay over an emulated WAN and report when its trees converge.
    Demo(demo::DemoArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // A node runs on as many threads as its settings say; the commands and the demo (many
    // nodes in one process) on the default multi-threaded runtime.
    let (format, threads) = match &cli.command {
        None => match cli.run.resolve() {
            Ok(r) => (
                r.settings.log_format.unwrap_or_default(),
                Some(r.settings.threads.unwrap_or(settings::DEFAULT_THREADS)),
            ),
            Err(e) => return fail(&e),
        },
        Some(_) => (settings::LogFormat::Text, None),
    };
    if cli.command.is_some() {
        // A command's output piped into `head` ends it quietly, as for any Unix tool,
        // instead of a panic on the broken pipe. Not the node itself: it outlives its
        // terminal.
        // SAFETY: restoring a signal's default disposition, before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    // The demo runs many nodes in one process: their routine lines would bury its result.
    let quiet = matches!(cli.command, Some(Cmd::Demo(_)));
    logging::init(format, if quiet { "warn" } else { "info" });
    let runtime = match threads {
        // One thread: every task on this one, so a packet wakes no other thread.
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::from(n))
            .enable_all()
            .build(),
        None => tokio::runtime::Runtime::new(),
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => return fail(&anyhow::Error::new(e).context("cannot start the runtime")),
    };
    let result = runtime.block_on(async {
        match cli.command {
            None => run::run(cli.run).await,
            Some(Cmd::Status(args)) => status::run(args).await,
            Some(Cmd::Members(args)) => members::run(args).await,
            Some(Cmd::Health(args)) => health::run(args).await,
            Some(Cmd::Tree(args)) => tree::run(args).await,
            Some(Cmd::Demo(args)) => demo::run(args).await,
            Some(Cmd::Broadcast(args)) => broadcast::run(args).await,
            Some(Cmd::Listen(args)) => listen::run(args).await,
            Some(Cmd::Publish(args)) => publish::run(args).await,
            Some(Cmd::Gather(args)) => gather::run(args).await,
            Some(Cmd::Reduce(args)) => reduce::run(args).await,
            Some(Cmd::Leave(args)) => leave::run(args).await,
            Some(Cmd::Token(args)) => token::run(args).await,
            Some(Cmd::Config(args)) => settings::run(*args),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Prints `error: ...` with each cause once: errors that print their source in their own
/// message would otherwise repeat the operating system's text.
fn fail(e: &anyhow::Error) -> std::process::ExitCode {
    let mut message = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
    }
    eprintln!("error: {message}");
    std::process::ExitCode::FAILURE
}
