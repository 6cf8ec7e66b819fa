//! Reduce and allreduce of application values with a caller's associative operation:
//! the API ([`Node::allreduce_value`], [`Node::reduce_value`]) and one participant's part
//! of a [`ValuePlan`] (see [`crate::proto::bulk::value`] for the trees and the order).

use super::comm::Comm;
use super::session::{Input, Job, Output};
use super::{BulkOptions, BulkReport};
use crate::api::{Node, NodeError};
use crate::proto::NodeId;
use crate::proto::bulk::value::ValuePlan;
use crate::proto::bulk::{Phase, tag};
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Combines two encoded values into the encoding of their combination.
pub type Combine<'a> = &'a (dyn Fn(&[u8], &[u8]) -> Result<Vec<u8>, String> + Send + Sync);

impl Node {
    /// Combines `value` with the same-named call of every live member by `op`, which must
    /// be associative (not necessarily commutative), and gives every member the same
    /// result. Values are combined in the plan's order: cluster by cluster (clusters in
    /// the order of their smallest member), members in id order inside; every member
    /// passes the same `op`. Whole values travel a binomial tree inside each cluster and
    /// one among the clusters, so a value crosses each wide-area level once.
    ///
    /// ```no_run
    /// # async fn demo(node: overlay::Node) -> Result<(), overlay::NodeError> {
    /// use std::collections::BTreeMap;
    /// let mut words = BTreeMap::new();
    /// words.insert("grid".to_string(), 3u64);
    /// let merge = |mut a: BTreeMap<String, u64>, b: BTreeMap<String, u64>| {
    ///     for (k, v) in b { *a.entry(k).or_default() += v; }
    ///     a
    /// };
    /// let (all, report) = node.allreduce_value("counts", words, merge, Default::default()).await?;
    /// println!("{} words from {} members", all.len(), report.contributors.len());
    /// # Ok(()) }
    /// ```
    pub async fn allreduce_value<T, F>(
        &self,
        name: &str,
        value: T,
        op: F,
        options: BulkOptions,
    ) -> Result<(T, BulkReport), NodeError>
    where
        T: Serialize + DeserializeOwned,
        F: Fn(T, T) -> T + Send + Sync,
    {
        let (out, report) = self.value_call(name, None, &value, &op, options).await?;
        let out = out.ok_or_else(|| self.value_error(name, "no value came back"))?;
        Ok((self.decode_value(name, &out)?, report))
    }

    /// [`Node::allreduce_value`] with the result at `root` alone (`Some` there, `None`
    /// elsewhere). Every member passes the same `root`; the root plans the operation.
    pub async fn reduce_value<T, F>(
        &self,
        name: &str,
        root: NodeId,
        value: T,
        op: F,
        options: BulkOptions,
    ) -> Result<(Option<T>, BulkReport), NodeError>
    where
        T: Serialize + DeserializeOwned,
        F: Fn(T, T) -> T + Send + Sync,
    {
        let (out, report) = self
            .value_call(name, Some(root), &value, &op, options)
            .await?;
        let out = match out {
            Some(bytes) => Some(self.decode_value(name, &bytes)?),
            None => None,
        };
        Ok((out, report))
    }

    async fn value_call<T, F>(
        &self,
        name: &str,
        root: Option<NodeId>,
        value: &T,
        op: &F,
        options: BulkOptions,
    ) -> Result<(Option<Bytes>, BulkReport), NodeError>
    where
        T: Serialize + DeserializeOwned,
        F: Fn(T, T) -> T + Send + Sync,
    {
        let own = postcard::to_allocvec(value)
            .map_err(|e| self.value_error(name, format!("this node's value: {e}")))?;
        let own = Bytes::from(own);
        let combine = |a: &[u8], b: &[u8]| -> Result<Vec<u8>, String> {
            let a: T = postcard::from_bytes(a).map_err(|e| format!("a value: {e}"))?;
            let b: T = postcard::from_bytes(b).map_err(|e| format!("a value: {e}"))?;
            postcard::to_allocvec(&op(a, b)).map_err(|e| format!("a combined value: {e}"))
        };
        let input = Input::Value {
            own: &own,
            combine: &combine,
        };
        let (out, report) = self
            .run_bulk(name, Job::Value { root }, input, options)
            .await?;
        match out {
            Output::Value(v) => Ok((v, report)),
            _ => unreachable!("a value reduce gives a value"),
        }
    }

    fn decode_value<T: DeserializeOwned>(&self, name: &str, bytes: &[u8]) -> Result<T, NodeError> {
        postcard::from_bytes(bytes)
            .map_err(|e| self.value_error(name, format!("the result does not decode: {e}")))
    }

    fn value_error(&self, name: &str, reason: impl std::fmt::Display) -> NodeError {
        NodeError::Bulk {
            name: name.into(),
            reason: reason.to_string(),
        }
    }
}

/// This node's part of `plan`: the result, if this node gets one.
pub async fn run(
    comm: &Comm<'_>,
    plan: &ValuePlan,
    own: &Bytes,
    combine: Combine<'_>,
) -> Result<Option<Bytes>, NodeError> {
    let me = comm.me();
    let r = plan
        .route(me)
        .ok_or_else(|| comm.error("this node is not in the plan"))?;
    let fold = |acc: &[u8], got: &[u8]| {
        combine(acc, got)
            .map(Bytes::from)
            .map_err(|e| comm.error(e))
    };
    comm.parts(1);
    let (inside, among, to_root) = (
        tag(Phase::ValueUp, 0),
        tag(Phase::ValueUp, 1),
        tag(Phase::ValueUp, 2),
    );
    let mut acc = own.clone();
    for c in &r.in_children {
        acc = fold(&acc, &comm.recv(*c, inside).await?)?;
    }
    if let Some(p) = r.in_parent {
        comm.send(p, inside, acc.clone()).await?;
    }
    if r.leader {
        for c in &r.top_children {
            acc = fold(&acc, &comm.recv(*c, among).await?)?;
        }
        if let Some(p) = r.top_parent {
            comm.send(p, among, acc.clone()).await?;
        }
    }
    let result = match plan.root {
        Some(root) => {
            let top = plan.top().ok_or_else(|| comm.error("an empty plan"))?;
            match (r.top, me == root) {
                (true, true) => Some(acc),
                (true, false) => {
                    comm.send(root, to_root, acc).await?;
                    None
                }
                (false, true) => Some(comm.recv(top, to_root).await?),
                (false, false) => None,
            }
        }
        None => {
            let (down_inside, down_among) = (tag(Phase::ValueDown, 0), tag(Phase::ValueDown, 1));
            let result = match (r.top, r.leader, r.top_parent, r.in_parent) {
                (true, ..) => acc,
                (false, true, Some(p), _) => comm.recv(p, down_among).await?,
                (false, false, _, Some(p)) => comm.recv(p, down_inside).await?,
                _ => return Err(comm.error("a plan with no way back to this node")),
            };
            if r.leader {
                comm.send_all(&r.top_children, down_among, &result).await?;
            }
            comm.send_all(&r.in_children, down_inside, &result).await?;
            Some(result)
        }
    };
    comm.part(async { Ok(()) }).await?;
    Ok(result)
}
