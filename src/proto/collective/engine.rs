//! The collective engine: relays, the root's bookkeeping, retries and reports. The protocol
//! is described in the module docs of [`super`].

mod admit;
mod own;
mod parts;
mod relay;
mod root;
mod send;
mod state;

use self::admit::OriginSlots;
#[cfg(test)]
pub(super) use self::admit::limits as admit_limits;
use self::parts::{barrier_key, child_budget, chunk_items, delivery_kind, is_empty, reached_only};
use self::state::{Deferred, Origin, Own, Phase, Plan, Relay, Slot, Target};

use super::acc::Acc;
use super::reduce::{ReduceFn, Reducers};
use crate::proto::NodeId;
use crate::proto::collective::{
    MAX_INLINE_PAYLOAD, MAX_STREAM_PAYLOAD, OpKind, OpRefused, OpReport, Overlay, Start, StartKind,
};
use crate::proto::message::{CollectiveMessage, DownBody};
use crate::proto::message::{OpId, Purpose, Reducer};
use crate::proto::{Event, Time, Transmit};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

/// How long a relay remembers an operation after its budget ran out (duplicates and late
/// answers are recognised during that time).
const REMEMBER: Duration = Duration::from_secs(60);

/// Most children outside the cluster an entry sends to on behalf of the nodes below it.
const MAX_HOISTED: usize = 32;

/// The collective operations of one node. Owned by the [`crate::proto::Core`], which feeds
/// it the messages, commands and member changes that concern it and forwards its outputs.
pub struct Collectives {
    me: NodeId,
    relays: HashMap<OpId, Relay>,
    /// The relay entries of each root as sent by each peer, and of each peer (see
    /// `admit.rs`).
    by_origin: HashMap<(NodeId, NodeId), OriginSlots>,
    by_sender: HashMap<NodeId, usize>,
    origins: HashMap<OpId, Origin>,
    published: HashMap<String, Vec<u8>>,
    reducers: Reducers,
    /// Per `(root, child)`: the nodes the child's last answer said its subtree reached.
    subtrees: HashMap<(NodeId, NodeId), Vec<NodeId>>,
    /// Per root, where operations enter this node's cluster here: the cluster's nodes the
    /// last complete one reached below this node (what the next one's plan covers).
    local: HashMap<NodeId, Vec<NodeId>>,
    /// Per root, at the same entries: `(node of the cluster below, its tree child in another
    /// cluster)` as the last complete operation reported; the entry sends to those children
    /// itself (see [`Collectives::targets`]).
    hoist: HashMap<NodeId, Vec<(NodeId, NodeId)>>,
    wakes: BinaryHeap<Reverse<(Time, OpId, Slot)>>,
    forget: VecDeque<(Time, OpId)>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    refused_floods: u64,
    /// Streamed payloads the data plane finished before their control message arrived.
    streams_done: HashMap<OpId, bool>,
    streams_forget: VecDeque<(Time, OpId)>,
    /// Accepted operations whose in-cluster part waits for the far sends to be drained.
    deferred: VecDeque<Deferred>,
}

impl Collectives {
    /// An engine for node `me`.
    pub fn new(me: NodeId) -> Self {
        Collectives {
            me,
            relays: HashMap::new(),
            by_origin: HashMap::new(),
            by_sender: HashMap::new(),
            origins: HashMap::new(),
            published: HashMap::new(),
            reducers: Reducers::default(),
            subtrees: HashMap::new(),
            local: HashMap::new(),
            hoist: HashMap::new(),
            wakes: BinaryHeap::new(),
            forget: VecDeque::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            refused_floods: 0,
            streams_done: HashMap::new(),
            streams_forget: VecDeque::new(),
            deferred: VecDeque::new(),
        }
    }

    /// Registers a named reducer (see [`ReduceFn`]).
    pub fn register_reducer(&mut self, name: impl Into<String>, f: ReduceFn) {
        self.reducers.register(name, f);
    }

    /// Next message to send. Work deferred behind the sends already queued (see
    /// [`Collectives::has_deferred`]) is not done here: the core runs it with
    /// [`Collectives::run_deferred`] when this returns `None`.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        crate::proto::drain::pop_front(&mut self.transmits)
    }

    /// Whether some accepted operation still has its in-cluster part to do.
    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Does the in-cluster parts left by earlier inputs, oldest first.
    pub fn run_deferred(&mut self, ov: &dyn Overlay) {
        while let Some(d) = self.deferred.pop_front() {
            self.continue_accept(ov, d);
        }
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        crate::proto::drain::pop_front(&mut self.events)
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
        let group = s.group.clone();
        // A stripe follows a route of its own; a group's stream follows the tree.
        let routed = matches!(&s.what, StartKind::Stream { route, .. } if !route.is_empty());
        let scoped = matches!(
            &s.what,
            StartKind::Broadcast { .. }
                | StartKind::Stream { .. }
                | StartKind::Gather { .. }
                | StartKind::Reduce { .. }
                | StartKind::AllGather { .. }
                | StartKind::AllReduce { .. }
        );
        let members: Vec<NodeId> = match &group {
            Some(g) => ov.group_members(g),
            None => {
                let mut m = ov.alive_members().to_vec();
                m.push(self.me);
                m.sort_unstable();
                m
            }
        };
        let mut route = Vec::new();
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
            StartKind::Stream {
                len,
                digest,
                route: r,
            } => {
                route = r;
                (
                    OpKind::Broadcast,
                    Purpose::Data,
                    DownBody::Stream { len, digest },
                    None,
                )
            }
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
        if group.is_some() && (!scoped || routed) {
            report.error = Some(OpRefused::Unscoped);
            return self.events.push_back(Event::Report(Box::new(report)));
        }
        if self.origins.contains_key(&op) || self.relays.contains_key(&op) {
            report.error = Some(OpRefused::InUse { nonce: s.nonce });
            return self.events.push_back(Event::Report(Box::new(report)));
        }
        if !self.admit(now, op, self.me) {
            // Said at once: waiting out the timeout would look like every member missing.
            report.error = Some(OpRefused::Busy {
                running: self.origins.len(),
            });
            return self.events.push_back(Event::Report(Box::new(report)));
        }
        let size = match &body {
            DownBody::Broadcast { payload, .. } => payload.len(),
            DownBody::Stream { len, .. } if *len > MAX_STREAM_PAYLOAD => {
                report.error = Some(OpRefused::TooLarge {
                    len: *len,
                    limit: MAX_STREAM_PAYLOAD,
                });
                return self.events.push_back(Event::Report(Box::new(report)));
            }
            DownBody::Stream { .. } => 0,
            DownBody::Scatter { items } => items.iter().map(|(_, v)| v.len() + 24).sum(),
            DownBody::Gather { request, .. } | DownBody::Reduce { request, .. } => request.len(),
        };
        if size > MAX_INLINE_PAYLOAD {
            report.error = Some(OpRefused::TooLarge {
                len: size as u64,
                limit: MAX_INLINE_PAYLOAD as u64,
            });
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
                group: group.clone(),
            },
        );
        self.wake(now + timeout, op, Slot::Origin);
        let budget = tree_budget.as_micros().min(u32::MAX as u128) as u32;
        let plan = Plan {
            route,
            group,
            ..Plan::default()
        };
        self.accept_down(now, ov, self.me, op, budget, false, false, plan, body);
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
                hoisted,
                covered,
                body,
                route,
                group,
            } => {
                if op.root == self.me && !self.relays.contains_key(&op) {
                    return self.drop_own_down(from, op, &body);
                }
                let plan = Plan {
                    delegation: plan,
                    hoisted,
                    covered,
                    route,
                    group,
                };
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
        for pairs in self.hoist.values_mut() {
            pairs.retain(|(p, f)| *p != id && *f != id);
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
                self.remove_entry(&op);
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
