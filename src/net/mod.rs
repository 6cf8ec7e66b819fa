//! The network driver: real QUIC between nodes.
//!
//! - [`identity`]: TLS keys and certificates; a node's id is bound to its key.
//! - [`token`] and [`auth`]: the join token and the session-bound proof of holding it.
//! - [`frame`]: length-prefixed frames on QUIC streams, with a size limit.
//! - [`guard`]: rate-limited logs about remote parties, and peers kept out after strikes.
//! - [`link`]: accept, dial, and the reader/writer tasks of each connection.
//! - [`driver`]: the one task that owns the protocol core and gossip (the driver loop).
//! - [`emulated`]: a UDP socket that adds a topology's WAN latency on loopback.
//! - [`view`]: what the driver reports to the API (status, events, deliveries).
//! - [`meter`]: how long a send takes to leave this node, measured at the socket.
//! - [`quiet_timer`]: quinn's runtime with timers that wake tokio only when due.

// Without the `testkit` feature this module is private to the crate, and the parts only
// the harnesses and the attack tests use would be reported unused.
#![cfg_attr(not(feature = "testkit"), allow(dead_code, unused_imports))]

mod accept;
pub mod auth;
pub mod bulk;
pub mod deliveries;
pub mod driver;
#[cfg(feature = "testkit")]
pub mod emulated;
pub mod frame;
pub mod guard;
pub mod identity;
pub mod link;
pub mod links;
pub mod meter;
pub mod ops;
pub mod pace;
pub mod quiet_timer;
pub mod record_auth;
pub mod sockbuf;
pub mod stream;
pub mod stripes;
pub mod token;
pub mod token_ring;
pub mod train;
pub mod view;

/// A quinn endpoint on `socket` (real or emulated, metered or not), a server if
/// `server_config` is given, on the tokio runtime (with [`quiet_timer::QuietRuntime`]'s timers).
pub fn endpoint_on(
    socket: std::sync::Arc<dyn quinn::AsyncUdpSocket>,
    server_config: Option<quinn::ServerConfig>,
) -> std::io::Result<quinn::Endpoint> {
    quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        server_config,
        socket,
        std::sync::Arc::new(quiet_timer::QuietRuntime),
    )
}

/// Spawns `task` inside the caller's tracing span, so that what a link, stream or dial
/// task logs names the node it belongs to (several nodes may share a process).
pub(crate) fn spawn_in_span<F>(task: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    use tracing::Instrument;
    tokio::spawn(task.in_current_span())
}
