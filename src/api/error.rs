//! The errors of the library API: each says which step failed and carries its cause.

use crate::net::identity::IdentityError;
use crate::net::link::DialError;
use crate::net::token::TokenError;
use crate::net::view::DecodeError;
use crate::proto::collective::OpRefused;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Why a node could not start or answer.
///
/// ```
/// # use overlay::NodeError;
/// fn explain(e: &NodeError) -> &'static str {
///     match e {
///         NodeError::TokenRejected { .. } => "ask the operator for this overlay's token",
///         NodeError::Stopped => "the node has left",
///         _ => "see the message",
///     }
/// }
/// # let _ = explain(&NodeError::Stopped);
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// Key or TLS set-up failed.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// A stored or given token is malformed.
    #[error("join token: {0}")]
    Token(#[from] TokenError),
    /// Joining needs the overlay's token.
    #[error("joining needs the overlay's join token (--token or OVERLAY_TOKEN)")]
    MissingToken,
    /// Binding the socket, or reading or writing the data directory, failed.
    #[error("{what}: {source}")]
    Io {
        /// The step that failed.
        what: IoStep,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A join attempt failed: the address did not answer or the connection broke.
    #[error("could not join the overlay: {0}")]
    Join(#[source] DialError),
    /// The member at `addr` was reached but did not answer the join in time.
    #[error("could not join the overlay: {addr} did not answer the join within {waited:?}")]
    JoinTimeout {
        /// The address joined through.
        addr: SocketAddr,
        /// How long the node waited.
        waited: Duration,
    },
    /// Nothing listens on the join address: the host answered that the port is closed.
    #[error("could not join the overlay: nothing listens on {addr} (the port is closed)")]
    JoinRefused {
        /// The address tried.
        addr: SocketAddr,
    },
    /// Every join address is this node's own: there is nobody to join through.
    #[error("could not join the overlay: no join address other than this node's own")]
    NoJoinAddress,
    /// A member refused this node's join-token proof: the token is not this overlay's.
    #[error(
        "could not join the overlay through {addr}: it refused the join token (not this overlay's token)"
    )]
    TokenRejected {
        /// The address that refused.
        addr: SocketAddr,
    },
    /// Another process runs a node on this data directory.
    #[error(
        "the data directory {} is in use by another node{}",
        dir.display(),
        pid.map(|p| format!(" (process {p})")).unwrap_or_default()
    )]
    DataDirInUse {
        /// The data directory.
        dir: std::path::PathBuf,
        /// The process holding its lock, as it wrote it.
        pid: Option<u32>,
    },
    /// The node listens on an unspecified address (`0.0.0.0` or `[::]`) and has no address
    /// to tell the others: give one with `advertise`.
    #[error(
        "listening on {listen} needs an address to advertise to the other members (--advertise HOST:PORT); it cannot be picked without a join address to route to"
    )]
    NeedAdvertise {
        /// The unspecified listen address.
        listen: SocketAddr,
    },
    /// The advertised address is not one others can reach.
    #[error("cannot advertise {addr}: {reason}")]
    BadAdvertise {
        /// The address given.
        addr: SocketAddr,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The node was not ready within the time given to
    /// [`Node::ready_within`](super::Node::ready_within).
    #[error("the node was not ready after {waited:?}: {reason}")]
    NotReady {
        /// How long it waited.
        waited: Duration,
        /// What was still missing.
        reason: super::NotReady,
    },
    /// The node has stopped.
    #[error("the node has stopped")]
    Stopped,
    /// A payload is larger than a collective operation carries.
    #[error("payload of {len} bytes exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The payload's length.
        len: usize,
        /// The largest length accepted.
        limit: usize,
    },
    /// The node refused to start a collective operation.
    #[error("collective operation refused: {0}")]
    Collective(#[from] OpRefused),
    /// Hashing a streamed payload failed (the hashing task panicked).
    #[error("hashing the payload failed: {0}")]
    Digest(#[source] tokio::task::JoinError),
    /// A value could not be decoded.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A large collective ([`crate::Node::allreduce_slice`]) could not complete.
    #[error("large collective {name:?}: {reason}")]
    Bulk {
        /// The operation's name.
        name: String,
        /// What went wrong.
        reason: String,
    },
    /// A value could not be encoded.
    #[error("cannot encode the value: {0}")]
    Encode(#[source] postcard::Error),
    /// A group operation could not be done ([`crate::api::Group`]).
    #[error("group {group:?}: {reason}")]
    Group {
        /// The group's name.
        group: String,
        /// What went wrong.
        reason: String,
    },
    /// A rendezvous round is over: a member of it left or died, or it was never formed
    /// ([`crate::api::Round`]). Start the step again from a new round.
    #[error("round {epoch} of group {group:?} is broken: {reason}")]
    RoundBroken {
        /// The group's name.
        group: String,
        /// The round's epoch.
        epoch: u64,
        /// What happened.
        reason: String,
    },
}

/// The I/O step of [`NodeError::Io`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IoStep {
    /// Creating the data directory.
    #[error("cannot create the data directory {}", .0.display())]
    CreateDataDir(PathBuf),
    /// Binding the UDP socket.
    #[error("cannot listen on {0}")]
    Listen(SocketAddr),
    /// Reading the bound socket's address.
    #[error("cannot read the socket's local address")]
    LocalAddr,
    /// Reading the stored join token.
    #[error("cannot read the join token {}", .0.display())]
    ReadToken(PathBuf),
    /// Writing the join token.
    #[error("cannot write the join token {}", .0.display())]
    WriteToken(PathBuf),
    /// Opening or locking the data directory's lock file.
    #[error("cannot lock the data directory ({})", .0.display())]
    Lock(PathBuf),
    /// Reading the settings of the last start.
    #[error("cannot read the stored settings {}", .0.display())]
    ReadSettings(PathBuf),
    /// Writing the settings of this start.
    #[error("cannot write the settings {}", .0.display())]
    WriteSettings(PathBuf),
}
