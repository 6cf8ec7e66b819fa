//! The planner's side: the rendezvous, the plan of each attempt, watching the
//! participants, and the commit.

use super::BulkOptions;
use super::comm::Comm;
use super::network::network;
use super::session::Job;
use crate::api::{Node, NodeError};
use crate::proto::NodeId;
use crate::proto::bulk::check::MAX_BYTES;
use crate::proto::bulk::model::Network;
use crate::proto::bulk::plans::Ask;
use crate::proto::bulk::{Algorithm, BulkPlan, Control, Inside, control, model, relay, spread};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tracing::{debug, info};

/// How long a control message may take to reach a participant.
const CONTROL_SEND: Duration = Duration::from_secs(5);
/// How often the planner looks for lost participants.
const WATCH: Duration = Duration::from_millis(100);
/// How long a reported failure may wait for the failure detector to name a lost member
/// before the operation is given up.
const FAILURE_GRACE: Duration = Duration::from_secs(5);

/// Plans and watches the operation; returns the attempts it made. On failure every
/// participant still waiting is told why; so they are when a participant cancels.
pub async fn run(
    node: &Node,
    comm: &Comm<'_>,
    job: Job<'_>,
    options: &BulkOptions,
) -> Result<u32, NodeError> {
    let expected = node.participants(options);
    let attempt = AtomicU32::new(0);
    let planned = plan_and_watch(node, comm, job, options, &expected, &attempt);
    let cancelled = async {
        let mut asked: FuturesUnordered<_> = (expected.iter())
            .filter(|m| **m != node.id)
            .map(|m| async move { (*m, comm.recv(*m, control::cancel()).await) })
            .collect();
        while let Some((m, got)) = asked.next().await {
            if got.is_ok() {
                return m;
            }
        }
        std::future::pending().await
    };
    let done = tokio::select! {
        r = planned => r,
        by = cancelled => {
            let why = format!("cancelled by {}", by.short());
            info!(by = %by.short(), "large collective cancelled by a participant");
            let a = attempt.load(Ordering::Relaxed);
            let msg = Bytes::from(Control::Refused(why.clone()).encode());
            let others: Vec<NodeId> = expected.iter().filter(|m| **m != by).copied().collect();
            let tells = [a, a + 1].map(|a| tell(comm, &others, control::plan(a), &msg));
            futures::future::join_all(tells).await;
            Err(comm.error(why))
        }
    };
    // Every participant is done: the commit goes out whole, in a task of its own, so
    // neither a late cancel nor the end of this call cuts it halfway (a cancel after this
    // point loses: the others commit).
    let (attempt, members) = done?;
    if let Some(w) = &options.watch {
        w.set_committed();
    }
    let (node, op, name) = (node.clone(), comm.op, comm.name().to_string());
    tokio::spawn(async move {
        let comm = Comm::new(&node, op, &name);
        let commit = Bytes::from(Control::Commit { attempt }.encode());
        tell(&comm, &members, control::commit(attempt), &commit).await;
    });
    Ok(attempt + 1)
}

/// The rendezvous, then each attempt planned and watched until every participant is
/// done with one: that attempt and its participants, to commit.
async fn plan_and_watch(
    node: &Node,
    comm: &Comm<'_>,
    job: Job<'_>,
    options: &BulkOptions,
    expected: &[NodeId],
    current: &AtomicU32,
) -> Result<(u32, Vec<NodeId>), NodeError> {
    let expected = expected.to_vec();
    let (mut members, mut refused, lens) = rendezvous(node, comm, job, options, &expected).await;
    // Expected callers that did not make it are told, so they do not wait for a plan.
    for m in &expected {
        if !members.contains(m) && !refused.iter().any(|(r, _)| r == m) && node.is_live(*m) {
            refused.push((*m, "left out of the operation (not ready in time)".into()));
        }
    }
    for (m, why) in &refused {
        let msg = Bytes::from(Control::Refused(why.clone()).encode());
        tell(comm, &[*m], control::plan(0), &msg).await;
    }
    if !members.contains(&node.id) {
        let e = comm.error("the planner's own call was not ready in time");
        let msg = Bytes::from(Control::Refused(e.to_string()).encode());
        tell(comm, &members, control::plan(0), &msg).await;
        return Err(e);
    }
    let mut attempt = 0;
    loop {
        current.store(attempt, Ordering::Relaxed);
        let mut missing: Vec<NodeId> = expected
            .iter()
            .filter(|m| !members.contains(m))
            .copied()
            .collect();
        if let Job::Route { sizes: Some(s), .. } = job {
            // Pieces for members that are not taking part are missing too.
            missing.extend(s.keys().filter(|m| !members.contains(m)));
            missing.sort();
            missing.dedup();
        }
        let net = network(node, &members, options.groups.as_deref()).await;
        let made = make_plan(node, job, options, &net, &members, missing, &lens, attempt);
        let (collective, bytes, plan, algorithm) = match made {
            Ok(m) => m,
            Err(e) => {
                let msg = Bytes::from(Control::Refused(e.to_string()).encode());
                tell(comm, &members, control::plan(attempt), &msg).await;
                return Err(e);
            }
        };
        debug!(
            attempt,
            collective,
            algorithm = algorithm.name(),
            participants = members.len(),
            bytes,
            "large collective planned"
        );
        let started = Instant::now();
        let msg = Bytes::from(plan.encode());
        let unreached = tell(comm, &members, control::plan(attempt), &msg).await;
        let watched = if unreached.is_empty() {
            watch(node, comm, &members, attempt).await
        } else {
            // A participant the plan cannot reach is as good as lost.
            Watched::Lost(unreached)
        };
        match watched {
            Watched::Done => {
                let elapsed = started.elapsed().as_secs_f64();
                if options.algorithm.is_none() {
                    let mut tuner = node.bulk.tuner.lock().expect("not poisoned");
                    tuner.record(collective, bytes, algorithm, elapsed);
                }
                return Ok((attempt, members));
            }
            Watched::Lost(lost) => {
                info!(
                    attempt,
                    lost = lost.len(),
                    "participants lost: trying again without them"
                );
                members.retain(|m| !lost.contains(m));
                attempt += 1;
                if !members.contains(&node.id) {
                    return Err(comm.error("the planner lost its own part"));
                }
            }
            Watched::Failed(reason) => {
                let msg = Bytes::from(Control::Refused(reason.clone()).encode());
                tell(comm, &members, control::plan(attempt + 1), &msg).await;
                return Err(comm.error(reason));
            }
        }
    }
}

/// Sends a control message to every one of `to` at once, each given [`CONTROL_SEND`]
/// (a crashed member must not hold the others up); returns those not reached.
async fn tell(comm: &Comm<'_>, to: &[NodeId], tag: u32, msg: &Bytes) -> Vec<NodeId> {
    let sends = to.iter().map(|m| async move {
        let sent = tokio::time::timeout(CONTROL_SEND, comm.send(*m, tag, msg.clone())).await;
        (*m, matches!(sent, Ok(Ok(()))))
    });
    let results = futures::future::join_all(sends).await;
    results
        .into_iter()
        .filter(|(_, ok)| !ok)
        .map(|(m, _)| m)
        .collect()
}

/// The plan of one attempt: (collective, bytes, the plan message, the algorithm).
#[allow(clippy::too_many_arguments)]
fn make_plan(
    node: &Node,
    job: Job<'_>,
    options: &BulkOptions,
    net: &Network,
    members: &[NodeId],
    missing: Vec<NodeId>,
    lens: &HashMap<NodeId, u64>,
    attempt: u32,
) -> Result<(&'static str, u64, Control, Algorithm), NodeError> {
    let sizes: Vec<u64> = (members.iter())
        .map(|m| match job {
            Job::Route { sizes: Some(s), .. } => s.get(m).copied().unwrap_or(0),
            _ => lens.get(m).copied().unwrap_or(0),
        })
        .collect();
    let ask = match job {
        Job::Reduce(call) => Ask::Reduce {
            len: call.len,
            elem: call.elem,
            op: call.op,
            root: call.root,
        },
        Job::Route { direction, .. } => Ask::Route {
            direction,
            root: node.id,
            sizes: &sizes,
        },
        Job::Allgather { .. } => Ask::Allgather { sizes: &sizes },
        Job::Value { root } => Ask::Value { root },
    };
    // Lengths come from every caller's ready: the plan is bounded before it is made.
    let total = match job {
        Job::Reduce(call) => call.len.checked_mul(call.elem.size() as u64),
        _ => sizes.iter().try_fold(0u64, |a, s| a.checked_add(*s)),
    };
    if total.is_none_or(|t| t > MAX_BYTES) {
        return Err(NodeError::Bulk {
            name: ask.collective().into(),
            reason: format!("more than {MAX_BYTES} bytes in all"),
        });
    }
    let (collective, bytes) = (ask.collective(), ask.bytes());
    let algorithm = match options.algorithm {
        Some(a) if ask.candidates().contains(&a) => a,
        Some(a) => {
            return Err(NodeError::Bulk {
                name: collective.into(),
                reason: format!("{} cannot run a {collective}", a.name()),
            });
        }
        None if ask.candidates().len() == 1 => ask.candidates()[0],
        None => {
            let p = ask.predict(net, members);
            let mut tuner = node.bulk.tuner.lock().expect("not poisoned");
            tuner.choose(collective, bytes, p)
        }
    };
    let mut plan = ask.plan(net, members, missing, algorithm, attempt);
    match (&mut plan, options.inside) {
        (Control::Plan(_), Some(Inside::Star)) => {
            return Err(NodeError::Bulk {
                name: collective.into(),
                reason: "a star inside is for allgathers: a reduction's gateway would take \
                         every member's partial"
                    .into(),
            });
        }
        (Control::Plan(p), Some(inside)) => p.inside = vec![inside; p.groups.len()],
        // Ours only: the other allgathers have a fixed shape.
        (Control::SpreadPlan(p), Some(inside)) if p.algorithm == Algorithm::Relayed => {
            let every = vec![inside; net.groups.len()];
            let forced = spread::plan_with(net, p.algorithm, &p.members, &p.sizes, &every);
            (p.chunk, p.trees, p.inside) = (forced.chunk, forced.trees, forced.inside);
            p.predicted_s = forced.seconds;
        }
        _ => {}
    }
    if let (Control::Plan(p), Some(relays)) = (&mut plan, options.relays) {
        force_relays(net, p, relays);
    }
    Ok((collective, bytes, plan, algorithm))
}

/// A clustered plan made to relay through third clusters (where there are three or more
/// to relay through) or to send every partial straight to its owner.
fn force_relays(net: &Network, p: &mut BulkPlan, relays: bool) {
    let k = net.groups.len();
    if p.algorithm != Algorithm::Clustered || relays != p.relays.is_empty() {
        return;
    }
    let root = (p.root).and_then(|id| net.groups.iter().position(|g| g.contains(&id)));
    if !relays {
        p.relays.clear();
        p.shares = model::split(p.len, &model::shares_to(net, root));
    } else if (3..=relay::MAX_CLUSTERS).contains(&k) {
        let planned = relay::plan(&net.wide_rates(), p.len, p.chunk, p.elem.size(), root);
        (p.shares, p.relays) = (planned.shares, planned.relays);
    }
}

/// Collects the callers' readies: the participants (sorted), the callers refused, and
/// each participant's piece length (gather).
async fn rendezvous(
    node: &Node,
    comm: &Comm<'_>,
    job: Job<'_>,
    options: &BulkOptions,
    expected: &[NodeId],
) -> (Vec<NodeId>, Vec<(NodeId, String)>, HashMap<NodeId, u64>) {
    let deadline = tokio::time::Instant::now() + options.rendezvous;
    let mut waiting: FuturesUnordered<_> = expected
        .iter()
        .map(|m| async move { (*m, comm.recv(*m, control::ready()).await) })
        .collect();
    let mut pending: Vec<NodeId> = expected.to_vec();
    let (mut members, mut refused, mut lens) = (Vec::new(), Vec::new(), HashMap::new());
    while !pending.is_empty() {
        tokio::select! {
            Some((m, got)) = waiting.next() => {
                pending.retain(|p| *p != m);
                let Some(ready) = got.ok().and_then(|b| Control::decode(&b).ok()) else {
                    refused.push((m, "an unreadable ready".to_string()));
                    continue;
                };
                match accepts(job, node.id, &ready) {
                    Ok(len) => {
                        members.push(m);
                        lens.insert(m, len);
                    }
                    Err(why) => refused.push((m, why)),
                }
            }
            () = tokio::time::sleep(WATCH) => pending.retain(|p| node.is_live(*p)),
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    if !pending.is_empty() {
        debug!(late = pending.len(), "rendezvous over without every member");
    }
    members.sort();
    (members, refused, lens)
}

/// Whether a caller's ready fits the planner's own call; its piece's length if so.
fn accepts(job: Job<'_>, me: NodeId, ready: &Control) -> Result<u64, String> {
    match (job, ready) {
        (
            Job::Reduce(call),
            Control::Ready {
                len,
                elem,
                op,
                root,
                ..
            },
        ) => {
            if *len == call.len && *elem == call.elem && *op == call.op && *root == call.root {
                Ok(0)
            } else {
                let what = |root: &Option<NodeId>| match root {
                    Some(r) => format!("a reduce to {}", r.short()),
                    None => "an allreduce".to_string(),
                };
                Err(format!(
                    "this node called {} with {len} x {elem:?} {op:?}, the planner {} with {} x {:?} {:?}",
                    what(root),
                    what(&call.root),
                    call.len,
                    call.elem,
                    call.op
                ))
            }
        }
        (
            Job::Route { direction, .. },
            Control::ReadyRoute {
                direction: d,
                root,
                len,
            },
        ) if *d == direction && *root == me => bounded(*len),
        (Job::Allgather { .. }, Control::ReadyAllgather { len }) => bounded(*len),
        (Job::Value { root }, Control::ReadyValue { root: r }) if *r == root => Ok(0),
        _ => Err("this node called another kind of operation under the same name".into()),
    }
}

/// A caller's piece length, if a plan may carry it.
fn bounded(len: u64) -> Result<u64, String> {
    match len <= MAX_BYTES {
        true => Ok(len),
        false => Err(format!("a piece of {len} bytes: more than {MAX_BYTES}")),
    }
}

enum Watched {
    Done,
    Lost(Vec<NodeId>),
    Failed(String),
}

/// Waits until every participant is done with `attempt`, one is lost, or one failed and no
/// loss explains it within [`FAILURE_GRACE`].
async fn watch(node: &Node, comm: &Comm<'_>, members: &[NodeId], attempt: u32) -> Watched {
    let mut waiting: FuturesUnordered<_> = members
        .iter()
        .map(|m| async move { comm.recv(*m, control::done(attempt)).await })
        .collect();
    let mut left = members.len();
    let mut failed: Option<(String, Instant)> = None;
    loop {
        let lost: Vec<NodeId> = members
            .iter()
            .filter(|m| !node.is_live(**m))
            .copied()
            .collect();
        if !lost.is_empty() {
            return Watched::Lost(lost);
        }
        if let Some((reason, at)) = &failed
            && at.elapsed() > FAILURE_GRACE
        {
            return Watched::Failed(reason.clone());
        }
        if left == 0 && failed.is_none() {
            return Watched::Done;
        }
        tokio::select! {
            Some(got) = waiting.next() => {
                left -= 1;
                match got.ok().and_then(|b| Control::decode(&b).ok()) {
                    Some(Control::Done { .. }) => {}
                    Some(Control::Failed { reason, .. }) => {
                        failed.get_or_insert((reason, Instant::now()));
                    }
                    _ => {
                        failed.get_or_insert(("a participant sent garbage".into(), Instant::now()));
                    }
                }
            }
            // Also once all answered and one failed: the grace runs out, or a loss shows.
            () = tokio::time::sleep(WATCH) => {}
        }
    }
}
