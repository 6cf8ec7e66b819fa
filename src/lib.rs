//! A Phoenix-style self-organizing overlay: every node keeps, for every root, a latency-aware
//! spanning tree built by local rules, and collectives flow along those live trees.
//!
//! - [`proto`]: the sans-IO protocol core (tree rules, membership, RTT, wire format).
//! - [`topology`]: loader for the latency matrices in `topologies/`.
//! - [`sim`]: a seeded discrete-event simulator that runs one core per node in virtual time.
//! - [`net`]: the QUIC driver (identity, join token, framing, connections, driver loop).
//! - [`api`]: [`api::Node`] and its builder: what applications and the binary use.
//! - [`admin`]: the local admin socket behind `overlay-node status` and `tree`.
//! - [`local`]: many real nodes in one process over an emulated WAN (demo, tests).
//! - [`testbed`]: the network-namespace testbed's layout and checks (`netns-scripts/`).

pub mod admin;
pub mod api;
pub mod bench;
pub mod local;
pub mod net;
pub mod proto;
pub mod sim;
pub mod testbed;
pub mod topology;
