//! One large collective call from the caller's side: the operation number, the ready to
//! the planner, the plans of each attempt run until one commits, the report.

use super::comm::Comm;
use super::routes::{self, Pieces};
use super::watch::{BulkPhase, BulkWatch};
use super::{BulkOptions, BulkReport, Call, exec, planner, spread, value};
use crate::api::{Node, NodeError};
use crate::proto::bulk::paths::Direction;
use crate::proto::bulk::{Algorithm, Control, MAX_ATTEMPTS, attempt_operation, control, operation};
use crate::proto::{Liveness, NodeId};
use bytes::Bytes;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tracing::debug;

/// What is being run.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Job<'a> {
    Reduce(Call),
    Route {
        direction: Direction,
        root: NodeId,
        /// This caller's piece (gather).
        len: u64,
        /// The root's pieces' sizes (scatter, at the root).
        sizes: Option<&'a HashMap<NodeId, u64>>,
    },
    /// An allgather; this caller's piece's length.
    Allgather {
        len: u64,
    },
    /// A value reduce (allreduce: no root).
    Value {
        root: Option<NodeId>,
    },
}

impl Job<'_> {
    /// The ready this caller sends.
    fn ready(&self, options: &BulkOptions) -> Control {
        match *self {
            Job::Reduce(c) => Control::Ready {
                len: c.len,
                elem: c.elem,
                op: c.op,
                algorithm: options.algorithm,
                groups: options.groups.clone(),
                root: c.root,
            },
            Job::Route {
                direction,
                root,
                len,
                ..
            } => Control::ReadyRoute {
                direction,
                root,
                len,
            },
            Job::Allgather { len } => Control::ReadyAllgather { len },
            Job::Value { root } => Control::ReadyValue { root },
        }
    }
}

/// What a caller brings.
pub(crate) enum Input<'a> {
    Vector(&'a [u8]),
    Pieces(Pieces<'a>),
    /// An encoded value and how two encoded values combine.
    Value {
        own: &'a Bytes,
        combine: value::Combine<'a>,
    },
}

/// What a caller gets.
pub(crate) enum Output {
    Vector(Vec<u8>),
    Pieces(Vec<(NodeId, Bytes)>),
    /// The encoded result, where this node gets one.
    Value(Option<Bytes>),
}

/// What the report says of the committed attempt.
struct Summary {
    members: Vec<NodeId>,
    missing: Vec<NodeId>,
    algorithm: Algorithm,
    predicted_s: f64,
    inside: Vec<crate::proto::bulk::Inside>,
    relayed: bool,
}

impl Summary {
    fn of(members: &[NodeId], missing: &[NodeId], algorithm: Algorithm, predicted_s: f64) -> Self {
        Summary {
            members: members.to_vec(),
            missing: missing.to_vec(),
            algorithm,
            predicted_s,
            inside: Vec::new(),
            relayed: false,
        }
    }
}

impl Node {
    pub(crate) async fn run_bulk(
        &self,
        name: &str,
        job: Job<'_>,
        input: Input<'_>,
        options: BulkOptions,
    ) -> Result<(Output, BulkReport), NodeError> {
        if self.is_stopped() {
            return Err(NodeError::Stopped);
        }
        let fits = match job {
            Job::Reduce(_) => &Algorithm::ALLREDUCE[..],
            Job::Route { .. } => &Algorithm::ROUTED[..],
            Job::Allgather { .. } => &Algorithm::ALLGATHER[..],
            Job::Value { .. } => &[Algorithm::Hierarchical][..],
        };
        if let Some(a) = options.algorithm.filter(|a| !fits.contains(a)) {
            return Err(NodeError::Bulk {
                name: name.into(),
                reason: format!("{} cannot run this collective", a.name()),
            });
        }
        if options
            .members
            .as_ref()
            .is_some_and(|m| !m.contains(&self.id))
        {
            return Err(NodeError::Bulk {
                name: name.into(),
                reason: "this node is not among the members the call lists".into(),
            });
        }
        let started = Instant::now();
        let number = {
            let mut calls = self.bulk.calls.lock().expect("not poisoned");
            let c = calls.entry(name.to_string()).or_default();
            *c += 1;
            *c - 1
        };
        let ctl = operation(name, number);
        let comm = Comm::new(self, ctl, name);
        let planner = match job {
            Job::Reduce(Call {
                root: Some(root), ..
            })
            | Job::Value { root: Some(root) } => root,
            Job::Reduce(_) | Job::Allgather { .. } | Job::Value { .. } => {
                *(self.participants(&options).first()).expect("the caller takes part")
            }
            Job::Route { root, .. } => root,
        };
        let ready = Bytes::from(job.ready(&options).encode());
        let watch = options.watch.clone();
        if let Some(w) = &watch {
            w.set_phase(BulkPhase::Waiting);
        }
        let work = async {
            comm.send(planner, control::ready(), ready).await?;
            let part = self.participate(&comm, planner, &input, watch.as_ref());
            if planner != self.id {
                return part
                    .await
                    .map(|(out, s, attempts)| (out, s, attempts, None));
            }
            let plan = planner::run(self, &comm, job, &options);
            let (planned, part) = tokio::join!(plan, part);
            let (out, s, attempts) = part?;
            Ok((out, s, attempts, planned.ok()))
        };
        let cancelled = async {
            match &watch {
                Some(w) => w.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            o = tokio::time::timeout(options.timeout, work) => Some(o),
            () = cancelled => None,
        };
        self.bulk.mailbox.forget(ctl);
        let Some(outcome) = outcome else {
            let w = watch.as_ref().expect("only a watched call is cancelled");
            // A planner's own attempt may be one ahead of what this node followed.
            for a in 0..=w.attempt() + 1 {
                self.bulk.mailbox.forget(attempt_operation(ctl, a));
            }
            w.set_phase(BulkPhase::Cancelled);
            if !w.committed() {
                self.tell_cancelled(ctl, name, planner, w.attempt());
            }
            return Err(comm.error("cancelled by this caller"));
        };
        let outcome = outcome
            .map_err(|_| comm.error(format!("not done within {:?}", options.timeout)))
            .and_then(|r| r);
        if let Some(w) = &watch {
            w.set_phase(match outcome {
                Ok(_) => BulkPhase::Finished,
                Err(_) => BulkPhase::Failed,
            });
        }
        let (out, s, attempts, planned) = outcome?;
        let report = BulkReport {
            contributors: s.members,
            missing: s.missing,
            algorithm: s.algorithm,
            // A planner's figure: any number may arrive, NaN included.
            predicted: Duration::try_from_secs_f64(s.predicted_s).unwrap_or_default(),
            elapsed: started.elapsed(),
            attempts: planned.unwrap_or(attempts),
            inside: s.inside,
            relayed: s.relayed,
        };
        Ok((out, report))
    }

    /// Waits for the plans of `planner` and runs them until one commits.
    async fn participate(
        &self,
        ctl: &Comm<'_>,
        planner: NodeId,
        input: &Input<'_>,
        watch: Option<&BulkWatch>,
    ) -> Result<(Output, Summary, u32), NodeError> {
        let mut msg = self.control(ctl, planner, control::plan(0)).await?;
        let mut attempts = 0;
        // The attempt the tag that brought `msg` was for.
        let mut due = 0u32;
        loop {
            let (attempt, summary) = match &msg {
                Control::Plan(p) => (
                    p.attempt,
                    Summary {
                        inside: match p.algorithm {
                            Algorithm::Clustered | Algorithm::Hierarchical => {
                                (0..p.groups.len()).map(|g| p.inside(g)).collect()
                            }
                            _ => Vec::new(),
                        },
                        relayed: !p.relays.is_empty(),
                        ..Summary::of(&p.members, &p.missing, p.algorithm, p.predicted_s)
                    },
                ),
                Control::RoutePlan(p) => (
                    p.attempt,
                    Summary::of(&p.members, &p.missing, p.algorithm, p.predicted_s),
                ),
                Control::SpreadPlan(p) => (
                    p.attempt,
                    Summary {
                        inside: p.inside.clone(),
                        ..Summary::of(&p.members, &p.missing, p.algorithm, p.predicted_s)
                    },
                ),
                Control::ValuePlan(p) => (
                    p.attempt,
                    Summary::of(
                        &p.members,
                        &p.missing,
                        Algorithm::Hierarchical,
                        p.predicted_s,
                    ),
                ),
                Control::Refused(reason) => return Err(ctl.error(reason)),
                other => return Err(ctl.error(format!("unexpected {other:?}"))),
            };
            if attempt != due || attempt >= MAX_ATTEMPTS {
                return Err(ctl.error(format!("a plan for attempt {attempt} where {due} was due")));
            }
            // Whatever comes next comes under the next attempt's tag.
            due = attempt + 1;
            attempts += 1;
            if !summary.members.contains(&self.id) {
                return Err(ctl.error("left out of the operation (not ready in time)"));
            }
            let checked = match &msg {
                Control::Plan(p) => p.check(self.id),
                Control::RoutePlan(p) => p.check(self.id),
                Control::SpreadPlan(p) => p.check(self.id),
                Control::ValuePlan(p) => p.check(self.id),
                _ => Ok(()),
            };
            if let Err(e) = checked {
                let failed = Bytes::from(
                    Control::Failed {
                        attempt,
                        reason: e.to_string(),
                    }
                    .encode(),
                );
                let _ = ctl.send(planner, control::done(attempt), failed).await;
                return Err(ctl.error(e));
            }
            if let Some(w) = watch {
                w.start_attempt(attempt);
            }
            let data =
                Comm::new(self, attempt_operation(ctl.op, attempt), ctl.name()).watched(watch);
            let next = self.control(ctl, planner, control::plan(attempt + 1));
            tokio::pin!(next);
            let ran = tokio::select! {
                r = run_plan(&data, &msg, input) => r,
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
            if let Some(w) = watch.filter(|_| ran.is_ok()) {
                w.set_phase(BulkPhase::Committing);
            }
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
                    return Ok((out, summary, attempts));
                }
                m = &mut next => {
                    self.bulk.mailbox.forget(data.op);
                    msg = m?;
                }
            }
        }
    }

    /// Tells the others that this caller cancelled operation `ctl`, in the background: the
    /// planner stops it for everyone; a planner that cancelled tells every member itself.
    fn tell_cancelled(&self, ctl: u64, name: &str, planner: NodeId, attempt: u32) {
        let node = self.clone();
        let name = name.to_string();
        tokio::spawn(async move {
            let comm = Comm::new(&node, ctl, &name);
            let wait = Duration::from_secs(5);
            if planner != node.id {
                let msg = Bytes::from(Control::Cancelled.encode());
                let _ =
                    tokio::time::timeout(wait, comm.send(planner, control::cancel(), msg)).await;
                return;
            }
            let why = format!("cancelled by its planner {}", node.id.short());
            let msg = Bytes::from(Control::Refused(why).encode());
            let others: Vec<NodeId> = (node.live_members().into_iter())
                .filter(|m| *m != node.id)
                .collect();
            let sends = others.iter().flat_map(|m| {
                // This node's own view of the attempt may lag the planner's by one.
                [attempt, attempt + 1, attempt + 2]
                    .map(control::plan)
                    .map(|tag| tokio::time::timeout(wait, comm.send(*m, tag, msg.clone())))
            });
            futures::future::join_all(sends).await;
        });
    }

    /// The control message `tag` from `from`; an error if `from` is lost first.
    pub(super) async fn control(
        &self,
        comm: &Comm<'_>,
        from: NodeId,
        tag: u32,
    ) -> Result<Control, NodeError> {
        tokio::select! {
            got = comm.recv(from, tag) => {
                Control::decode(&got?).map_err(|e| comm.error(format!("bad control message: {e}")))
            }
            () = self.lost(from) => Err(comm.error(format!("{} was lost", from.short()))),
        }
    }

    /// Returns once `id` is no longer a live member.
    async fn lost(&self, id: NodeId) {
        while self.is_live(id) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether `id` is a live member (nobody is, once this node stopped).
    pub(crate) fn is_live(&self, id: NodeId) -> bool {
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

    /// Who takes part in a call with `options`: the live members (this node included),
    /// or those of them in [`BulkOptions::members`]; sorted.
    pub(super) fn participants(&self, options: &BulkOptions) -> Vec<NodeId> {
        let mut all = self.live_members();
        if let Some(m) = &options.members {
            all.retain(|x| m.contains(x));
        }
        all
    }

    /// Live members and this node, sorted.
    pub(super) fn live_members(&self) -> Vec<NodeId> {
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

/// Runs this node's part of the plan in `msg`.
async fn run_plan(data: &Comm<'_>, msg: &Control, input: &Input<'_>) -> Result<Output, NodeError> {
    match (msg, input) {
        (Control::Plan(p), Input::Vector(v)) => exec::run(data, p, v).await.map(Output::Vector),
        (Control::RoutePlan(p), Input::Pieces(pieces)) => {
            routes::run(data, p, pieces).await.map(Output::Pieces)
        }
        (Control::SpreadPlan(p), Input::Pieces(Pieces::Own(own))) => {
            spread::run(data, p, own).await.map(Output::Pieces)
        }
        (Control::ValuePlan(p), Input::Value { own, combine }) => {
            value::run(data, p, own, *combine).await.map(Output::Value)
        }
        _ => Err(data.error("the plan is for another kind of operation")),
    }
}
