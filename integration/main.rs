//! The integration tests: one test binary, one module per file of this directory.
//!
//! Simulator tests (`sim_*`) run the protocol core in virtual time; `quic_*` and `security`
//! run real nodes over QUIC on loopback; `process_overlay`, `cli` and `http_view` (its
//! metrics and web view, the latter in a headless Chromium) run the `overlay-node` binary;
//! `netns` runs the testbed in network namespaces (root only, else it skips and says why);
//! `layers` checks that imports flow one way.

// Real-network tests hold `common::real_network()`, a plain mutex, across their awaits on
// purpose: each test has its own runtime, and blocking the next one's thread is the point.
#![allow(clippy::await_holding_lock)]

mod cli;
mod common;
mod daemon;
mod elastic_examples;
mod fuzz_inputs;
mod http_view;
mod layers;
mod netns;
mod process_overlay;
mod quic_allreduce;
mod quic_backpressure;
mod quic_bandwidth;
mod quic_bulk_watch;
mod quic_collectives;
mod quic_field_station;
mod quic_groups;
mod quic_overlay;
mod quic_ready;
mod quic_relay;
mod quic_replan;
mod quic_scatter_gather;
mod readme;
mod security;
mod sim_churn;
mod sim_clusters;
mod sim_collectives;
mod sim_heal;
mod sim_large_collectives;
mod sim_membership;
mod sim_quiet;
mod sim_topologies;
mod stripe_plan;

/// Every file of this directory is a module above: a file added without its `mod` line
/// would silently never run.
#[test]
fn every_file_is_a_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("integration");
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("read main.rs");
    for entry in std::fs::read_dir(&dir).expect("read integration/") {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let is_module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
        // A directory with a manifest is a crate of its own (the cargo-fuzz crate).
        let is_crate = path.join("Cargo.toml").exists();
        if !is_module || is_crate || name == "main" {
            continue;
        }
        assert!(
            main.contains(&format!("\nmod {name};")),
            "integration/{name} is not declared in integration/main.rs"
        );
    }
}
