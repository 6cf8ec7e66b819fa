//! A Phoenix-style self-organizing overlay: every node keeps, for every root, a latency-aware
//! spanning tree built by local rules, and collectives flow along those live trees.
//!
//! The crate root is the library an application embeds: start a [`Node`], join an overlay
//! with its [`JoinToken`], watch members and trees, and run collectives (broadcast,
//! scatter, gather, reduce, their `all` forms, barriers).
//!
//! ```no_run
//! # async fn demo() -> Result<(), overlay::NodeError> {
//! use overlay::Node;
//! let first = Node::builder().listen("127.0.0.1:0".parse().unwrap()).start().await?;
//! let second = Node::builder()
//!     .listen("127.0.0.1:0".parse().unwrap())
//!     .join(first.local_addr())
//!     .token(first.token())
//!     .start()
//!     .await?;
//! second.broadcast_value(&"hello").await?;
//! second.leave().await;
//! # Ok(()) }
//! ```
//!
//! Imports flow one way: `proto` (the sans-IO protocol) <- `net` (the QUIC driver) and
//! `sim` (the simulator) <- `api` (the library) <- the binaries. Harnesses sit behind cargo
//! features, off for `default-features = false`:
//! - `sim`: the seeded discrete-event simulator running the protocol core in
//!   virtual time, the topology loader, and the protocol core itself as a public module;
//! - `testkit`: many real nodes in one process over an emulated WAN (`local`), the
//!   network-namespace testbed's layout (`testbed`), and the transport's internals (`net`);
//! - `bench`: the benchmark harness behind `examples/bench`;
//! - `cli` (default): the `overlay-node` and `overlay-netns` binaries and their admin socket.

#[cfg(feature = "cli")]
pub mod admin;
pub mod api;
#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "testkit")]
pub mod local;
#[cfg(feature = "testkit")]
pub mod net;
#[cfg(not(feature = "testkit"))]
mod net;
#[cfg(feature = "sim")]
pub mod proto;
#[cfg(not(feature = "sim"))]
mod proto;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(feature = "testkit")]
pub mod testbed;
#[cfg(feature = "sim")]
pub mod topology;

pub use crate::api::{
    AuthError, BroadcastReport, COUNT_KEY, ClusterBandwidth, ClusterGroup, ClusterLevel,
    DEFAULT_DELIVERY_BUFFER, DecodeError, Deliveries, Delivery, DeliveryError, DialError,
    DialFailure, Forwarding, FrameError, Gathered, Group, INFO_KEY, IoStep, KindTraffic, Lagged,
    LinkCounters, MemberInfo, Node, NodeBuilder, NodeError, NodeEvent, NodeInfo, NodeStatus,
    NotReady, QuicCounters, Reduced, RendezvousOptions, Round, RoundChanges, ScatterReport, Spread,
    Transport, TreeInfo, TreeNode, TreeSnapshot, decode_reduce_outcome,
};
pub use crate::net::identity::{Identity, IdentityError};

/// What most applications need, in one import.
///
/// ```no_run
/// use overlay::prelude::*;
/// # async fn f(seed: std::net::SocketAddr, token: JoinToken) -> Result<(), NodeError> {
/// let node = Node::builder().join(seed).token(token).start().await?;
/// node.ready().await?;
/// let near: Vec<MemberInfo> = node.nearest(3).await?;
/// let sum = node.reduce("load", Reducer::Sum(NumKind::F64)).await?;
/// # Ok(()) }
/// ```
pub mod prelude {
    pub use crate::bulk::ReduceOp;
    pub use crate::{
        BroadcastReport, Deliveries, Delivery, DeliveryError, DeliveryKind, Gathered, Group,
        JoinToken, Lagged, Liveness, MemberInfo, Node, NodeBuilder, NodeError, NodeEvent, NodeId,
        NotReady, NumKind, Reduced, Reducer, RendezvousOptions, Round,
    };
}

/// Large collectives: element types, operations, algorithms, options, reports, watches
/// and tasks of [`Node::allreduce_slice`], [`Node::reduce_slice`],
/// [`Node::allgather_pieces`], [`Node::scatter_pieces`] and [`Node::gather_pieces`].
pub mod bulk {
    pub use crate::api::{
        Algorithm, BulkOptions, BulkPhase, BulkProgress, BulkReport, BulkTask, BulkWatch, Elem,
        Element, Inside, Prediction, ReduceOp, TuneEntry,
    };
}
pub use crate::net::token::{JoinToken, TokenError};
pub use crate::proto::collective::{
    BarrierOutcome, DEFAULT_TIMEOUT, MAX_INLINE_PAYLOAD, MAX_STREAM_PAYLOAD, OpRefused,
    ReduceOutcome,
};
pub use crate::proto::gossip::GossipConfig;
pub use crate::proto::{
    Config, CoreStats, DeliveryKind, DownReason, Liveness, NodeId, NumKind, OpId, Reducer,
    WireError,
};
