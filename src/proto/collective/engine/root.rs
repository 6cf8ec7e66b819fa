//! The root's side: merging answers, following progress, retrying directly, and the
//! final report.

use super::{Collectives, MAX_HOISTED, Origin, Own, Phase, Plan, Slot};
use crate::proto::collective::acc::Acc;
use crate::proto::collective::{
    BarrierOutcome, MAX_INLINE_PAYLOAD, OpKind, OpReport, Overlay, ReduceOutcome,
};
use crate::proto::message::{DownBody, OpId, Purpose, UpPart};
use crate::proto::{Event, NodeId, Time};
use std::collections::HashMap;

impl Collectives {
    pub(super) fn merge_at_origin(&mut self, now: Time, ov: &dyn Overlay, op: OpId, part: UpPart) {
        let Some(o) = self.origins.get_mut(&op) else {
            return;
        };
        let reducer = match &o.body {
            DownBody::Reduce { reducer, .. } => Some(reducer.clone()),
            _ => None,
        };
        let merged = o.acc.merge(part, reducer.as_ref(), &self.reducers);
        if !merged.refused.is_empty() {
            o.next_retry = o.next_retry.min(now);
        }
        self.progress(now, ov, op);
    }

    /// Whether `id` has given the root what it asked for.
    pub(super) fn accounted(o: &Origin, id: &NodeId) -> bool {
        match o.kind {
            OpKind::Broadcast | OpKind::Scatter => o.acc.reached.contains(id),
            OpKind::Gather | OpKind::Reduce => o.acc.answered(id),
        }
    }

    /// Completes, retries or waits, as the root's view of the operation says.
    pub(super) fn progress(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
        let me = self.me;
        let Some(o) = self.origins.get(&op) else {
            return;
        };
        if !o.tree_done && now < o.deadline {
            return;
        }
        let pending: Vec<NodeId> = o
            .expected
            .iter()
            .filter(|id| !Self::accounted(o, id) && (**id == me || ov.is_alive(id)))
            .copied()
            .collect();
        if pending.is_empty() || now >= o.deadline {
            return self.complete(now, ov, op);
        }
        if now < o.next_retry {
            let at = o.next_retry;
            return self.wake(at, op, Slot::Origin);
        }
        let gap = o.retry_gap;
        let budget = gap.min(o.deadline.saturating_since(now)).as_micros() as u32;
        let body = o.body.clone();
        let items: Vec<(NodeId, Option<Vec<u8>>)> = pending
            .iter()
            .map(|id| (*id, o.items.get(id).cloned()))
            .collect();
        for (id, item) in items {
            if id == me {
                continue;
            }
            let b = match (&body, item) {
                (DownBody::Scatter { .. }, Some(v)) => DownBody::Scatter {
                    items: vec![(id, v)],
                },
                (DownBody::Scatter { .. }, None) => continue,
                (b, _) => b.clone(),
            };
            self.send_down(id, op, budget, true, false, b);
        }
        let o = self.origins.get_mut(&op).expect("origin");
        o.next_retry = now + gap;
        let at = o.next_retry.min(o.deadline);
        self.wake(at, op, Slot::Origin);
    }

    pub(super) fn complete(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
        let me = self.me;
        let Some(o) = self.origins.remove(&op) else {
            return;
        };
        let missing: Vec<NodeId> = o
            .expected
            .iter()
            .filter(|id| !Self::accounted(&o, id))
            .copied()
            .collect();
        let reached: Vec<NodeId> = match o.kind {
            OpKind::Scatter => o
                .expected
                .iter()
                .filter(|id| o.acc.reached.contains(id))
                .copied()
                .collect(),
            _ => o.acc.reached.iter().copied().collect(),
        };
        let mut contributors: Vec<NodeId> = o.acc.contributors.iter().copied().collect();
        contributors.extend(o.acc.items.keys().copied());
        contributors.sort_unstable();
        let report = OpReport {
            op: Some(op),
            kind: Some(o.kind),
            purpose: Some(o.purpose),
            expected: o.expected.clone(),
            reached,
            missing: missing.clone(),
            unknown: o.unknown.clone(),
            contributors: contributors.clone(),
            declined: o.acc.declined.iter().copied().collect(),
            items: o.acc.items.iter().map(|(k, v)| (*k, v.clone())).collect(),
            value: o.acc.value.clone(),
            elapsed: now.saturating_since(o.started),
            error: None,
        };
        // Composite operations: spread the result with a broadcast of its own.
        let follow_up = match o.purpose {
            Purpose::Data => None,
            Purpose::AllReduce { .. } => postcard::to_allocvec(&ReduceOutcome {
                contributors: o.acc.contributors.iter().copied().collect(),
                value: o.acc.value.clone(),
            })
            .ok(),
            Purpose::AllGather { .. } => postcard::to_allocvec(&report.items).ok(),
            Purpose::BarrierRelease { .. } => {
                let mut missing = missing;
                missing.extend(o.acc.declined.iter().copied());
                missing.sort_unstable();
                postcard::to_allocvec(&BarrierOutcome {
                    name: o.barrier.clone().unwrap_or_default(),
                    missing,
                })
                .ok()
            }
        };
        self.events.push_back(Event::Report(Box::new(report)));
        if let Some(payload) = follow_up {
            let timeout = o.deadline.saturating_since(o.started);
            let nonce = op.nonce ^ 0x8000_0000_0000_0000;
            if payload.len() > MAX_INLINE_PAYLOAD {
                tracing::warn!(len = payload.len(), "composite result too large to spread");
            } else {
                let op2 = OpId { root: me, nonce };
                // The result goes to the members the first half expected.
                let members = match &o.group {
                    Some(g) => ov.group_members(g),
                    None => {
                        let mut m: Vec<NodeId> = ov.alive_members().to_vec();
                        m.push(me);
                        m.sort_unstable();
                        m
                    }
                };
                let body = DownBody::Broadcast {
                    payload,
                    purpose: o.purpose,
                };
                self.origins.insert(
                    op2,
                    Origin {
                        kind: OpKind::Broadcast,
                        purpose: o.purpose,
                        started: now,
                        deadline: now + timeout,
                        body: body.clone(),
                        expected: members,
                        unknown: Vec::new(),
                        items: HashMap::new(),
                        acc: Acc::default(),
                        tree_done: false,
                        next_retry: now + timeout / 2,
                        retry_gap: o.retry_gap,
                        barrier: None,
                        group: o.group.clone(),
                    },
                );
                self.wake(now + timeout, op2, Slot::Origin);
                let budget = (timeout / 2).as_micros().min(u32::MAX as u128) as u32;
                let plan = Plan {
                    group: o.group.clone(),
                    ..Plan::default()
                };
                self.accept_down(now, ov, me, op2, budget, false, false, plan, body);
            }
        }
    }

    /// The budget ran out: answer with what there is.
    pub(super) fn give_up(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
        let me = self.me;
        let Some(r) = self.relays.get_mut(&op) else {
            return;
        };
        if r.own == Own::Stream {
            // The payload did not arrive in time: not reached; the root retries directly.
            r.own = Own::None;
            r.direct_waiters.clear();
        }
        if r.own == Own::Pending {
            r.own = Own::Given(None);
            if r.phase == Phase::Collecting {
                r.acc.declined.insert(me);
            }
            for w in std::mem::take(&mut r.direct_waiters) {
                self.reply(
                    ov,
                    w,
                    op,
                    UpPart {
                        reached: vec![me],
                        declined: vec![me],
                        ..UpPart::default()
                    },
                );
            }
        }
        let Some(r) = self.relays.get_mut(&op) else {
            return;
        };
        if r.phase == Phase::AwaitMore {
            // The rest of the scatter never came: route what did.
            r.phase = Phase::Collecting;
            let items = std::mem::take(&mut r.pending_items);
            self.route_scatter(now, ov, op, 0, items);
        }
        if self
            .relays
            .get(&op)
            .is_some_and(|r| r.phase == Phase::Collecting)
        {
            self.finish(now, ov, op);
        }
    }

    pub(super) fn finish(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
        let Some(r) = self.relays.get_mut(&op) else {
            return;
        };
        r.phase = Phase::Done;
        r.waiting.clear();
        let mut acc = std::mem::take(&mut r.acc);
        let from = r.from;
        if r.entry && from != self.me {
            // The sender is in another cluster: this cluster's exits are of no use to it.
            acc.exits.clear();
        }
        if from == self.me {
            if let Some(o) = self.origins.get_mut(&op) {
                o.tree_done = true;
                o.next_retry = now;
            }
            let part = acc.to_part();
            return self.merge_at_origin(now, ov, op, part);
        }
        self.reply(ov, from, op, acc.to_part());
    }

    /// At a cluster entry, after a complete answer: remember the cluster's nodes below.
    pub(super) fn learn_local(&mut self, ov: &dyn Overlay, op: OpId) {
        let Some(r) = self.relays.get(&op) else {
            return;
        };
        if !r.entry || r.kind == OpKind::Scatter {
            return;
        }
        let local = |x: &NodeId| *x != self.me && ov.in_cluster(x);
        let pairs: Vec<(NodeId, NodeId)> = r
            .acc
            .exits
            .iter()
            .filter(|(p, f)| local(p) && !local(f) && *f != self.me)
            .copied()
            .collect();
        // Nodes with children outside first: the plan serves its set in order, and any
        // such child beyond what the entry sends to itself still waits for its parent.
        let mut set: Vec<NodeId> = pairs.iter().map(|(p, _)| *p).collect();
        set.dedup();
        let rest: Vec<NodeId> = (r.acc.reached.iter())
            .filter(|x| local(x) && !set.contains(x))
            .copied()
            .collect();
        set.extend(rest);
        self.local.insert(op.root, set);
        self.hoist
            .insert(op.root, pairs.into_iter().take(MAX_HOISTED).collect());
    }

    /// Answers the sender once the subtree is complete.
    pub(super) fn try_finish(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
        let ready = self.relays.get(&op).is_some_and(|r| {
            r.phase == Phase::Collecting
                && r.waiting.is_empty()
                && !matches!(r.own, Own::Pending | Own::Stream)
        });
        if ready {
            self.learn_local(ov, op);
            self.finish(now, ov, op);
        }
    }
}
