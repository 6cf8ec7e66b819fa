//! Collective operations on a [`Node`]: broadcast, scatter, gather, reduce, their `all`
//! forms and barrier, along the live trees (the protocol is in [`crate::proto::collective`]).
//!
//! ```no_run
//! # async fn demo(node: overlay::api::Node) -> Result<(), overlay::api::NodeError> {
//! use overlay::proto::{NumKind, Reducer};
//! // Every node publishes its value once...
//! node.publish_value("load", &vec![0.25f64]).await?;
//! // ...and any node reduces over all of them.
//! let total = node.reduce("load", Reducer::Sum(NumKind::F64)).await?;
//! let sum: Vec<f64> = total.values()?.unwrap_or_default();
//! println!("{sum:?} from {} nodes, missing {:?}", total.contributors.len(), total.missing);
//! # Ok(()) }
//! ```

use super::reports::{
    BroadcastReport, Gathered, NodeInfo, Reduced, ScatterReport, encode, gathered, reduced,
};
use super::{ApiCommand, Node, NodeError};
use crate::net::ops::{Handler, OpCommand};
use crate::net::stripes::MIN_CUT;
use crate::proto::collective::{BarrierOutcome, MAX_INLINE_PAYLOAD, MAX_STREAM_PAYLOAD, ReduceFn};
use crate::proto::{NodeId, OpReport, Reducer, Start, StartKind};
use bytes::Bytes;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::oneshot;

/// Key every node answers gathers of with its [`NodeInfo`] (JSON).
pub const INFO_KEY: &str = "overlay.info";
/// Key every node publishes the value `[1u64]` under, so a sum counts the nodes.
pub const COUNT_KEY: &str = "overlay.count";

impl Node {
    /// Every node answers gathers of [`INFO_KEY`] and publishes `[1u64]` under [`COUNT_KEY`].
    pub(super) async fn serve_builtin_keys(
        &self,
        name: &str,
        started: std::time::Instant,
    ) -> Result<(), NodeError> {
        let (id, addr, name) = (self.id, self.advertised, name.to_string());
        self.on_request(INFO_KEY, move |_| {
            serde_json::to_vec(&NodeInfo {
                id,
                name: name.clone(),
                addr,
                uptime_ms: started.elapsed().as_millis() as u64,
            })
            .ok()
        })
        .await?;
        self.publish_value(COUNT_KEY, &vec![1u64]).await
    }

    /// Sends `cmd` and returns once the driver applied it: a value published is then
    /// what the next request from any node finds, not one still queued here.
    async fn op(&self, cmd: OpCommand) -> Result<(), NodeError> {
        let (applied, done) = tokio::sync::oneshot::channel();
        for cmd in [cmd, OpCommand::Applied(applied)] {
            (self.commands.send(ApiCommand::Op(cmd)).await).map_err(|_| NodeError::Stopped)?;
        }
        done.await.map_err(|_| NodeError::Stopped)
    }

    async fn run_op(&self, what: StartKind) -> Result<OpReport, NodeError> {
        self.run_scoped(what, None).await
    }

    /// Runs an operation over the members of `group` (`None`: every member).
    pub(super) async fn run_scoped(
        &self,
        what: StartKind,
        group: Option<String>,
    ) -> Result<OpReport, NodeError> {
        let kind = super::op_stats::kind(&what);
        self.op_stats
            .time(kind, self.run_op_untimed(what, group))
            .await
    }

    async fn run_op_untimed(
        &self,
        what: StartKind,
        group: Option<String>,
    ) -> Result<OpReport, NodeError> {
        let (tx, rx) = oneshot::channel();
        let start = Start {
            group,
            nonce: 0, // numbered by the driver
            timeout: self.op_timeout,
            what,
        };
        self.op(OpCommand::Start(start, tx)).await?;
        let report = rx.await.map_err(|_| NodeError::Stopped)?;
        match report.error {
            Some(e) => Err(NodeError::Collective(e)),
            None => Ok(report),
        }
    }

    pub(super) fn check_size(len: usize) -> Result<(), NodeError> {
        if len > MAX_INLINE_PAYLOAD {
            return Err(NodeError::PayloadTooLarge {
                len,
                limit: MAX_INLINE_PAYLOAD,
            });
        }
        Ok(())
    }

    /// Broadcasts `payload` along this node's tree: every member delivers it once (see
    /// [`Node::deliveries`]). Returns who delivered and who is missing. Payloads above
    /// [`MAX_INLINE_PAYLOAD`] (up to [`MAX_STREAM_PAYLOAD`]) are streamed hop by hop and
    /// forwarded as they arrive; a member counts as delivered once it has checked the
    /// whole payload's SHA-256. So are payloads from 256 KiB up that the node's measured
    /// model predicts faster striped over several trees ([`Node::broadcast_plan`]).
    ///
    /// ```no_run
    /// # async fn f(node: overlay::api::Node) -> Result<(), overlay::api::NodeError> {
    /// let report = node.broadcast(b"hello".to_vec()).await?;
    /// assert!(report.missing.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn broadcast(
        &self,
        payload: impl Into<Vec<u8>>,
    ) -> Result<BroadcastReport, NodeError> {
        let payload = payload.into();
        let r = if payload.len() > MAX_INLINE_PAYLOAD || self.stripes(payload.len()).await? {
            self.broadcast_streamed(Bytes::from(payload), None).await?
        } else {
            self.run_op(StartKind::Broadcast { payload }).await?
        };
        Ok(BroadcastReport {
            op: r.op.map_or(0, |o| o.nonce),
            delivered: r.reached,
            missing: r.missing,
            elapsed: r.elapsed,
        })
    }

    /// Whether a payload the control messages could carry goes striped instead: from
    /// [`MIN_CUT`] (below, it would be one part on one tree) when the node's plan stripes.
    async fn stripes(&self, len: usize) -> Result<bool, NodeError> {
        if !(MIN_CUT as usize..=MAX_INLINE_PAYLOAD).contains(&len) {
            return Ok(false);
        }
        let plan = self.broadcast_plan(len as u64).await?;
        Ok(plan.is_some_and(|p| p.striped))
    }

    /// A large payload goes on the data plane: streamed beside the control messages and
    /// forwarded hop by hop as it arrives (see the design document on data streams).
    pub(super) async fn broadcast_streamed(
        &self,
        payload: Bytes,
        group: Option<String>,
    ) -> Result<OpReport, NodeError> {
        let op = self.broadcast_streamed_untimed(payload, group);
        self.op_stats.time("broadcast_stream", op).await
    }

    async fn broadcast_streamed_untimed(
        &self,
        payload: Bytes,
        group: Option<String>,
    ) -> Result<OpReport, NodeError> {
        if payload.len() as u64 > MAX_STREAM_PAYLOAD {
            return Err(NodeError::PayloadTooLarge {
                len: payload.len(),
                limit: MAX_STREAM_PAYLOAD as usize,
            });
        }
        let hashed = payload.clone();
        let digest = tokio::task::spawn_blocking(move || crate::net::stream::digest(&hashed))
            .await
            .map_err(NodeError::Digest)?;
        let (tx, rx) = oneshot::channel();
        // Time to move the bytes comes on top of the usual deadline (at a pessimistic
        // 1 MB/s), so a slow but progressing transfer is not reported missing.
        let transfer = Duration::from_secs_f64(payload.len() as f64 / 1e6);
        self.op(OpCommand::StartStream {
            payload,
            digest,
            timeout: self.op_timeout + transfer,
            group,
            reply: tx,
        })
        .await?;
        let report = rx.await.map_err(|_| NodeError::Stopped)?;
        match report.error {
            Some(e) => Err(NodeError::Collective(e)),
            None => Ok(report),
        }
    }

    /// Broadcasts a serde value (postcard); receivers use [`Delivery::decode`](crate::api::Delivery::decode).
    pub async fn broadcast_value<T: Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<BroadcastReport, NodeError> {
        self.broadcast(encode(value)?).await
    }

    /// Sends each destination its own item along the tree. Destinations that are not
    /// live members are reported in `unknown`, not dropped silently.
    ///
    /// ```no_run
    /// # async fn f(node: overlay::api::Node, a: overlay::proto::NodeId) -> Result<(), overlay::api::NodeError> {
    /// let report = node.scatter([(a, b"work item".to_vec())].into()).await?;
    /// println!("{} delivered, {:?} unknown", report.delivered.len(), report.unknown);
    /// # Ok(()) }
    /// ```
    pub async fn scatter(
        &self,
        items: HashMap<NodeId, Vec<u8>>,
    ) -> Result<ScatterReport, NodeError> {
        let mut items: Vec<(NodeId, Vec<u8>)> = items.into_iter().collect();
        items.sort_by_key(|(id, _)| *id);
        Self::check_size(items.iter().map(|(_, v)| v.len() + 24).sum())?;
        let r = self.run_op(StartKind::Scatter { items }).await?;
        Ok(ScatterReport {
            op: r.op.map_or(0, |o| o.nonce),
            delivered: r.reached,
            missing: r.missing,
            unknown: r.unknown,
            elapsed: r.elapsed,
        })
    }

    /// Collects every member's value for `key`: its published value ([`Node::publish`]),
    /// or its handler's answer ([`Node::on_request`]) to `request`.
    ///
    /// ```no_run
    /// # async fn f(node: overlay::api::Node) -> Result<(), overlay::api::NodeError> {
    /// let all = node.gather(overlay::api::INFO_KEY, Vec::new()).await?;
    /// println!("{} answers, missing {:?}", all.items.len(), all.missing);
    /// # Ok(()) }
    /// ```
    pub async fn gather(&self, key: &str, request: Vec<u8>) -> Result<Gathered, NodeError> {
        Self::check_size(request.len())?;
        let r = self
            .run_op(StartKind::Gather {
                key: key.to_string(),
                request,
            })
            .await?;
        Ok(gathered(r))
    }

    /// As [`Node::gather`], and every member then receives the items as a delivery of kind
    /// [`DeliveryKind::AllGather`](crate::DeliveryKind::AllGather) (postcard `Vec<(NodeId, Vec<u8>)>`).
    pub async fn allgather(&self, key: &str, request: Vec<u8>) -> Result<Gathered, NodeError> {
        let r = self
            .run_op(StartKind::AllGather {
                key: key.to_string(),
                request,
            })
            .await?;
        Ok(gathered(r))
    }

    /// Combines every member's value for `key` with `reducer`, hop by hop up the tree.
    /// Nobody is counted twice, even when nodes switch parents mid-operation.
    ///
    /// ```no_run
    /// # async fn f(node: overlay::api::Node) -> Result<(), overlay::api::NodeError> {
    /// use overlay::proto::{NumKind, Reducer};
    /// let n = node.reduce(overlay::api::COUNT_KEY, Reducer::Sum(NumKind::U64)).await?;
    /// println!("{:?} nodes", n.values::<Vec<u64>>()?);
    /// # Ok(()) }
    /// ```
    pub async fn reduce(&self, key: &str, reducer: Reducer) -> Result<Reduced, NodeError> {
        self.reduce_with(key, Vec::new(), reducer).await
    }

    /// As [`Node::reduce`], with a request handed to the members' handlers.
    pub async fn reduce_with(
        &self,
        key: &str,
        request: Vec<u8>,
        reducer: Reducer,
    ) -> Result<Reduced, NodeError> {
        Self::check_size(request.len())?;
        let r = self
            .run_op(StartKind::Reduce {
                key: key.to_string(),
                request,
                reducer,
            })
            .await?;
        Ok(reduced(r))
    }

    /// As [`Node::reduce`], and every member then receives the result as a delivery of
    /// kind [`DeliveryKind::AllReduce`](crate::DeliveryKind::AllReduce) (a postcard [`ReduceOutcome`](crate::proto::collective::ReduceOutcome)).
    pub async fn allreduce(&self, key: &str, reducer: Reducer) -> Result<Reduced, NodeError> {
        let r = self
            .run_op(StartKind::AllReduce {
                key: key.to_string(),
                request: Vec::new(),
                reducer,
            })
            .await?;
        Ok(reduced(r))
    }

    /// Waits until every live member has called `barrier` with the same name (or the
    /// timeout passed: then the outcome lists who did not arrive).
    pub async fn barrier(&self, name: &str) -> Result<BarrierOutcome, NodeError> {
        let op = async {
            let (tx, rx) = oneshot::channel();
            self.op(OpCommand::Barrier {
                name: name.to_string(),
                timeout: self.op_timeout,
                reply: tx,
            })
            .await?;
            rx.await.map_err(|_| NodeError::Stopped)
        };
        self.op_stats.time("barrier", op).await
    }

    /// Publishes this node's value for `key`: gathers and reduces naming it take it. It
    /// returns once the node holds the value, so an operation any node starts afterwards
    /// finds it.
    pub async fn publish(&self, key: &str, value: Vec<u8>) -> Result<(), NodeError> {
        self.op(OpCommand::Publish {
            key: key.to_string(),
            value,
        })
        .await
    }

    /// Publishes a serde value (postcard), e.g. `vec![1.5f64]` for the built-in reducers.
    pub async fn publish_value<T: Serialize + ?Sized>(
        &self,
        key: &str,
        value: &T,
    ) -> Result<(), NodeError> {
        self.publish(key, encode(value)?).await
    }

    /// Withdraws a published value (then the handler, if any, answers).
    pub async fn withdraw(&self, key: &str) -> Result<(), NodeError> {
        self.op(OpCommand::Withdraw {
            key: key.to_string(),
        })
        .await
    }

    /// Answers gathers and reduces naming `key` with `handler` (given the request; `None`
    /// declines). It runs on the node's task: keep it quick.
    pub async fn on_request(
        &self,
        key: &str,
        handler: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Result<(), NodeError> {
        let handler: Handler = std::sync::Arc::new(handler);
        self.op(OpCommand::Handle {
            key: key.to_string(),
            handler,
        })
        .await
    }

    /// Registers an associative reducer under `name`; every node that may take part in a
    /// reduce using [`Reducer::Named`]`(name)` must register it.
    pub async fn register_reducer(
        &self,
        name: &str,
        f: impl Fn(&[u8], &[u8]) -> Result<Vec<u8>, String> + Send + Sync + 'static,
    ) -> Result<(), NodeError> {
        let f: ReduceFn = std::sync::Arc::new(f);
        self.op(OpCommand::RegisterReducer {
            name: name.to_string(),
            f,
        })
        .await
    }
}
