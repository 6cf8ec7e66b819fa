//! Groups: named subsets of the members, each with its own membership view, and
//! collectives scoped to them.
//!
//! A node's groups ride in its own membership record, so every member learns who is in
//! which group as it learns of members, and a member that dies or leaves is out of all its
//! groups at once. A group's operations travel the overlay's live trees like any other:
//! members outside the group relay them where the trees say so, but only the group's
//! members deliver a broadcast, contribute to a gather or reduce, or are expected by the
//! root. Groups need no configuration: one exists while a member is in it.
//!
//! ```no_run
//! # async fn demo(node: overlay::Node) -> Result<(), overlay::NodeError> {
//! use futures::StreamExt;
//! let workers = node.group("workers")?;
//! workers.join().await?;
//! let report = workers.broadcast(b"step 1".to_vec()).await?;
//! println!("delivered by {} members of the group", report.delivered.len());
//! let mut inbox = workers.deliveries();
//! if let Some(Ok(d)) = inbox.next().await {
//!     assert_eq!(d.group.as_deref(), Some("workers"));
//! }
//! # Ok(()) }
//! ```

mod rendezvous;
mod round;

pub(crate) use self::rendezvous::Rendezvous;
pub use self::rendezvous::RendezvousOptions;
pub use self::round::{Round, RoundChanges};

use super::large::{BulkOptions, BulkReport, Element, ReduceOp};
use super::reports::{encode, gathered, reduced};
use super::{
    BroadcastReport, Deliveries, Delivery, Gathered, Lagged, Node, NodeError, Reduced,
    ScatterReport,
};
use crate::net::driver::ApiCommand;
use crate::proto::message::{MAX_GROUP_NAME, MAX_GROUPS};
use crate::proto::{Liveness, NodeId, Reducer, StartKind};
use futures::{Stream, StreamExt};
use serde::Serialize;

/// A handle to one group of this node's overlay; cheap to clone. Made by [`Node::group`];
/// the node is a member only after [`Group::join`].
#[derive(Clone)]
pub struct Group {
    node: Node,
    name: String,
}

impl Node {
    /// A handle to group `name` (1 to 64 bytes). Nothing changes until [`Group::join`].
    ///
    /// ```no_run
    /// # fn f(node: overlay::Node) -> Result<(), overlay::NodeError> {
    /// let g = node.group("workers")?;
    /// assert!(node.group("").is_err());
    /// # Ok(()) }
    /// ```
    pub fn group(&self, name: &str) -> Result<Group, NodeError> {
        if name.is_empty() || name.len() > MAX_GROUP_NAME {
            return Err(NodeError::Group {
                group: name.into(),
                reason: format!("a group's name has 1 to {MAX_GROUP_NAME} bytes"),
            });
        }
        Ok(Group {
            node: self.clone(),
            name: name.to_string(),
        })
    }

    /// The groups this node is a member of, sorted.
    pub fn joined_groups(&self) -> Vec<String> {
        let groups = self.groups.lock().expect("not poisoned");
        groups.iter().cloned().collect()
    }

    async fn set_groups(&self, change: impl FnOnce(&mut Vec<String>)) -> Result<(), NodeError> {
        let list = {
            let mut groups = self.groups.lock().expect("not poisoned");
            let mut list: Vec<String> = groups.iter().cloned().collect();
            change(&mut list);
            list.sort();
            list.dedup();
            if list.len() > MAX_GROUPS {
                return Err(NodeError::Group {
                    group: list.last().cloned().unwrap_or_default(),
                    reason: format!("a node can be in at most {MAX_GROUPS} groups"),
                });
            }
            *groups = list.iter().cloned().collect();
            list
        };
        let cmd = ApiCommand::SetGroups(list);
        self.commands
            .send(cmd)
            .await
            .map_err(|_| NodeError::Stopped)
    }
}

impl Group {
    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node this handle belongs to.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Makes this node a member: its record changes and spreads to every member (within
    /// about a second on a healthy overlay). Joining twice is harmless.
    pub async fn join(&self) -> Result<(), NodeError> {
        let name = self.name.clone();
        self.node.set_groups(|l| l.push(name)).await?;
        self.node.rendezvous.serve(self);
        Ok(())
    }

    /// This node is no longer a member. Leaving a group it is not in is harmless.
    pub async fn leave(&self) -> Result<(), NodeError> {
        let name = self.name.clone();
        self.node.set_groups(|l| l.retain(|g| *g != name)).await
    }

    /// Whether this node is a member.
    pub fn is_joined(&self) -> bool {
        let groups = self.node.groups.lock().expect("not poisoned");
        groups.contains(&self.name)
    }

    /// The live members of the group as this node knows them (itself included once it has
    /// joined), sorted.
    pub fn members(&self) -> Vec<NodeId> {
        let mut m: Vec<NodeId> = (self.node.members.snapshot().into_iter())
            .filter(|m| matches!(m.state, Liveness::Alive | Liveness::Suspect))
            .filter(|m| m.groups.contains(&self.name))
            .map(|m| m.id)
            .collect();
        if self.is_joined() {
            m.push(self.node.id);
        }
        m.sort();
        m.dedup();
        m
    }

    /// Waits until this node knows at least `n` live members of the group.
    pub async fn wait_members(
        &self,
        n: usize,
        timeout: std::time::Duration,
    ) -> Result<Vec<NodeId>, NodeError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let m = self.members();
            if m.len() >= n {
                return Ok(m);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.error(format!(
                    "{} members known after {timeout:?}, {n} wanted",
                    m.len()
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn error(&self, reason: impl Into<String>) -> NodeError {
        NodeError::Group {
            group: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// Broadcasts `payload` (up to [`crate::MAX_STREAM_PAYLOAD`]; above
    /// [`crate::MAX_INLINE_PAYLOAD`] streamed hop by hop down this node's latency tree,
    /// not striped) to the group: every live member delivers it once (see [`Group::deliveries`]); the report names the
    /// members that did and those missing. Any node may send to a group; only members
    /// deliver.
    pub async fn broadcast(
        &self,
        payload: impl Into<Vec<u8>>,
    ) -> Result<BroadcastReport, NodeError> {
        let payload = payload.into();
        let group = Some(self.name.clone());
        let r = if payload.len() > crate::MAX_INLINE_PAYLOAD {
            // Streamed hop by hop down the latency tree (never striped).
            let payload = bytes::Bytes::from(payload);
            self.node.broadcast_streamed(payload, group).await?
        } else {
            let what = StartKind::Broadcast { payload };
            self.node.run_scoped(what, group).await?
        };
        Ok(BroadcastReport {
            op: r.op.map_or(0, |o| o.nonce),
            delivered: r.reached,
            missing: r.missing,
            elapsed: r.elapsed,
        })
    }

    /// Broadcasts a serde value to the group; members decode it with [`Delivery::decode`].
    pub async fn broadcast_value<T: Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<BroadcastReport, NodeError> {
        self.broadcast(encode(value)?).await
    }

    /// This node's deliveries of the group's operations (broadcasts and the results of
    /// its allreduces and allgathers), bounded like [`Node::deliveries`].
    pub fn deliveries(&self) -> impl Stream<Item = Result<Delivery, Lagged>> + Send + Unpin {
        let name = self.name.clone();
        let all: Deliveries = self.node.deliveries();
        all.filter(move |d| {
            let keep = match d {
                Ok(d) => d.group.as_deref() == Some(name.as_str()),
                Err(_) => true,
            };
            std::future::ready(keep)
        })
    }

    /// Sends each destination its own item ([`Node::scatter`]); destinations that are not
    /// live members of the group get nothing and are reported in `unknown`. Items arrive
    /// through [`Node::deliveries`] as kind [`crate::DeliveryKind::Scatter`].
    pub async fn scatter(
        &self,
        mut items: std::collections::HashMap<NodeId, Vec<u8>>,
    ) -> Result<ScatterReport, NodeError> {
        let members = self.members();
        let mut outside: Vec<NodeId> = (items.keys())
            .filter(|d| !members.contains(d))
            .copied()
            .collect();
        items.retain(|d, _| members.contains(d));
        let mut report = self.node.scatter(items).await?;
        report.unknown.append(&mut outside);
        report.unknown.sort();
        Ok(report)
    }

    /// Collects the value for `key` of every live member of the group
    /// ([`Node::publish`] or [`Node::on_request`]); members outside are not asked.
    pub async fn gather(&self, key: &str, request: Vec<u8>) -> Result<Gathered, NodeError> {
        Node::check_size(request.len())?;
        let key = key.to_string();
        let what = StartKind::Gather { key, request };
        Ok(gathered(self.run(what).await?))
    }

    /// Combines the value for `key` of every live member of the group with `reducer`.
    pub async fn reduce(&self, key: &str, reducer: Reducer) -> Result<Reduced, NodeError> {
        let (key, request) = (key.to_string(), Vec::new());
        let what = StartKind::Reduce {
            key,
            request,
            reducer,
        };
        Ok(reduced(self.run(what).await?))
    }

    /// As [`Group::reduce`], and every member of the group then receives the result as a
    /// delivery of kind [`crate::DeliveryKind::AllReduce`].
    pub async fn allreduce(&self, key: &str, reducer: Reducer) -> Result<Reduced, NodeError> {
        let (key, request) = (key.to_string(), Vec::new());
        let what = StartKind::AllReduce {
            key,
            request,
            reducer,
        };
        Ok(reduced(self.run(what).await?))
    }

    /// Runs a collective scoped to this group.
    async fn run(&self, what: StartKind) -> Result<crate::proto::OpReport, NodeError> {
        self.node.run_scoped(what, Some(self.name.clone())).await
    }

    /// Options that make any large collective run over the group's live members as this
    /// node sees them now ([`BulkOptions::members`]); for a member list every caller
    /// agrees on, use a [`Round`]'s.
    pub fn bulk_options(&self) -> BulkOptions {
        BulkOptions {
            members: Some(self.members()),
            ..BulkOptions::default()
        }
    }

    /// A large allreduce ([`Node::allreduce_slice`]) over the group's live members: every
    /// member calls it with the same `name` and length.
    pub async fn allreduce_slice<T: Element>(
        &self,
        name: &str,
        data: &mut [T],
        op: ReduceOp,
    ) -> Result<BulkReport, NodeError> {
        let options = self.bulk_options();
        let name = format!("group/{}/{name}", self.name);
        self.node
            .allreduce_slice_with(&name, data, op, options)
            .await
    }
}
