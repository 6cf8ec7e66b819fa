//! What the collectives return: each operation's report as the application sees it, and
//! the codec of the values they carry.

use super::NodeError;
use crate::net::view::{DecodeError, Delivery};
use crate::proto::collective::ReduceOutcome;
use crate::proto::{NodeId, OpId, OpReport};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::time::Duration;

/// The outcome of a broadcast, as its root saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BroadcastReport {
    /// The operation's number.
    pub op: u64,
    /// Members that delivered it (the root included).
    pub delivered: Vec<NodeId>,
    /// Members alive at the start that did not confirm delivery before the deadline.
    pub missing: Vec<NodeId>,
    /// From start to report.
    pub elapsed: Duration,
}

/// The outcome of a scatter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScatterReport {
    /// The operation's number.
    pub op: u64,
    /// Destinations that took their item.
    pub delivered: Vec<NodeId>,
    /// Destinations that did not confirm before the deadline.
    pub missing: Vec<NodeId>,
    /// Destinations that are not live members: nothing was sent to them.
    pub unknown: Vec<NodeId>,
    /// From start to report.
    pub elapsed: Duration,
}

/// The outcome of a gather.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gathered {
    /// The operation's number.
    pub op: u64,
    /// Each contributor's value.
    pub items: Vec<(NodeId, Vec<u8>)>,
    /// Members that did not answer before the deadline.
    pub missing: Vec<NodeId>,
    /// Members that answered without a value.
    pub declined: Vec<NodeId>,
    /// From start to report.
    pub elapsed: Duration,
}

impl Gathered {
    /// Decodes every item as a postcard `T` (as published by [`Node::publish_value`](crate::api::Node::publish_value)).
    pub fn decode<T: DeserializeOwned>(&self) -> Result<Vec<(NodeId, T)>, NodeError> {
        self.items
            .iter()
            .map(|(id, v)| decode(v).map(|t| (*id, t)))
            .collect()
    }
}

/// The outcome of a reduce.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reduced {
    /// The operation's number.
    pub op: u64,
    /// The combined value of `contributors` (`None`: nobody contributed).
    pub value: Option<Vec<u8>>,
    /// Who is counted in `value`, each exactly once.
    pub contributors: Vec<NodeId>,
    /// Members that did not answer before the deadline.
    pub missing: Vec<NodeId>,
    /// Members that answered without a value (or one that could not be combined).
    pub declined: Vec<NodeId>,
    /// From start to report.
    pub elapsed: Duration,
}

impl Reduced {
    /// Decodes the value of a built-in reducer (`Vec<u64>`, `Vec<i64>` or `Vec<f64>`), or
    /// any postcard value of a named one.
    pub fn values<T: DeserializeOwned>(&self) -> Result<Option<T>, NodeError> {
        self.value.as_deref().map(decode).transpose()
    }
}

/// What `overlay-node gather info` shows for each node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its id.
    pub id: NodeId,
    /// Its name.
    pub name: String,
    /// The address it listens on.
    pub addr: std::net::SocketAddr,
    /// How long it has been running, ms.
    pub uptime_ms: u64,
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, NodeError> {
    Ok(postcard::from_bytes(bytes).map_err(DecodeError)?)
}

pub(super) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, NodeError> {
    postcard::to_allocvec(value).map_err(NodeError::Encode)
}

pub(super) fn gathered(r: OpReport) -> Gathered {
    Gathered {
        op: r.op.map_or(0, |o: OpId| o.nonce),
        items: r.items,
        missing: r.missing,
        declined: r.declined,
        elapsed: r.elapsed,
    }
}

pub(super) fn reduced(r: OpReport) -> Reduced {
    Reduced {
        op: r.op.map_or(0, |o: OpId| o.nonce),
        value: r.value,
        contributors: r.contributors,
        missing: r.missing,
        declined: r.declined,
        elapsed: r.elapsed,
    }
}

/// Decodes an allreduce delivery.
pub fn decode_reduce_outcome(d: &Delivery) -> Result<ReduceOutcome, NodeError> {
    decode(&d.payload)
}
