//! Networking for the real (QUIC) driver.
//!
//! - [`emulated`]: a loopback UDP socket for quinn that adds the one-way latency of a
//!   topology file to every datagram, so real QUIC runs over an emulated WAN in one process.

pub mod emulated;
