//! Running one participant's part of a plan: every chunk (or ring step, or tree edge) as
//! its own future, all polled together, so chunks flow through the chains, across the
//! clusters and back while later ones are still being summed (pipelining).

use super::comm::{Comm, Payload};
use crate::api::NodeError;
use crate::proto::bulk::route::{self, Chunk};
use crate::proto::bulk::{Algorithm, BulkPlan, Phase, combine::combine, tag};
use bytes::Bytes;
use futures::future::try_join_all;
use std::sync::Mutex;

/// This node's result of `plan`, given its own vector's bytes (borrowed from the caller:
/// the result is a second copy, and the transfers copy only what they move).
pub async fn run(comm: &Comm<'_>, plan: &BulkPlan, input: &[u8]) -> Result<Vec<u8>, NodeError> {
    let bytes = plan.len as usize * plan.elem.size();
    if input.len() != bytes {
        return Err(comm.error(format!(
            "this node's vector has {} bytes, the plan {bytes}",
            input.len()
        )));
    }
    match plan.algorithm {
        Algorithm::Clustered | Algorithm::Hierarchical => grouped(comm, plan, input).await,
        Algorithm::Ring => ring(comm, plan, input).await,
        Algorithm::Tree => tree(comm, plan, input).await,
        Algorithm::Relayed | Algorithm::Direct => Err(comm.error("not an allreduce algorithm")),
    }
}

fn add(comm: &Comm<'_>, plan: &BulkPlan, acc: &mut [u8], other: &[u8]) -> Result<(), NodeError> {
    combine(plan.elem, plan.op, acc, other).map_err(|e| comm.error(e))
}

async fn grouped(comm: &Comm<'_>, plan: &BulkPlan, input: &[u8]) -> Result<Vec<u8>, NodeError> {
    let size = plan.elem.size();
    let chunks = route::chunks(plan);
    comm.parts(chunks.len());
    // Each chunk's result is written in as it comes and its bytes let go, so the whole
    // vector is never held a third time. A reduce's non-root gets nothing back: its
    // vector stays as it was.
    let out = Mutex::new(input.to_vec());
    let parts = chunks.iter().map(|c| {
        comm.part(async {
            if let Some(bytes) = chunk(comm, plan, input, c).await? {
                let at = c.start as usize * size;
                out.lock().expect("not poisoned")[at..at + bytes.len()].copy_from_slice(&bytes);
            }
            Ok(())
        })
    });
    try_join_all(parts).await?;
    Ok(out.into_inner().expect("not poisoned"))
}

/// One chunk: along the reduce chain or tree, across clusters if this node is the
/// gateway, back along the gather chain or tree (a reduce: to the root alone). Returns
/// the chunk's result, if this node gets one.
async fn chunk(
    comm: &Comm<'_>,
    plan: &BulkPlan,
    input: &[u8],
    c: &Chunk,
) -> Result<Option<Bytes>, NodeError> {
    let r = route::chunk_route(plan, comm.me(), c)
        .ok_or_else(|| comm.error("this node is not in the plan"))?;
    let size = plan.elem.size();
    let range = c.start as usize * size..(c.start + c.len) as usize * size;
    let n = c.index;
    let wide = tag(Phase::ReduceWide, n);
    // A relayed plan's gateway that combines other clusters' partials: an owner for the
    // result, a relay to pass them on.
    let combines = !plan.relays.is_empty() && !r.partials_from.is_empty();
    let relaying = combines && !r.owner;
    // This cluster's partial: along the chain, then (gateway) out to the owners.
    let own_partial = async {
        let mut partial = Payload::Borrowed(&input[range.clone()]);
        if !r.reduce_from.is_empty() {
            let from = r.reduce_from.iter();
            let got = try_join_all(from.map(|f| comm.recv(*f, tag(Phase::ReduceChain, n)))).await?;
            let mut acc = input[range.clone()].to_vec();
            for g in got {
                add(comm, plan, &mut acc, &g)?;
            }
            partial = Payload::Shared(Bytes::from(acc));
        }
        // A relay sends once the partials it combines are in (below).
        if r.gateway() && !relaying {
            comm.send_all(&r.partial_to, wide, partial.clone()).await?;
        }
        Ok::<_, NodeError>(partial)
    };
    // A gateway waits for the other clusters' partials from the start, beside its own:
    // those that come first are claimed at once, not held as unclaimed transfers.
    let others = try_join_all(r.partials_from.iter().map(|p| comm.recv(*p, wide)));
    let (mut partial, got) = futures::try_join!(own_partial, others)?;
    if combines {
        // Its cluster's partial first, then those of the clusters below it in the
        // listed order.
        let mut acc = partial.as_slice().to_vec();
        for g in &got {
            add(comm, plan, &mut acc, g)?;
        }
        partial = Payload::Shared(Bytes::from(acc));
        if relaying {
            comm.send_all(&r.partial_to, wide, partial.clone()).await?;
        }
    }
    let want = range.len();
    let result = if let Some(to) = r.reduce_to {
        comm.send(to, tag(Phase::ReduceChain, n), partial).await?;
        match (r.gather_from, r.result_from) {
            (Some(from), _) => Some(comm.recv(from, tag(Phase::GatherChain, n)).await?),
            // A reduce's root inside a chain: the owner sends it the result.
            (None, Some(from)) => Some(comm.recv(from, tag(Phase::GatherWide, n)).await?),
            (None, None) => None,
        }
    } else {
        let result = if let Some(from) = r.result_from {
            Some(comm.recv(from, tag(Phase::GatherWide, n)).await?)
        } else if r.owner && !plan.relays.is_empty() {
            Some(partial.clone().into_bytes())
        } else if r.owner {
            // Combined in cluster order, whoever owns the chunk: every owner of a
            // hierarchical plan then gets the same bits (float sums depend on the order).
            let mut parts = got.into_iter();
            let mut acc: Option<Vec<u8>> = None;
            for g in 0..plan.groups.len() {
                let next = if g == r.group {
                    partial.clone()
                } else {
                    Payload::Shared(
                        parts
                            .next()
                            .ok_or_else(|| comm.error("a partial is missing"))?,
                    )
                };
                match acc.as_mut() {
                    None => acc = Some(next.as_slice().to_vec()),
                    Some(a) => add(comm, plan, a, next.as_slice())?,
                }
            }
            Some(Bytes::from(acc.unwrap_or_default()))
        } else {
            None
        };
        if let Some(result) = &result {
            comm.send_all(&r.result_to, tag(Phase::GatherWide, n), result)
                .await?;
        }
        // An owner that is not a reduce's root keeps nothing.
        result.filter(|_| plan.root.is_none_or(|root| root == comm.me()))
    };
    let Some(result) = result else {
        return Ok(None);
    };
    if result.len() != want {
        return Err(comm.error("a result chunk of the wrong length"));
    }
    comm.send_all(&r.gather_to, tag(Phase::GatherChain, n), &result)
        .await?;
    Ok(Some(result))
}

async fn ring(comm: &Comm<'_>, plan: &BulkPlan, input: &[u8]) -> Result<Vec<u8>, NodeError> {
    let (i, prev, next) =
        route::ring(plan, comm.me()).ok_or_else(|| comm.error("this node is not in the plan"))?;
    let n = plan.members.len();
    let size = plan.elem.size();
    let steps = n.saturating_sub(1);
    comm.parts(if plan.root.is_some() {
        steps + 1
    } else {
        2 * steps
    });
    let seg = |s: usize| {
        let (a, len) = route::segment(plan.len, n, s % n);
        a as usize * size..(a + len) as usize * size
    };
    let reduce_scatter = async {
        let mut acc = input.to_vec();
        for step in 0..n.saturating_sub(1) {
            let out = Bytes::copy_from_slice(&acc[seg(i + n - step)]);
            let t = tag(Phase::RingReduce, step as u32);
            let ((), got) = futures::try_join!(comm.send(next, t, out), comm.recv(prev, t))?;
            add(comm, plan, &mut acc[seg(i + 2 * n - step - 1)], &got)?;
            comm.part(async { Ok(()) }).await?;
        }
        Ok::<_, NodeError>(acc)
    };
    let gather_to = tag(Phase::RingGather, 0);
    let mut acc = match plan.root {
        // A reduce's root takes the others' reduced segments while it runs its own steps:
        // waiting for them from the start keeps them out of the mailbox's unclaimed bytes.
        Some(root) if root == comm.me() => {
            let others = (0..n).filter(|j| *j != i);
            let gather = try_join_all(others.map(|j| async move {
                let bytes = comm.recv(plan.members[j], gather_to).await?;
                Ok::<_, NodeError>((j, bytes))
            }));
            let (mut acc, got) = futures::try_join!(reduce_scatter, gather)?;
            for (j, bytes) in got {
                let range = seg(j + 1);
                if bytes.len() != range.len() {
                    return Err(comm.error("a ring segment of the wrong length"));
                }
                acc[range].copy_from_slice(&bytes);
            }
            comm.part(async { Ok(()) }).await?;
            return Ok(acc);
        }
        // A reduce elsewhere: this member's reduced segment (i + 1) to the root.
        Some(root) => {
            let acc = reduce_scatter.await?;
            let mine = Bytes::copy_from_slice(&acc[seg(i + 1)]);
            comm.part(comm.send(root, gather_to, mine)).await?;
            return Ok(input.to_vec());
        }
        None => reduce_scatter.await?,
    };
    for step in 0..n.saturating_sub(1) {
        let out = Bytes::copy_from_slice(&acc[seg(i + 1 + n - step)]);
        let t = tag(Phase::RingGather, step as u32);
        let ((), got) = futures::try_join!(comm.send(next, t, out), comm.recv(prev, t))?;
        let range = seg(i + n - step);
        if got.len() != range.len() {
            return Err(comm.error("a ring segment of the wrong length"));
        }
        acc[range].copy_from_slice(&got);
        comm.part(async { Ok(()) }).await?;
    }
    Ok(acc)
}

async fn tree(comm: &Comm<'_>, plan: &BulkPlan, input: &[u8]) -> Result<Vec<u8>, NodeError> {
    let (parent, children) =
        route::tree(plan, comm.me()).ok_or_else(|| comm.error("this node is not in the plan"))?;
    let up = tag(Phase::TreeUp, 0);
    let down = tag(Phase::TreeDown, 0);
    comm.parts(1);
    let got = try_join_all(children.iter().map(|c| comm.recv(*c, up))).await?;
    let mut acc = input.to_vec();
    for g in got {
        add(comm, plan, &mut acc, &g)?;
    }
    let result = match parent {
        Some(p) if plan.root.is_some() => {
            // A reduce: the subtree's sum goes up, nothing comes down.
            comm.part(comm.send(p, up, Bytes::from(acc))).await?;
            return Ok(input.to_vec());
        }
        Some(p) => {
            comm.send(p, up, Bytes::from(acc)).await?;
            comm.recv(p, down).await?
        }
        None => Bytes::from(acc),
    };
    if result.len() != input.len() {
        return Err(comm.error("a result of the wrong length"));
    }
    if plan.root.is_none() {
        comm.send_all(&children, down, &result).await?;
    }
    comm.part(async { Ok(()) }).await?;
    Ok(Vec::from(result))
}
