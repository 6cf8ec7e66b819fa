//! Running one participant's part of a scatter or gather: every chunk whose path passes
//! through this node is a future (take it from the source or the previous hop, pass it
//! to the next), all polled together.

use super::comm::Comm;
use crate::api::NodeError;
use crate::proto::NodeId;
use crate::proto::bulk::paths::Direction;
use crate::proto::bulk::{Phase, RoutePlan, tag};
use bytes::{Bytes, BytesMut};
use futures::future::try_join_all;
use std::collections::HashMap;

/// What this node starts with: the root's pieces (scatter) or its own piece (gather).
pub enum Pieces<'a> {
    /// Scatter at the root: a piece per destination.
    Scatter(&'a HashMap<NodeId, Bytes>),
    /// Gather: this node's own piece; scatter elsewhere: nothing.
    Own(&'a Bytes),
}

/// This node's result: its own piece (scatter) or, at a gather's root, every piece by
/// member in id order (empty elsewhere).
pub async fn run(
    comm: &Comm<'_>,
    plan: &RoutePlan,
    pieces: &Pieces<'_>,
) -> Result<Vec<(NodeId, Bytes)>, NodeError> {
    let me = comm.me();
    let m_me = plan
        .members
        .binary_search(&me)
        .map_err(|_| comm.error("not in the plan"))?;
    let r = plan
        .members
        .binary_search(&plan.root)
        .map_err(|_| comm.error("the root is not in the plan"))?;
    // The bytes member `m`'s piece starts as, at its source.
    let source = |m: usize| -> Result<Bytes, NodeError> {
        let got = match (plan.direction, pieces) {
            (Direction::Scatter, Pieces::Scatter(all)) => {
                all.get(&plan.members[m]).cloned().unwrap_or_default()
            }
            (Direction::Gather, Pieces::Own(own)) => (*own).clone(),
            _ => Bytes::new(),
        };
        if got.len() as u64 != plan.sizes[m] {
            return Err(comm.error(format!(
                "a piece of {} bytes where the plan has {}",
                got.len(),
                plan.sizes[m]
            )));
        }
        Ok(got)
    };
    let mut hops = Vec::new();
    for m in 0..plan.members.len() {
        for (k, (number, at, len)) in plan.chunks(m).enumerate() {
            let mut nodes: Vec<usize> = vec![if plan.direction == Direction::Scatter {
                r
            } else {
                m
            }];
            nodes.extend(plan.paths[m][k].iter().map(|i| *i as usize));
            nodes.push(if plan.direction == Direction::Scatter {
                m
            } else {
                r
            });
            if let Some(p) = nodes.iter().position(|n| *n == m_me) {
                hops.push((m, k, number, at, len, nodes, p));
            }
        }
    }
    comm.parts(hops.len());
    let moved = try_join_all(hops.into_iter().map(|(m, k, number, at, len, nodes, p)| {
        let source = &source;
        comm.part(async move {
            let t = tag(Phase::Route, number);
            let bytes = if p == 0 {
                source(m)?.slice(at as usize..(at + len) as usize)
            } else {
                comm.recv(plan.members[nodes[p - 1]], t).await?
            };
            if bytes.len() as u64 != len {
                return Err(comm.error("a chunk of the wrong length"));
            }
            let last = p + 1 == nodes.len();
            if !last {
                comm.send(plan.members[nodes[p + 1]], t, bytes.clone())
                    .await?;
            }
            Ok::<_, NodeError>(last.then_some((m, k, bytes)))
        })
    }))
    .await?;
    let mut arrived: HashMap<usize, Vec<(usize, Bytes)>> = HashMap::new();
    for (m, k, bytes) in moved.into_iter().flatten() {
        arrived.entry(m).or_default().push((k, bytes));
    }
    match plan.direction {
        Direction::Scatter if m_me == r => Ok(vec![(me, source(r)?)]),
        Direction::Scatter => Ok(vec![(me, assemble_from(&mut arrived, plan, m_me))]),
        Direction::Gather if m_me == r => {
            let mut all = Vec::new();
            for m in 0..plan.members.len() {
                let piece = if m == r {
                    source(r)?
                } else {
                    assemble_from(&mut arrived, plan, m)
                };
                all.push((plan.members[m], piece));
            }
            Ok(all)
        }
        Direction::Gather => Ok(Vec::new()),
    }
}

/// Member `m`'s piece from the chunks that arrived here.
fn assemble_from(
    arrived: &mut HashMap<usize, Vec<(usize, Bytes)>>,
    plan: &RoutePlan,
    m: usize,
) -> Bytes {
    let mut parts = arrived.remove(&m).unwrap_or_default();
    parts.sort_by_key(|(k, _)| *k);
    let mut out = BytesMut::with_capacity(plan.sizes[m] as usize);
    for (_, b) in parts {
        out.extend_from_slice(&b);
    }
    out.freeze()
}
