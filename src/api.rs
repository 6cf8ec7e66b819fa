//! The library API: start a node, join an overlay, look at members and trees, leave.
//!
//! ```no_run
//! # async fn demo() -> Result<(), overlay::api::NodeError> {
//! use overlay::api::Node;
//! let first = Node::builder().listen("127.0.0.1:0".parse().unwrap()).start().await?;
//! let second = Node::builder()
//!     .listen("127.0.0.1:0".parse().unwrap())
//!     .join(first.local_addr())
//!     .token(first.token())
//!     .start()
//!     .await?;
//! println!("{:?}", second.members().await?);
//! second.leave().await;
//! # Ok(()) }
//! ```

mod builder;
mod collective;
mod data_dir;
mod deliveries;
mod error;
mod group;
mod join;
mod large;
mod locality;
mod op_stats;
mod reports;

#[cfg(feature = "bench")]
pub(crate) use self::builder::transport_config;
pub use self::builder::{NodeBuilder, Transport};
pub use self::data_dir::{StoredSettings, files, stored_settings};

pub use self::collective::{COUNT_KEY, INFO_KEY};
pub use self::deliveries::{DEFAULT_DELIVERY_BUFFER, Deliveries, DeliveryError, Lagged};
pub use self::error::{IoStep, NodeError};
pub use self::group::{Group, RendezvousOptions, Round, RoundChanges};
pub use self::large::{
    Algorithm, BulkOptions, BulkPhase, BulkProgress, BulkReport, BulkTask, BulkWatch, Elem,
    Element, Inside, Prediction, ReduceOp, TuneEntry,
};
pub use self::locality::{NotReady, readiness};
pub use self::op_stats::{CollectiveStats, LATENCY_BUCKETS_S};
pub use self::reports::{
    BroadcastReport, Gathered, NodeInfo, Reduced, ScatterReport, decode_reduce_outcome,
};
pub use crate::net::auth::AuthError;
pub use crate::net::frame::FrameError;
pub use crate::net::link::{DialError, DialFailure};
pub use crate::net::view::{
    BroadcastPlan, ClusterBandwidth, ClusterGroup, ClusterLevel, DecodeError, Delivery,
    KindTraffic, LinkCounters, MemberInfo, NodeEvent, NodeStatus, QuicCounters, TreeInfo, TreeNode,
    TreeSnapshot,
};

use crate::net::driver::ApiCommand;
pub use crate::net::stream::Forwarding;
pub use crate::net::stripes::Spread;
use crate::net::token::JoinToken;
use crate::net::token_ring::TokenRing;
use crate::net::view::MemberView;
use crate::proto::NodeId;
use futures::Stream;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};

/// The events of a subscription, with [`NodeEvent::Lagged`] where the channel overflowed.
fn events_of(rx: broadcast::Receiver<NodeEvent>) -> impl Stream<Item = NodeEvent> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(e) => Some((e, rx)),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                Some((NodeEvent::Lagged { missed }, rx))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

/// A handle to a running node; cheap to clone.
#[derive(Clone)]
pub struct Node {
    id: NodeId,
    addr: SocketAddr,
    advertised: SocketAddr,
    /// The join token, rotated while the node runs (see [`Node::rotate_token`]).
    ring: Arc<TokenRing>,
    commands: mpsc::Sender<ApiCommand>,
    events: broadcast::Sender<NodeEvent>,
    /// The members as the driver last wrote them (read without asking the driver).
    members: MemberView,
    task: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
    /// Deadline of the collective operations this handle starts.
    op_timeout: Duration,
    /// Bound on the unread payload bytes of each `deliveries()` stream.
    delivery_buffer: usize,
    /// The `deliveries()` streams, shared with the driver.
    subscribers: crate::net::deliveries::Subscribers,
    /// Large collectives: the mailbox, connections, call numbers, the decision table.
    bulk: Arc<large::Shared>,
    /// Counts and latencies of the collectives started here.
    op_stats: Arc<op_stats::Recorder>,
    /// The groups this node is a member of ([`Group::join`]).
    groups: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    /// The rendezvous of each group this node took part in.
    rendezvous: Arc<group::Rendezvous>,
}

impl Node {
    /// A builder with defaults.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The address the node listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the other members reach this node at (the listen address unless
    /// [`NodeBuilder::advertise`] or an unspecified listen address says otherwise); give
    /// this one to nodes that join through this node.
    pub fn advertised_addr(&self) -> SocketAddr {
        self.advertised
    }

    /// The overlay's join token as this node holds it now (a rotation anywhere in the
    /// overlay reaches every member within moments).
    pub fn token(&self) -> JoinToken {
        self.ring.current().0
    }

    /// Replaces the overlay's join token by a new random one and returns it. The new
    /// token spreads to every member over their admitted connections (and is stored in
    /// each member's data directory); from then on a node joins only with the new one.
    /// Members stay: one that missed the change (not connected while it spread, or
    /// restarting after a crash) still proves the old token, is let in because it is a
    /// member (one that left is not), and is given the new token at once. Tokens are compared by a wall-clock generation, so of two
    /// rotations the later wins everywhere.
    ///
    /// ```no_run
    /// # async fn f(node: overlay::Node) {
    /// let fresh = node.rotate_token();
    /// println!("new joins need OVERLAY_TOKEN={fresh}");
    /// # }
    /// ```
    pub fn rotate_token(&self) -> JoinToken {
        let (token, generation) = self.ring.rotate();
        tracing::info!(generation, "rotated the overlay's join token");
        token
    }

    /// The command another machine runs to join this overlay through this node. The
    /// token goes in the environment, where other users' `ps` does not show it.
    pub fn join_command(&self) -> String {
        format!(
            "OVERLAY_TOKEN={} overlay-node --listen ADDR --join {} --data-dir DIR",
            self.token(),
            self.advertised
        )
    }

    /// Joins through the member at `addr`; returns its id.
    pub async fn join(&self, addr: SocketAddr) -> Result<NodeId, NodeError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(ApiCommand::Join(addr, tx))
            .await
            .map_err(|_| NodeError::Stopped)?;
        let waited = Duration::from_secs(10);
        match tokio::time::timeout(waited, rx).await {
            Ok(Ok(Ok(id))) => Ok(id),
            Ok(Ok(Err(e))) if e.token_rejected() => Err(NodeError::TokenRejected { addr }),
            Ok(Ok(Err(e))) => Err(NodeError::Join(e)),
            Ok(Err(_)) => Err(NodeError::Stopped),
            Err(_) => Err(NodeError::JoinTimeout { addr, waited }),
        }
    }

    /// A snapshot of members, trees and counters.
    pub async fn status(&self) -> Result<NodeStatus, NodeError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(ApiCommand::Status(tx))
            .await
            .map_err(|_| NodeError::Stopped)?;
        let mut status = rx.await.map_err(|_| NodeError::Stopped)?;
        status.collectives = self.collective_table();
        Ok(status)
    }

    /// Every member known (this node included), sorted by id. Read from a view the node
    /// keeps current on every membership change; RTTs are at most a second old.
    pub async fn members(&self) -> Result<Vec<MemberInfo>, NodeError> {
        if self.is_stopped() {
            return Err(NodeError::Stopped);
        }
        Ok(self.members.snapshot())
    }

    /// This node's state in `root`'s tree.
    pub async fn tree(&self, root: NodeId) -> Result<Option<TreeInfo>, NodeError> {
        Ok(self
            .status()
            .await?
            .trees
            .into_iter()
            .find(|t| t.root == root))
    }

    /// The whole tree of `root`: asks every live member for its parent (waits up to 2 s).
    pub async fn tree_snapshot(&self, root: NodeId) -> Result<TreeSnapshot, NodeError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(ApiCommand::Tree(root, tx))
            .await
            .map_err(|_| NodeError::Stopped)?;
        rx.await.map_err(|_| NodeError::Stopped)
    }

    /// How this node passes large broadcasts on to its children from now on (transfers
    /// already running keep theirs).
    pub async fn set_forwarding(&self, forwarding: Forwarding) -> Result<(), NodeError> {
        self.commands
            .send(ApiCommand::SetForwarding(forwarding))
            .await
            .map_err(|_| NodeError::Stopped)
    }

    /// How the large broadcasts this node starts spread from now on (see [`Spread`]; the
    /// default plans from the measured bandwidths).
    pub async fn set_spread(&self, spread: Spread) -> Result<(), NodeError> {
        self.commands
            .send(ApiCommand::SetSpread(spread))
            .await
            .map_err(|_| NodeError::Stopped)
    }

    /// How a broadcast of `bytes` from this node would spread now (with its [`Spread`]):
    /// the trees packed over the measured cluster bandwidths and their rates, the
    /// predictions and the bound; `None` until every cluster pair is measured, or with
    /// [`Spread::LatencyTree`] (such a broadcast takes the latency tree). Payloads below
    /// 256 KiB always take the latency tree, and so do those up to the inline limit
    /// (960 KiB) the plan does not stripe.
    ///
    /// ```no_run
    /// # async fn f(node: overlay::api::Node) -> Result<(), overlay::api::NodeError> {
    /// if let Some(plan) = node.broadcast_plan(16 << 20).await? {
    ///     println!("{} trees, {:.1} of {:.1} Mbit/s", plan.trees.len(),
    ///         plan.trees.iter().map(|t| t.mbit).sum::<f64>(), plan.bound_mbit);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn broadcast_plan(&self, bytes: u64) -> Result<Option<BroadcastPlan>, NodeError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(ApiCommand::Plan(bytes, tx))
            .await
            .map_err(|_| NodeError::Stopped)?;
        rx.await.map_err(|_| NodeError::Stopped)
    }

    /// This handle with another deadline for the collective operations it starts (see
    /// [`NodeBuilder::op_timeout`]); other handles of the node keep theirs. A broadcast of
    /// a large payload over slow links needs more than the default.
    pub fn with_op_timeout(mut self, timeout: Duration) -> Node {
        self.op_timeout = timeout;
        self
    }

    /// The filtered RTT to `peer`, if measured.
    pub async fn rtt(&self, peer: NodeId) -> Result<Option<Duration>, NodeError> {
        Ok(self
            .members()
            .await?
            .into_iter()
            .find(|m| m.id == peer)
            .and_then(|m| m.rtt_ms)
            .map(|ms| Duration::from_secs_f64(ms / 1e3)))
    }

    /// Member and tree events from now on. Memory is bounded: a consumer that falls more
    /// than 1024 events behind loses the oldest ones and is told so by a
    /// [`NodeEvent::Lagged`] with their count, never silently.
    pub fn events(&self) -> impl Stream<Item = NodeEvent> + Send + 'static {
        events_of(self.events.subscribe())
    }

    /// Leaves gracefully (detach from every tree, announce to every member) and stops.
    pub async fn leave(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(ApiCommand::Leave(tx)).await.is_ok() {
            let _ = rx.await;
        }
        let task = self.task.lock().expect("not poisoned").take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Stops the driver at once, telling nobody: the in-process stand-in for a crash
    /// (with the node's address cut off the emulated network, see
    /// `LocalOverlay::crash` of the test kit).
    #[cfg(feature = "testkit")]
    pub(crate) fn abort(&self) {
        if let Some(task) = self.task.lock().expect("not poisoned").take() {
            task.abort();
        }
    }

    /// Returns once the driver task has stopped: after [`Node::leave`], from this handle
    /// or another. (The driver also stops when every handle is dropped, which cannot
    /// happen while this one waits.) Waits without polling.
    ///
    /// ```no_run
    /// # async fn demo(node: overlay::Node) {
    /// node.stopped().await; // e.g. after `overlay-node leave` from another process
    /// # }
    /// ```
    pub async fn stopped(&self) {
        // The driver holds the command queue's receiving end until it returns.
        self.commands.closed().await;
    }

    /// Whether the driver task has stopped.
    pub fn is_stopped(&self) -> bool {
        // An aborted task drops its command queue only when the runtime gets to it: the
        // taken handle says so at once.
        self.commands.is_closed() || self.task.lock().expect("not poisoned").is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_consumer_that_falls_behind_is_told_how_many_events_it_lost() {
        let (tx, rx) = broadcast::channel(4);
        let mut events = Box::pin(events_of(rx));
        for i in 0..10u8 {
            let root = NodeId([i; 16]);
            tx.send(NodeEvent::TreeAdded { root }).expect("a receiver");
        }
        drop(tx);
        let seen: Vec<NodeEvent> = events.by_ref().collect().await;
        assert_eq!(seen[0], NodeEvent::Lagged { missed: 6 });
        let kept: Vec<NodeEvent> = (6..10u8)
            .map(|i| NodeEvent::TreeAdded {
                root: NodeId([i; 16]),
            })
            .collect();
        assert_eq!(seen[1..], kept[..]);
    }
}
