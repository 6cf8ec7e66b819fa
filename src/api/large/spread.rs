//! Running one participant's part of an allgather: every chunk of every piece is a future
//! (take it from this node's own piece or from its parent in the chunk's tree, pass it to
//! its children), all polled together.

use super::comm::Comm;
use crate::api::NodeError;
use crate::proto::NodeId;
use crate::proto::bulk::spread::SpreadPlan;
use crate::proto::bulk::{Phase, tag};
use bytes::{Bytes, BytesMut};
use futures::future::try_join_all;

/// Every member's piece, in id order, given this node's own.
pub async fn run(
    comm: &Comm<'_>,
    plan: &SpreadPlan,
    own: &Bytes,
) -> Result<Vec<(NodeId, Bytes)>, NodeError> {
    let me = plan
        .members
        .binary_search(&comm.me())
        .map_err(|_| comm.error("not in the plan"))? as u32;
    if own.len() as u64 != plan.sizes[me as usize] {
        return Err(comm.error(format!(
            "this node's piece has {} bytes, the plan {}",
            own.len(),
            plan.sizes[me as usize]
        )));
    }
    let mut hops = Vec::new();
    for m in 0..plan.members.len() {
        if m == me as usize {
            continue;
        }
        for (k, (number, _, len)) in plan.chunks(m).enumerate() {
            let edges = &plan.trees[m][k];
            let parent = edges.iter().find(|(_, b)| *b == me).map(|(a, _)| *a);
            let children: Vec<NodeId> = (edges.iter())
                .filter(|(a, _)| *a == me)
                .map(|(_, b)| plan.members[*b as usize])
                .collect();
            let parent = parent.ok_or_else(|| comm.error("a chunk's tree misses this node"))?;
            hops.push((m, number, len, plan.members[parent as usize], children));
        }
    }
    // This node's own chunks: from its piece to its children.
    let own_sends = plan
        .chunks(me as usize)
        .enumerate()
        .map(|(k, (number, at, len))| {
            let children: Vec<NodeId> = (plan.trees[me as usize][k].iter())
                .filter(|(a, _)| *a == me)
                .map(|(_, b)| plan.members[*b as usize])
                .collect();
            let bytes = own.slice(at as usize..(at + len) as usize);
            comm.part(async move {
                comm.send_all(&children, tag(Phase::Spread, number), &bytes)
                    .await
            })
        });
    comm.parts(hops.len() + plan.trees[me as usize].len());
    let relayed = try_join_all(hops.into_iter().map(|(m, number, len, parent, children)| {
        comm.part(async move {
            let t = tag(Phase::Spread, number);
            let bytes = comm.recv(parent, t).await?;
            if bytes.len() as u64 != len {
                return Err(comm.error("a chunk of the wrong length"));
            }
            comm.send_all(&children, t, &bytes).await?;
            Ok::<_, NodeError>((m, bytes))
        })
    }));
    let (_, arrived) = futures::try_join!(try_join_all(own_sends), relayed)?;
    // Chunks arrive in the order they were listed: piece by piece, chunk by chunk.
    let mut pieces: Vec<BytesMut> = (plan.sizes.iter())
        .map(|s| BytesMut::with_capacity(*s as usize))
        .collect();
    for (m, bytes) in arrived {
        pieces[m].extend_from_slice(&bytes);
    }
    Ok((plan.members.iter().zip(pieces).enumerate())
        .map(|(m, (id, piece))| {
            let piece = if m == me as usize {
                own.clone()
            } else {
                piece.freeze()
            };
            (*id, piece)
        })
        .collect())
}
