//! Small pure functions over answers, budgets and scatter items.

use crate::proto::NodeId;
use crate::proto::collective::{DeliveryKind, PART_LIMIT};
use crate::proto::message::{Purpose, UpPart};

/// Key under which a node publishes its arrival at barrier `name`.
pub(super) fn barrier_key(name: &str) -> String {
    format!("{}{name}", crate::proto::collective::BARRIER_KEY_PREFIX)
}

pub(super) fn delivery_kind(p: Purpose) -> DeliveryKind {
    match p {
        Purpose::Data => DeliveryKind::Broadcast,
        Purpose::AllReduce { .. } => DeliveryKind::AllReduce,
        Purpose::AllGather { .. } => DeliveryKind::AllGather,
        Purpose::BarrierRelease { .. } => DeliveryKind::Barrier,
    }
}

pub(super) fn reached_only(me: NodeId) -> UpPart {
    UpPart {
        reached: vec![me],
        ..UpPart::default()
    }
}

pub(super) fn is_empty(p: &UpPart) -> bool {
    p.reached.is_empty() && p.declined.is_empty() && p.items.is_empty() && p.contributors.is_empty()
}

/// The time a child gets to answer: a little less than ours, minus the round trip to it.
pub(super) fn child_budget(budget_us: u32, rtt_us: Option<u32>) -> u32 {
    let b = (budget_us as u64 * 9 / 10).saturating_sub(rtt_us.unwrap_or(0) as u64);
    b.max(1_000) as u32
}

/// Splits scatter items into messages of bounded size.
pub(super) fn chunk_items(items: Vec<(NodeId, Vec<u8>)>) -> Vec<Vec<(NodeId, Vec<u8>)>> {
    let mut out = vec![Vec::new()];
    let mut size = 0;
    for (d, v) in items {
        if size + v.len() + 24 > PART_LIMIT && !out.last().expect("one").is_empty() {
            out.push(Vec::new());
            size = 0;
        }
        size += v.len() + 24;
        out.last_mut().expect("one").push((d, v));
    }
    out
}
