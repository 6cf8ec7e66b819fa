//! A Phoenix-style self-organizing overlay: every node keeps, for every root, a latency-aware
//! spanning tree built by local rules, and collectives flow along those live trees.
//!
//! - [`proto`]: the sans-IO protocol core (tree rules, membership, RTT, wire format).
//! - [`topology`]: loader for the latency matrices in `topologies/`.
//! - [`sim`]: a seeded discrete-event simulator that runs one core per node in virtual time.
//! - [`net`]: networking for the QUIC driver, including a latency-emulating UDP socket.

pub mod net;
pub mod proto;
pub mod sim;
pub mod topology;
