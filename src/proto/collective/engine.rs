//! The collective engine: relays, the root's bookkeeping, retries and reports. The protocol
//! is described in the module docs of [`super`].

use super::acc::{Acc, own_part, split_part};
use super::reduce::{ReduceFn, Reducers};
use super::*;
use crate::proto::message::{CollectiveMessage, DownBody, Message, UpPart};
use crate::proto::{Event, Time, Transmit};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

/// How long a relay remembers an operation after its budget ran out (duplicates and late
/// answers are recognised during that time).
const REMEMBER: Duration = Duration::from_secs(60);

/// Most operations a node takes part in at once; more are refused (a flood guard).
const MAX_RELAYS: usize = 20_000;

/// Key under which a node publishes its arrival at barrier `name`.
fn barrier_key(name: &str) -> String {
    format!("barrier:{name}")
}

/// This node's own part in an operation.
#[derive(Clone, Debug, PartialEq)]
enum Own {
    /// Broadcast and scatter: nothing to contribute.
    None,
    /// Waiting for a published value or the application's answer.
    Pending,
    /// Contributed this (`None`: declined).
    Given(Option<Vec<u8>>),
    /// A streamed broadcast: waiting for the data plane to have the payload.
    Stream,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A scatter whose further parts are still coming from the sender.
    AwaitMore,
    /// Waiting for children and this node's own part.
    Collecting,
    /// Answered; remembered for duplicates, late answers and direct requests.
    Done,
}

/// One operation at one node.
struct Relay {
    /// Whom to answer (this node itself at the root).
    from: NodeId,
    kind: OpKind,
    key: String,
    request: Vec<u8>,
    reducer: Option<Reducer>,
    phase: Phase,
    deadline: Time,
    forget_at: Time,
    /// Nodes sent a part of the operation and not answered yet; `true` for tree children.
    waiting: BTreeMap<NodeId, bool>,
    acc: Acc,
    own: Own,
    /// Whether the payload or item was delivered here.
    delivered: bool,
    /// Scatter items received so far while more parts are coming.
    pending_items: Vec<(NodeId, Vec<u8>)>,
    /// Direct requests waiting for this node's own part.
    direct_waiters: Vec<NodeId>,
    /// Whether the operation entered this node's cluster here (it planned the spread).
    entry: bool,
}

/// An operation this node started, as its root.
struct Origin {
    kind: OpKind,
    purpose: Purpose,
    started: Time,
    deadline: Time,
    /// The body sent to members asked directly.
    body: DownBody,
    expected: Vec<NodeId>,
    unknown: Vec<NodeId>,
    /// Scatter: each destination's item, for direct retries.
    items: HashMap<NodeId, Vec<u8>>,
    acc: Acc,
    /// The tree phase is over (the root's own relay answered).
    tree_done: bool,
    next_retry: Time,
    retry_gap: Duration,
    /// For a barrier: its name.
    barrier: Option<String>,
}

/// A wake-up: which operation, and whether for its relay or its origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Relay,
    Origin,
}

/// The collective operations of one node. Owned by the [`crate::proto::Core`], which feeds
/// it the messages, commands and member changes that concern it and forwards its outputs.
pub struct Collectives {
    me: NodeId,
    relays: HashMap<OpId, Relay>,
    origins: HashMap<OpId, Origin>,
    published: HashMap<String, Vec<u8>>,
    reducers: Reducers,
    /// Per `(root, child)`: the nodes the child's last answer said its subtree reached.
    subtrees: HashMap<(NodeId, NodeId), Vec<NodeId>>,
    /// Per root, where operations enter this node's cluster here: the cluster's nodes the
    /// last complete one reached below this node (what the next one's plan covers).
    local: HashMap<NodeId, Vec<NodeId>>,
    wakes: BinaryHeap<Reverse<(Time, OpId, Slot)>>,
    forget: VecDeque<(Time, OpId)>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    refused_floods: u64,
    /// Streamed payloads the data plane finished before their control message arrived.
    streams_done: HashMap<OpId, bool>,
    streams_forget: VecDeque<(Time, OpId)>,
}

impl Collectives {
    /// An engine for node `me`.
    pub fn new(me: NodeId) -> Self {
        Collectives {
            me,
            relays: HashMap::new(),
            origins: HashMap::new(),
            published: HashMap::new(),
            reducers: Reducers::default(),
            subtrees: HashMap::new(),
            local: HashMap::new(),
            wakes: BinaryHeap::new(),
            forget: VecDeque::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            refused_floods: 0,
            streams_done: HashMap::new(),
            streams_forget: VecDeque::new(),
        }
    }

    /// Registers a named reducer (see [`ReduceFn`]).
    pub fn register_reducer(&mut self, name: impl Into<String>, f: ReduceFn) {
        self.reducers.register(name, f);
    }

    /// Next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Collectives::handle_timeout`] is due next.
    pub fn poll_timeout(&self) -> Option<Time> {
        let wake = self.wakes.peek().map(|Reverse((t, _, _))| *t);
        let forget = [self.forget.front(), self.streams_forget.front()]
            .into_iter()
            .flatten()
            .map(|(t, _)| *t)
            .min();
        match (wake, forget) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Operations in progress or remembered (relays) and started here (origins).
    pub fn in_flight(&self) -> (usize, usize) {
        (self.relays.len(), self.origins.len())
    }

    // ---- commands --------------------------------------------------------------------

    /// Publishes this node's value for `key` (answers gathers and reduces naming it).
    pub fn publish(&mut self, now: Time, ov: &dyn Overlay, key: String, value: Vec<u8>) {
        self.published.insert(key.clone(), value.clone());
        let pending: Vec<OpId> = self
            .relays
            .iter()
            .filter(|(_, r)| r.own == Own::Pending && r.key == key)
            .map(|(op, _)| *op)
            .collect();
        for op in pending {
            self.set_own(now, ov, op, Some(value.clone()));
        }
    }

    /// Withdraws a published value.
    pub fn withdraw(&mut self, key: &str) {
        self.published.remove(key);
    }

    /// The application's answer to [`Event::ContributionNeeded`] (`None`: decline).
    pub fn contribute(&mut self, now: Time, ov: &dyn Overlay, op: OpId, value: Option<Vec<u8>>) {
        if self.relays.get(&op).is_some_and(|r| r.own == Own::Pending) {
            self.set_own(now, ov, op, value);
        }
    }

    /// Starts an operation with this node as root.
    pub fn start(&mut self, now: Time, ov: &dyn Overlay, s: Start) {
        let op = OpId {
            root: self.me,
            nonce: s.nonce,
        };
        let timeout = s.timeout.max(Duration::from_millis(1));
        let mut members: Vec<NodeId> = ov.alive_members().to_vec();
        members.push(self.me);
        members.sort_unstable();
        let (kind, purpose, body, barrier) = match s.what {
            StartKind::Broadcast { payload } => (
                OpKind::Broadcast,
                Purpose::Data,
                DownBody::Broadcast {
                    payload,
                    purpose: Purpose::Data,
                },
                None,
            ),
            StartKind::Stream { len, digest } => (
                OpKind::Broadcast,
                Purpose::Data,
                DownBody::Stream { len, digest },
                None,
            ),
            StartKind::Scatter { items } => (
                OpKind::Scatter,
                Purpose::Data,
                DownBody::Scatter { items },
                None,
            ),
            StartKind::Gather { key, request } => gather(key, request, Purpose::Data),
            StartKind::AllGather { key, request } => {
                gather(key, request, Purpose::AllGather { of: s.nonce })
            }
            StartKind::Reduce {
                key,
                request,
                reducer,
            } => reduce(key, request, reducer, Purpose::Data),
            StartKind::AllReduce {
                key,
                request,
                reducer,
            } => reduce(key, request, reducer, Purpose::AllReduce { of: s.nonce }),
            StartKind::Barrier { name } => {
                let key = barrier_key(&name);
                self.publish(now, ov, key.clone(), Vec::new());
                // The member with the smallest id runs the barrier; the others wait for its
                // release (if views differ, each runner releases only when all arrived).
                if members.first() != Some(&self.me) {
                    return;
                }
                let (k, p, b, _) = gather(key, Vec::new(), Purpose::BarrierRelease { of: s.nonce });
                (k, p, b, Some(name))
            }
        };
        let mut report = OpReport {
            op: Some(op),
            kind: Some(kind),
            purpose: Some(purpose),
            ..OpReport::default()
        };
        if self.origins.contains_key(&op) || self.relays.contains_key(&op) {
            report.error = Some(format!("operation {} is already in use", s.nonce));
            return self.events.push_back(Event::Report(Box::new(report)));
        }
        let size = match &body {
            DownBody::Broadcast { payload, .. } => payload.len(),
            DownBody::Stream { len, .. } if *len > MAX_STREAM_PAYLOAD => {
                report.error = Some(format!(
                    "payload of {len} bytes exceeds the limit of {MAX_STREAM_PAYLOAD} bytes"
                ));
                return self.events.push_back(Event::Report(Box::new(report)));
            }
            DownBody::Stream { .. } => 0,
            DownBody::Scatter { items } => items.iter().map(|(_, v)| v.len() + 24).sum(),
            DownBody::Gather { request, .. } | DownBody::Reduce { request, .. } => request.len(),
        };
        if size > MAX_INLINE_PAYLOAD {
            report.error = Some(format!(
                "payload of {size} bytes exceeds the limit of {MAX_INLINE_PAYLOAD} bytes"
            ));
            return self.events.push_back(Event::Report(Box::new(report)));
        }
        let (expected, unknown, items) = match &body {
            DownBody::Scatter { items } => {
                let mut exp = Vec::new();
                let mut unk = Vec::new();
                let mut map = HashMap::new();
                for (dest, v) in items {
                    if map.insert(*dest, v.clone()).is_some() {
                        continue;
                    }
                    if *dest == self.me || ov.is_alive(dest) {
                        exp.push(*dest);
                    } else {
                        unk.push(*dest);
                    }
                }
                exp.sort_unstable();
                unk.sort_unstable();
                (exp, unk, map)
            }
            _ => (members, Vec::new(), HashMap::new()),
        };
        let body = match body {
            DownBody::Scatter { items } => DownBody::Scatter {
                items: items
                    .into_iter()
                    .filter(|(d, _)| !unknown.contains(d))
                    .collect(),
            },
            b => b,
        };
        let tree_budget = timeout / 2;
        let retry_gap = (timeout / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
        self.origins.insert(
            op,
            Origin {
                kind,
                purpose,
                started: now,
                deadline: now + timeout,
                body: body.clone(),
                expected,
                unknown,
                items,
                acc: Acc::default(),
                tree_done: false,
                next_retry: now + tree_budget,
                retry_gap,
                barrier,
            },
        );
        self.wake(now + timeout, op, Slot::Origin);
        let budget = tree_budget.as_micros().min(u32::MAX as u128) as u32;
        self.accept_down(now, ov, self.me, op, budget, false, false, Vec::new(), body);
    }

    // ---- messages --------------------------------------------------------------------

    /// A collective message from `from`.
    pub fn handle_message(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        from: NodeId,
        msg: CollectiveMessage,
    ) {
        match msg {
            CollectiveMessage::Down {
                op,
                budget_us,
                direct,
                more,
                plan,
                body,
            } => {
                if op.root == self.me && !self.relays.contains_key(&op) {
                    return; // Not an operation of ours (forged or from a previous run).
                }
                self.accept_down(now, ov, from, op, budget_us, direct, more, plan, body)
            }
            CollectiveMessage::Up { op, last, part } => {
                self.accept_up(now, ov, from, op, last, part)
            }
        }
    }

    /// `id` left or died: stop waiting for it anywhere.
    pub fn member_down(&mut self, now: Time, ov: &dyn Overlay, id: NodeId) {
        self.subtrees.retain(|(_, child), _| *child != id);
        for set in self.local.values_mut() {
            set.retain(|x| *x != id);
        }
        let waiting: Vec<OpId> = self
            .relays
            .iter()
            .filter(|(_, r)| r.phase == Phase::Collecting && r.waiting.contains_key(&id))
            .map(|(op, _)| *op)
            .collect();
        for op in waiting {
            if let Some(r) = self.relays.get_mut(&op) {
                r.waiting.remove(&id);
            }
            self.try_finish(now, ov, op);
        }
        let origins: Vec<OpId> = self.origins.keys().copied().collect();
        for op in origins {
            self.progress(now, ov, op);
        }
    }

    /// Handles every wake-up due at `now`.
    pub fn handle_timeout(&mut self, now: Time, ov: &dyn Overlay) {
        while let Some(&Reverse((t, op, slot))) = self.wakes.peek() {
            if t > now {
                break;
            }
            self.wakes.pop();
            match slot {
                Slot::Relay => {
                    let due = self.relays.get(&op).is_some_and(|r| {
                        (r.phase != Phase::Done || r.own == Own::Pending) && r.deadline <= now
                    });
                    if due {
                        self.give_up(now, ov, op);
                    }
                }
                Slot::Origin => self.progress(now, ov, op),
            }
        }
        while let Some(&(t, op)) = self.forget.front() {
            if t > now {
                break;
            }
            self.forget.pop_front();
            if self.relays.get(&op).is_some_and(|r| r.forget_at <= now) {
                self.relays.remove(&op);
            }
        }
        while let Some(&(t, op)) = self.streams_forget.front() {
            if t > now {
                break;
            }
            self.streams_forget.pop_front();
            self.streams_done.remove(&op);
        }
    }

    // ---- relays ----------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn accept_down(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        from: NodeId,
        op: OpId,
        budget_us: u32,
        direct: bool,
        more: bool,
        plan: Vec<NodeId>,
        body: DownBody,
    ) {
        if direct {
            return self.answer_direct(now, ov, from, op, budget_us, body);
        }
        if let Some(r) = self.relays.get_mut(&op) {
            if r.phase == Phase::AwaitMore && r.from == from {
                if let DownBody::Scatter { items } = body {
                    r.pending_items.extend(items);
                }
                if !more {
                    r.phase = Phase::Collecting;
                    let items = std::mem::take(&mut r.pending_items);
                    self.route_scatter(now, ov, op, budget_us, items);
                    self.try_finish(now, ov, op);
                }
            } else if from != self.me {
                // Already reached through another path: counted there, not here.
                self.send_up(from, op, UpPart::default());
            }
            return;
        }
        if self.relays.len() >= MAX_RELAYS {
            self.refused_floods += 1;
            tracing::warn!(%from, "too many collective operations in flight; one refused");
            return;
        }
        let deadline = now + Duration::from_micros(budget_us as u64);
        let mut relay = Relay {
            from,
            kind: OpKind::Broadcast,
            key: String::new(),
            request: Vec::new(),
            reducer: None,
            phase: Phase::Collecting,
            deadline,
            forget_at: deadline + REMEMBER,
            waiting: BTreeMap::new(),
            acc: Acc::default(),
            own: Own::None,
            delivered: false,
            pending_items: Vec::new(),
            direct_waiters: Vec::new(),
            entry: false,
        };
        let forward = match body {
            DownBody::Broadcast { payload, purpose } => {
                relay.delivered = true;
                relay.acc.reached.insert(self.me);
                self.deliver(op, from, delivery_kind(purpose), payload.clone(), purpose);
                Some(DownBody::Broadcast { payload, purpose })
            }
            DownBody::Stream { len, digest } => {
                relay.own = Own::Stream;
                Some(DownBody::Stream { len, digest })
            }
            DownBody::Scatter { items } => {
                relay.kind = OpKind::Scatter;
                if more {
                    relay.phase = Phase::AwaitMore;
                    relay.pending_items = items;
                    self.insert_relay(op, relay);
                    return;
                }
                self.insert_relay(op, relay);
                self.route_scatter(now, ov, op, budget_us, items);
                self.try_finish(now, ov, op);
                return;
            }
            DownBody::Gather {
                key,
                request,
                purpose,
            } => {
                relay.kind = OpKind::Gather;
                relay.own = Own::Pending;
                relay.acc.reached.insert(self.me);
                relay.key = key.clone();
                relay.request = request.clone();
                Some(DownBody::Gather {
                    key,
                    request,
                    purpose,
                })
            }
            DownBody::Reduce {
                key,
                request,
                reducer,
                purpose,
            } => {
                relay.kind = OpKind::Reduce;
                relay.own = Own::Pending;
                relay.acc.reached.insert(self.me);
                relay.key = key.clone();
                relay.request = request.clone();
                relay.reducer = Some(reducer.clone());
                Some(DownBody::Reduce {
                    key,
                    request,
                    reducer,
                    purpose,
                })
            }
        };
        self.insert_relay(op, relay);
        if let Some(body) = forward {
            for (to, delegation) in self.targets(ov, op, from, plan) {
                let b = child_budget(budget_us, ov.rtt_us(to));
                self.send_down_planned(to, op, b, false, false, delegation, body.clone());
                self.relays
                    .get_mut(&op)
                    .expect("just inserted")
                    .waiting
                    .insert(to, true);
            }
        }
        if self.relays.get(&op).is_some_and(|r| r.own == Own::Pending) {
            self.resolve_own(now, ov, op);
        }
        if let Some(ok) = self.streams_done.remove(&op) {
            self.stream_done(now, ov, op, ok);
        }
        self.try_finish(now, ov, op);
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

    fn insert_relay(&mut self, op: OpId, relay: Relay) {
        self.wake(relay.deadline, op, Slot::Relay);
        self.forget.push_back((relay.forget_at, op));
        self.relays.insert(op, relay);
    }

    /// Looks up this node's value for a gather or reduce: published, or asked for.
    fn resolve_own(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
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

    fn set_own(&mut self, now: Time, ov: &dyn Overlay, op: OpId, value: Option<Vec<u8>>) {
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
    fn answer_direct(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        from: NodeId,
        op: OpId,
        budget_us: u32,
        body: DownBody,
    ) {
        let me = self.me;
        if !self.relays.contains_key(&op) {
            if self.relays.len() >= MAX_RELAYS {
                self.refused_floods += 1;
                return;
            }
            let deadline = now + Duration::from_micros(budget_us as u64);
            let relay = Relay {
                from,
                kind: OpKind::Broadcast,
                key: String::new(),
                request: Vec::new(),
                reducer: None,
                phase: Phase::Done,
                deadline,
                forget_at: deadline + REMEMBER,
                waiting: BTreeMap::new(),
                acc: Acc::default(),
                own: Own::None,
                delivered: false,
                pending_items: Vec::new(),
                direct_waiters: Vec::new(),
                entry: false,
            };
            self.insert_relay(op, relay);
        }
        let r = self.relays.get_mut(&op).expect("present");
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
                    self.events.push_back(Event::Delivered(Delivery {
                        op,
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

    /// A direct request for this node's own value: answer with it, now or when it is known.
    #[allow(clippy::too_many_arguments)]
    fn direct_contribution(
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

    /// Splits scatter items: this node's own, those for a child's subtree (as the child's
    /// last answer described it, or the child itself), the rest directly to its destination.
    fn route_scatter(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        op: OpId,
        budget_us: u32,
        items: Vec<(NodeId, Vec<u8>)>,
    ) {
        let me = self.me;
        let from = self.relays.get(&op).map(|r| r.from).unwrap_or(me);
        let children = self.ordered_children(ov, op.root, from);
        let mut owner: HashMap<NodeId, NodeId> = HashMap::new();
        for c in &children {
            if let Some(sub) = self.subtrees.get(&(op.root, *c)) {
                for n in sub {
                    owner.entry(*n).or_insert(*c);
                }
            }
            owner.insert(*c, *c);
        }
        let mut per_child: BTreeMap<NodeId, Vec<(NodeId, Vec<u8>)>> = BTreeMap::new();
        let mut direct: Vec<(NodeId, Vec<u8>)> = Vec::new();
        for (dest, v) in items {
            if dest == me {
                let r = self.relays.get_mut(&op).expect("relay");
                if !r.delivered {
                    r.delivered = true;
                    r.acc.reached.insert(me);
                    self.events.push_back(Event::Delivered(Delivery {
                        op,
                        from,
                        kind: DeliveryKind::Scatter,
                        payload: v,
                    }));
                }
            } else if let Some(c) = owner.get(&dest).filter(|c| **c != from) {
                per_child.entry(*c).or_default().push((dest, v));
            } else if dest != from && ov.is_alive(&dest) {
                direct.push((dest, v));
            }
        }
        for child in children {
            let Some(items) = per_child.remove(&child) else {
                continue;
            };
            let b = child_budget(budget_us, ov.rtt_us(child));
            let chunks = chunk_items(items);
            let n = chunks.len();
            for (i, chunk) in chunks.into_iter().enumerate() {
                self.send_down(
                    child,
                    op,
                    b,
                    false,
                    i + 1 < n,
                    DownBody::Scatter { items: chunk },
                );
            }
            self.relays
                .get_mut(&op)
                .expect("relay")
                .waiting
                .insert(child, true);
        }
        for (dest, v) in direct {
            let b = child_budget(budget_us, ov.rtt_us(dest));
            self.send_down(
                dest,
                op,
                b,
                true,
                false,
                DownBody::Scatter {
                    items: vec![(dest, v)],
                },
            );
            self.relays
                .get_mut(&op)
                .expect("relay")
                .waiting
                .insert(dest, false);
        }
        let _ = now;
    }

    fn accept_up(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        from: NodeId,
        op: OpId,
        last: bool,
        part: UpPart,
    ) {
        let collecting = self
            .relays
            .get(&op)
            .is_some_and(|r| r.phase == Phase::Collecting && r.waiting.contains_key(&from));
        if collecting {
            let r = self.relays.get_mut(&op).expect("relay");
            let tree_child = r.waiting.get(&from).copied().unwrap_or(false);
            if tree_child
                && last
                && matches!(r.kind, OpKind::Broadcast | OpKind::Gather | OpKind::Reduce)
            {
                self.subtrees.insert((op.root, from), part.reached.clone());
            }
            let r = self.relays.get_mut(&op).expect("relay");
            let reducer = r.reducer.clone();
            r.acc.merge(part, reducer.as_ref(), &self.reducers);
            if last {
                r.waiting.remove(&from);
            }
            self.try_finish(now, ov, op);
        } else if op.root == self.me {
            self.merge_at_origin(now, ov, op, part);
        } else if ov.is_alive(&op.root) && !is_empty(&part) {
            // Our answer went up already (or we never took part): late news goes to the root.
            self.send_up(op.root, op, part);
        }
    }

    /// Answers the sender once the subtree is complete.
    fn try_finish(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
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

    /// At a cluster entry, after a complete answer: remember the cluster's nodes below.
    fn learn_local(&mut self, ov: &dyn Overlay, op: OpId) {
        let Some(r) = self.relays.get(&op) else {
            return;
        };
        if !r.entry || r.kind == OpKind::Scatter {
            return;
        }
        let bound = ov.cluster_rtt_us();
        let local = |x: &&NodeId| **x != self.me && ov.rtt_us(**x).is_some_and(|t| t <= bound);
        // Exits first: the plan serves its set in order.
        let mut set: Vec<NodeId> = r.acc.exits.iter().filter(local).copied().collect();
        set.extend(
            r.acc
                .reached
                .iter()
                .filter(local)
                .filter(|x| !r.acc.exits.contains(x)),
        );
        self.local.insert(op.root, set);
    }

    /// The budget ran out: answer with what there is.
    fn give_up(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
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

    fn finish(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
        let Some(r) = self.relays.get_mut(&op) else {
            return;
        };
        r.phase = Phase::Done;
        r.waiting.clear();
        let acc = std::mem::take(&mut r.acc);
        let from = r.from;
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

    /// Sends an answer to `to`, or to the root when `to` is gone.
    fn reply(&mut self, ov: &dyn Overlay, to: NodeId, op: OpId, part: UpPart) {
        if to == self.me {
            return;
        }
        let target = if ov.is_alive(&to) { to } else { op.root };
        if target == self.me || !ov.is_alive(&target) {
            return;
        }
        if target != to && is_empty(&part) {
            return;
        }
        self.send_up(target, op, part);
    }

    fn send_up(&mut self, to: NodeId, op: OpId, part: UpPart) {
        let pieces = split_part(part, PART_LIMIT);
        let n = pieces.len();
        for (i, part) in pieces.into_iter().enumerate() {
            self.transmits.push_back(Transmit {
                to,
                msg: Message::Collective(CollectiveMessage::Up {
                    op,
                    last: i + 1 == n,
                    part,
                }),
            });
        }
    }

    fn send_down(
        &mut self,
        to: NodeId,
        op: OpId,
        budget_us: u32,
        direct: bool,
        more: bool,
        body: DownBody,
    ) {
        self.send_down_planned(to, op, budget_us, direct, more, Vec::new(), body);
    }

    #[allow(clippy::too_many_arguments)]
    fn send_down_planned(
        &mut self,
        to: NodeId,
        op: OpId,
        budget_us: u32,
        direct: bool,
        more: bool,
        plan: Vec<NodeId>,
        body: DownBody,
    ) {
        self.transmits.push_back(Transmit {
            to,
            msg: Message::Collective(CollectiveMessage::Down {
                op,
                budget_us,
                direct,
                more,
                plan,
                body,
            }),
        });
    }

    /// Where this relay sends the operation: the tree children, except that inside a
    /// cluster the sends follow a plan (see `plan.rs`). Returns (recipient, delegation);
    /// sets the relay's `entry` flag when it planned for its cluster.
    fn targets(
        &mut self,
        ov: &dyn Overlay,
        op: OpId,
        from: NodeId,
        plan: Vec<NodeId>,
    ) -> Vec<(NodeId, Vec<NodeId>)> {
        let me = self.me;
        let children = self.ordered_children(ov, op.root, from);
        let bound = ov.cluster_rtt_us();
        let near = |x: &NodeId| bound > 0 && ov.rtt_us(*x).is_some_and(|r| r <= bound);
        let entry = !near(&from) || from == me;
        let set: Vec<NodeId> = if !plan.is_empty() {
            plan
        } else if entry {
            self.local.get(&op.root).cloned().unwrap_or_default()
        } else {
            Vec::new()
        };
        let set: Vec<NodeId> = set
            .into_iter()
            .filter(|x| *x != me && *x != from && ov.is_alive(x) && near(x))
            .collect();
        if let Some(r) = self.relays.get_mut(&op) {
            r.entry = entry && bound > 0;
        }
        if children.iter().any(|c| !near(c))
            && let Some(r) = self.relays.get_mut(&op)
        {
            r.acc.exits.insert(me);
        }
        if set.is_empty() {
            return children.into_iter().map(|c| (c, Vec::new())).collect();
        }
        // Children outside the cluster first (they have the long way to go), then the plan;
        // near children the plan does not name are still covered by the tree.
        let planned: std::collections::HashSet<NodeId> = set.iter().copied().collect();
        let delegate = from != me && near(&from);
        let mut out: Vec<(NodeId, Vec<NodeId>)> = children
            .iter()
            .filter(|c| !near(c))
            .map(|c| (*c, Vec::new()))
            .collect();
        let latency = |x: NodeId| ov.rtt_us(x).unwrap_or(bound) / 2;
        out.extend(plan::schedule(me, &set, latency, ov.send_cost_us()));
        if !delegate {
            out.extend(
                children
                    .iter()
                    .filter(|c| near(c) && !planned.contains(c))
                    .map(|c| (*c, Vec::new())),
            );
        }
        out
    }

    fn deliver(
        &mut self,
        op: OpId,
        from: NodeId,
        kind: DeliveryKind,
        payload: Vec<u8>,
        purpose: Purpose,
    ) {
        if let Purpose::BarrierRelease { .. } = purpose
            && let Ok(outcome) = postcard::from_bytes::<BarrierOutcome>(&payload)
        {
            self.published.remove(&barrier_key(&outcome.name));
        }
        self.events.push_back(Event::Delivered(Delivery {
            op,
            from,
            kind,
            payload,
        }));
    }

    /// Children in `root`'s tree except `from`, the one with the most descendants first.
    fn ordered_children(&self, ov: &dyn Overlay, root: NodeId, from: NodeId) -> Vec<NodeId> {
        let mut children: Vec<NodeId> = ov
            .children(root)
            .into_iter()
            .filter(|c| *c != from && *c != self.me && ov.is_alive(c))
            .collect();
        children.sort_by_key(|c| {
            let n = self.subtrees.get(&(root, *c)).map_or(1, |s| s.len());
            (Reverse(n), *c)
        });
        children
    }

    fn wake(&mut self, at: Time, op: OpId, slot: Slot) {
        self.wakes.push(Reverse((at, op, slot)));
    }

    // ---- the root --------------------------------------------------------------------

    fn merge_at_origin(&mut self, now: Time, ov: &dyn Overlay, op: OpId, part: UpPart) {
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
    fn accounted(o: &Origin, id: &NodeId) -> bool {
        match o.kind {
            OpKind::Broadcast | OpKind::Scatter => o.acc.reached.contains(id),
            OpKind::Gather | OpKind::Reduce => o.acc.answered(id),
        }
    }

    /// Completes, retries or waits, as the root's view of the operation says.
    fn progress(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
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

    fn complete(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
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
                let mut members: Vec<NodeId> = ov.alive_members().to_vec();
                members.push(me);
                members.sort_unstable();
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
                    },
                );
                self.wake(now + timeout, op2, Slot::Origin);
                let budget = (timeout / 2).as_micros().min(u32::MAX as u128) as u32;
                self.accept_down(now, ov, me, op2, budget, false, false, Vec::new(), body);
            }
        }
    }
}

fn gather(
    key: String,
    request: Vec<u8>,
    purpose: Purpose,
) -> (OpKind, Purpose, DownBody, Option<String>) {
    (
        OpKind::Gather,
        purpose,
        DownBody::Gather {
            key,
            request,
            purpose,
        },
        None,
    )
}

fn reduce(
    key: String,
    request: Vec<u8>,
    reducer: Reducer,
    purpose: Purpose,
) -> (OpKind, Purpose, DownBody, Option<String>) {
    (
        OpKind::Reduce,
        purpose,
        DownBody::Reduce {
            key,
            request,
            reducer,
            purpose,
        },
        None,
    )
}

fn delivery_kind(p: Purpose) -> DeliveryKind {
    match p {
        Purpose::Data => DeliveryKind::Broadcast,
        Purpose::AllReduce { .. } => DeliveryKind::AllReduce,
        Purpose::AllGather { .. } => DeliveryKind::AllGather,
        Purpose::BarrierRelease { .. } => DeliveryKind::Barrier,
    }
}

fn reached_only(me: NodeId) -> UpPart {
    UpPart {
        reached: vec![me],
        ..UpPart::default()
    }
}

fn is_empty(p: &UpPart) -> bool {
    p.reached.is_empty() && p.declined.is_empty() && p.items.is_empty() && p.contributors.is_empty()
}

/// The time a child gets to answer: a little less than ours, minus the round trip to it.
fn child_budget(budget_us: u32, rtt_us: Option<u32>) -> u32 {
    let b = (budget_us as u64 * 9 / 10).saturating_sub(rtt_us.unwrap_or(0) as u64);
    b.max(1_000) as u32
}

/// Splits scatter items into messages of bounded size.
fn chunk_items(items: Vec<(NodeId, Vec<u8>)>) -> Vec<Vec<(NodeId, Vec<u8>)>> {
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
