//! `overlay-netns`: the Rust side of the network-namespace testbed in `netns-scripts/`.
//!
//! - `plan`: validates a topology (with the project's loader) and prints the layout the
//!   scripts build: clusters, subnets, nodes, and the latency and bandwidth of every link.
//! - `wan`: the userspace WAN emulator for kernels without `sch_netem`; it runs in the router
//!   namespace, reads every packet routed between clusters from a TUN device, holds it for
//!   the one-way latency between its source and destination clusters and writes it back
//!   (or drops it, with the loss `netns-scripts/loss` set for that pair).
//! - `status`: asks every node of a running testbed for its status and judges the trees,
//!   the membership and the measured RTTs against the topology.
//! - `large`: a large broadcast from one cluster, its throughput as a share of the
//!   topology's max-flow bound, and the bandwidth matrix the sending node measured.

mod large;
mod loss;
mod plan;
mod status;
mod wan;

use clap::{Parser, Subcommand};

/// Helper of the network-namespace testbed (`netns-scripts/`).
#[derive(Parser, Debug)]
#[command(name = "overlay-netns", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Print the testbed layout of a topology (what `up` builds).
    Plan(plan::PlanArgs),
    /// Run the userspace WAN emulator on a TUN device (in the router namespace).
    Wan(wan::WanArgs),
    /// Show a running testbed: every node's membership and trees, and RTTs against the topology.
    Status(status::StatusArgs),
    /// Broadcast a large payload from one cluster and print its share of the max-flow bound.
    Large(large::LargeArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Plan(args) => plan::run(args),
        Cmd::Wan(args) => wan::run(args),
        Cmd::Status(args) => status::run(args),
        Cmd::Large(args) => large::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
