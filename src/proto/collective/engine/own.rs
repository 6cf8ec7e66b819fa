//! A node's own part in an operation: its contribution, the streamed payload it waits
//! for, and answers to members that ask it directly.

use super::{Collectives, Own, Phase, REMEMBER, Relay, Slot, delivery_kind, reached_only};
use crate::proto::collective::acc::own_part;
use crate::proto::collective::{Delivered, DeliveryKind, OpKind, Overlay};
use crate::proto::message::{DownBody, OpId, Purpose, Reducer, UpPart};
use crate::proto::{Event, NodeId, Time};
use std::time::Duration;

impl Collectives {
    /// Looks up this node's value for a gather or reduce: published, or asked for.
    pub(super) fn resolve_own(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
        let Some(r) = self.relays.get(&op) else {
            return;
        };
        match self.published.get(&r.key) {
            Some(v) => {
                let v = v.clone();
                self.set_own(now, ov, op, Some(v));
            }
            None => self.events.push_back(Event::ContributionNeeded {
                op,
                key: r.key.clone(),
                request: r.request.clone(),
            }),
        }
    }

    pub(super) fn set_own(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        op: OpId,
        value: Option<Vec<u8>>,
    ) {
        let me = self.me;
        let Some(r) = self.relays.get_mut(&op) else {
            return;
        };
        r.own = Own::Given(value.clone());
        let reducer = r.reducer.clone();
        if r.phase == Phase::Collecting {
            r.acc
                .add_own(me, value.as_ref(), reducer.as_ref(), &self.reducers);
        }
        let waiters = std::mem::take(&mut r.direct_waiters);
        for w in waiters {
            let part = own_part(me, value.as_ref(), reducer.as_ref(), &self.reducers);
            self.reply(ov, w, op, part);
        }
        self.try_finish(now, ov, op);
    }

    /// A direct request: deliver or contribute here, answer the sender, forward nothing.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn answer_direct(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        from: NodeId,
        op: OpId,
        budget_us: u32,
        group: Option<String>,
        body: DownBody,
    ) {
        let me = self.me;
        if !self.relays.contains_key(&op) {
            if !self.admit(now, op, from) {
                return self.reply(ov, from, op, UpPart::default());
            }
            let deadline = now + Duration::from_micros(budget_us as u64);
            let mut relay = Relay::blank(from, Phase::Done, deadline);
            relay.group = group;
            self.insert_relay(op, relay);
        }
        let r = self.relays.get_mut(&op).expect("present");
        if (r.group.as_deref()).is_some_and(|g| !ov.in_group(&me, g)) {
            // Asked directly, but not in the operation's group (any more): nothing to give.
            return self.reply(ov, from, op, UpPart::default());
        }
        match body {
            DownBody::Broadcast { payload, purpose } => {
                let first = !r.delivered;
                r.delivered = true;
                if first {
                    self.deliver(op, from, delivery_kind(purpose), payload, purpose);
                }
                self.reply(ov, from, op, reached_only(me));
            }
            DownBody::Stream { .. } => {
                if r.delivered {
                    return self.reply(ov, from, op, reached_only(me));
                }
                r.direct_waiters.push(from);
                if r.own != Own::Stream {
                    r.own = Own::Stream;
                    let deadline = r
                        .deadline
                        .max(now + Duration::from_micros(budget_us as u64));
                    r.deadline = deadline;
                    self.wake(deadline, op, Slot::Relay);
                }
                if let Some(ok) = self.streams_done.remove(&op) {
                    self.stream_done(now, ov, op, ok);
                }
            }
            DownBody::Scatter { items } => {
                let mine: Vec<Vec<u8>> = items
                    .into_iter()
                    .filter(|(d, _)| *d == me)
                    .map(|(_, v)| v)
                    .collect();
                let Some(item) = mine.into_iter().next() else {
                    return self.reply(ov, from, op, UpPart::default());
                };
                let first = !r.delivered;
                r.delivered = true;
                if first {
                    self.events.push_back(Event::Delivered(Delivered {
                        op,
                        group: None,
                        from,
                        kind: DeliveryKind::Scatter,
                        payload: item,
                    }));
                }
                self.reply(ov, from, op, reached_only(me));
            }
            DownBody::Gather { key, request, .. } => {
                r.kind = OpKind::Gather;
                self.direct_contribution(now, ov, from, op, key, request, None)
            }
            DownBody::Reduce {
                key,
                request,
                reducer,
                ..
            } => {
                r.kind = OpKind::Reduce;
                self.direct_contribution(now, ov, from, op, key, request, Some(reducer))
            }
        }
    }

    /// The data plane has (`ok`) or failed to get the payload of streamed broadcast `op`.
    pub fn stream_done(&mut self, now: Time, ov: &dyn Overlay, op: OpId, ok: bool) {
        let me = self.me;
        let Some(r) = self.relays.get_mut(&op) else {
            // The bytes came before the control message: remember until it does.
            self.streams_done.insert(op, ok);
            self.streams_forget.push_back((now + REMEMBER, op));
            return;
        };
        let waited = r.own == Own::Stream;
        if waited {
            r.own = Own::None;
        }
        let waiters = std::mem::take(&mut r.direct_waiters);
        if !ok {
            return self.try_finish(now, ov, op);
        }
        // Outside the operation's group this node only passed the bytes on.
        if (r.group.as_deref()).is_some_and(|g| !ov.in_group(&me, g)) {
            return self.try_finish(now, ov, op);
        }
        let first = !r.delivered;
        r.delivered = true;
        if waited && r.phase == Phase::Collecting {
            r.acc.reached.insert(me);
        }
        if first {
            let from = self.relays.get(&op).map_or(op.root, |r| r.from);
            self.deliver(op, from, DeliveryKind::Broadcast, Vec::new(), Purpose::Data);
        }
        for w in waiters {
            self.reply(ov, w, op, reached_only(me));
        }
        self.try_finish(now, ov, op);
    }

    /// A direct request for this node's own value: answer with it, now or when it is known.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn direct_contribution(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        from: NodeId,
        op: OpId,
        key: String,
        request: Vec<u8>,
        reducer: Option<Reducer>,
    ) {
        let me = self.me;
        let r = self.relays.get_mut(&op).expect("present");
        if r.reducer.is_none() {
            r.reducer = reducer;
        }
        r.key = key;
        r.request = request;
        match r.own.clone() {
            Own::Given(v) => {
                let red = r.reducer.clone();
                let part = own_part(me, v.as_ref(), red.as_ref(), &self.reducers);
                self.reply(ov, from, op, part);
            }
            Own::Pending | Own::Stream => r.direct_waiters.push(from),
            Own::None => {
                r.own = Own::Pending;
                r.direct_waiters.push(from);
                let deadline = r.deadline;
                self.wake(deadline, op, Slot::Relay);
                self.resolve_own(now, ov, op);
            }
        }
    }
}
