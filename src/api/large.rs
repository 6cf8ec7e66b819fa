//! Large collectives: allreduce of big typed vectors, planned on the measured network and
//! run as point-to-point transfers, with the algorithm chosen, and corrected, at run time.
//!
//! Every participant calls the same operation (same name, same length and type); the
//! member with the smallest id plans it (see [`crate::proto::bulk`]):
//!
//! 1. each caller sends it a *ready*; it waits for every live member (up to
//!    [`BulkOptions::rendezvous`]; members that die meanwhile are not waited for);
//! 2. it predicts every algorithm on the clusters and bandwidths it measured, takes the
//!    best score of its decision table ([`Node::collective_table`]) unless the caller
//!    forced one, and sends the plan;
//! 3. each participant runs its part ([`exec`]) and says *done*; when all are done the
//!    planner says *commit* and every caller writes the result into its slice. A
//!    participant lost before that makes the planner start a new attempt with the others,
//!    so the result is always exact over the contributors the report names.
//!
//! ```no_run
//! # async fn demo(node: overlay::Node) -> Result<(), overlay::NodeError> {
//! use overlay::bulk::ReduceOp;
//! let mut gradient = vec![0.5f32; 1 << 20];
//! let report = node.allreduce_slice("step-1", &mut gradient, ReduceOp::Sum).await?;
//! println!("{} contributors, {}", report.contributors.len(), report.algorithm.name());
//! # Ok(()) }
//! ```

mod comm;
mod exec;
mod planner;

pub use crate::proto::bulk::model::Prediction;
pub use crate::proto::bulk::{Algorithm, Elem, ReduceOp, TuneEntry, combine::Element};

use self::comm::Comm;
use crate::api::{Node, NodeError};
use crate::net::bulk::Mailbox;
use crate::proto::bulk::{BulkPlan, Control, Tuner, attempt_operation, control, operation};
use crate::proto::{Liveness, NodeId};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::debug;

/// A node's state for large collectives, shared by its API handles.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) mailbox: Arc<Mailbox>,
    conns: Mutex<HashMap<NodeId, quinn::Connection>>,
    /// Calls made per name (part of the operation number).
    calls: Mutex<HashMap<String, u64>>,
    tuner: Mutex<Tuner>,
}

impl Shared {
    pub(crate) fn new(mailbox: Arc<Mailbox>) -> Shared {
        Shared {
            mailbox,
            ..Shared::default()
        }
    }
}

/// Options of one large collective call.
#[derive(Clone, Debug)]
pub struct BulkOptions {
    /// Use this algorithm instead of the node's choice (only the planner's matters).
    pub algorithm: Option<Algorithm>,
    /// The clusters to use instead of the discovered ones (a static configuration).
    pub groups: Option<Vec<Vec<NodeId>>>,
    /// How long the whole call may take.
    pub timeout: Duration,
    /// How long the planner waits for every live member to call.
    pub rendezvous: Duration,
}

impl Default for BulkOptions {
    fn default() -> Self {
        BulkOptions {
            algorithm: None,
            groups: None,
            timeout: Duration::from_secs(600),
            rendezvous: Duration::from_secs(30),
        }
    }
}

/// What a large collective did.
#[derive(Clone, Debug, PartialEq)]
pub struct BulkReport {
    /// Whose vectors are in the result, in id order.
    pub contributors: Vec<NodeId>,
    /// Live members that are not in it (did not call in time, were lost, or mismatched).
    pub missing: Vec<NodeId>,
    /// How the data moved.
    pub algorithm: Algorithm,
    /// What the model predicted for it.
    pub predicted: Duration,
    /// This call's time on this node.
    pub elapsed: Duration,
    /// Attempts made (more than one: a participant was lost and the rest went again).
    pub attempts: u32,
}

impl Node {
    /// Combines `data` element by element with the same-named call of every live member
    /// and leaves the result in `data` on all of them. See the module docs.
    pub async fn allreduce_slice<T: Element>(
        &self,
        name: &str,
        data: &mut [T],
        op: ReduceOp,
    ) -> Result<BulkReport, NodeError> {
        self.allreduce_slice_with(name, data, op, BulkOptions::default())
            .await
    }

    /// [`Node::allreduce_slice`] with options.
    pub async fn allreduce_slice_with<T: Element>(
        &self,
        name: &str,
        data: &mut [T],
        op: ReduceOp,
        options: BulkOptions,
    ) -> Result<BulkReport, NodeError> {
        let mut input = Vec::new();
        T::put(data, &mut input);
        let call = Call {
            name,
            elem: T::ELEM,
            len: data.len() as u64,
            op,
        };
        let (out, report) = self
            .allreduce_bytes(call, Bytes::from(input), options)
            .await?;
        T::get(&out, data);
        Ok(report)
    }

    /// The decision table of the large collectives this node planned: per collective and
    /// size class, each algorithm's predicted and measured times and the current choice.
    pub fn collective_table(&self) -> Vec<TuneEntry> {
        self.bulk.tuner.lock().expect("not poisoned").entries()
    }

    /// What the model predicts now for an allreduce of `len` elements of `elem` over the
    /// live members, per algorithm.
    pub async fn allreduce_predictions(&self, len: u64, elem: Elem) -> Vec<Prediction> {
        let members = self.live_members();
        let net = planner::network(self, &members, None).await;
        crate::proto::bulk::model::predict_all(&net, len, elem.size())
    }

    async fn allreduce_bytes(
        &self,
        call: Call<'_>,
        input: Bytes,
        options: BulkOptions,
    ) -> Result<(Vec<u8>, BulkReport), NodeError> {
        if self.is_stopped() {
            return Err(NodeError::Stopped);
        }
        let started = Instant::now();
        let number = {
            let mut calls = self.bulk.calls.lock().expect("not poisoned");
            let c = calls.entry(call.name.to_string()).or_default();
            *c += 1;
            *c - 1
        };
        let ctl = operation(call.name, number);
        let comm = Comm::new(self, ctl, call.name);
        let planner = *self.live_members().first().expect("a node counts itself");
        let ready = Control::Ready {
            len: call.len,
            elem: call.elem,
            op: call.op,
            algorithm: options.algorithm,
            groups: options.groups.clone(),
        };
        let work = async {
            comm.send(planner, control::ready(), Bytes::from(ready.encode()))
                .await?;
            let part = self.participate(&comm, planner, &input);
            if planner != self.id {
                return part
                    .await
                    .map(|(out, plan, attempts)| (out, plan, attempts, None));
            }
            let plan = planner::run(self, &comm, call, &options);
            let (planned, part) = tokio::join!(plan, part);
            let (out, plan, attempts) = part?;
            Ok((out, plan, attempts, planned.ok()))
        };
        let outcome = tokio::time::timeout(options.timeout, work).await;
        self.bulk.mailbox.forget(ctl);
        let (out, plan, attempts, planned) =
            outcome.map_err(|_| comm.error(format!("not done within {:?}", options.timeout)))??;
        let report = BulkReport {
            contributors: plan.members.clone(),
            missing: plan.missing.clone(),
            algorithm: plan.algorithm,
            predicted: Duration::from_secs_f64(plan.predicted_s.max(0.0)),
            elapsed: started.elapsed(),
            attempts: planned.unwrap_or(attempts),
        };
        Ok((out, report))
    }

    /// Waits for the plans of `planner` and runs them until one commits.
    async fn participate(
        &self,
        ctl: &Comm<'_>,
        planner: NodeId,
        input: &Bytes,
    ) -> Result<(Vec<u8>, BulkPlan, u32), NodeError> {
        let mut msg = self.control(ctl, planner, control::plan(0)).await?;
        let mut attempts = 0;
        loop {
            let plan = match msg {
                Control::Plan(p) => p,
                Control::Refused(reason) => return Err(ctl.error(reason)),
                other => return Err(ctl.error(format!("unexpected {other:?}"))),
            };
            attempts += 1;
            if !plan.members.contains(&self.id) {
                return Err(ctl.error("left out of the operation (not ready in time)"));
            }
            let attempt = plan.attempt;
            let data = Comm::new(self, attempt_operation(ctl.op, attempt), "");
            let next = self.control(ctl, planner, control::plan(attempt + 1));
            tokio::pin!(next);
            let ran = tokio::select! {
                r = exec::run(&data, &plan, input) => r,
                m = &mut next => {
                    self.bulk.mailbox.forget(data.op);
                    msg = m?;
                    continue;
                }
            };
            let done = match &ran {
                Ok(_) => Control::Done { attempt },
                Err(e) => Control::Failed {
                    attempt,
                    reason: e.to_string(),
                },
            };
            ctl.send(planner, control::done(attempt), Bytes::from(done.encode()))
                .await?;
            let Ok(out) = ran else {
                debug!(attempt, "this attempt failed here: waiting for the next");
                self.bulk.mailbox.forget(data.op);
                msg = next.await?;
                continue;
            };
            tokio::select! {
                c = self.control(ctl, planner, control::commit(attempt)) => {
                    c?;
                    self.bulk.mailbox.forget(data.op);
                    return Ok((out, plan, attempts));
                }
                m = &mut next => {
                    self.bulk.mailbox.forget(data.op);
                    msg = m?;
                }
            }
        }
    }

    /// The control message `tag` from `from`; an error if `from` is lost first.
    async fn control(&self, comm: &Comm<'_>, from: NodeId, tag: u32) -> Result<Control, NodeError> {
        tokio::select! {
            got = comm.recv(from, tag) => {
                Control::decode(&got?).map_err(|e| comm.error(format!("bad control message: {e}")))
            }
            () = self.lost(from) => Err(comm.error(format!("the planner {} was lost", from.short()))),
        }
    }

    /// Returns once `id` is no longer a live member.
    async fn lost(&self, id: NodeId) {
        while self.is_live(id) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether `id` is a live member (nobody is, once this node stopped).
    fn is_live(&self, id: NodeId) -> bool {
        if self.is_stopped() {
            return false;
        }
        id == self.id
            || self
                .members
                .snapshot()
                .iter()
                .any(|m| m.id == id && matches!(m.state, Liveness::Alive | Liveness::Suspect))
    }

    /// Live members and this node, sorted.
    fn live_members(&self) -> Vec<NodeId> {
        let mut all: Vec<NodeId> = self
            .members
            .snapshot()
            .into_iter()
            .filter(|m| matches!(m.state, Liveness::Alive | Liveness::Suspect))
            .map(|m| m.id)
            .chain([self.id])
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

/// What a caller asks for.
#[derive(Clone, Copy, Debug)]
struct Call<'a> {
    name: &'a str,
    elem: Elem,
    len: u64,
    op: ReduceOp,
}
