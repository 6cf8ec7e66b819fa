//! A relay's side: accepting an operation from above, its own contribution, routing
//! scatter items, direct answers, and answers from below.

use super::admit::wire_len;
use super::{
    Collectives, Deferred, Own, Phase, Plan, Relay, Slot, Target, child_budget, chunk_items,
    delivery_kind, is_empty,
};
use crate::proto::collective::{Delivered, DeliveryKind, OpKind, Overlay, plan};
use crate::proto::message::{DownBody, OpId, UpPart};
use crate::proto::{Event, NodeId, Time};
use std::collections::{BTreeMap, HashMap};
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

impl Collectives {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn accept_down(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        from: NodeId,
        op: OpId,
        budget_us: u32,
        direct: bool,
        more: bool,
        plan: Plan,
        body: DownBody,
    ) {
        if direct {
            return self.answer_direct(now, ov, from, op, budget_us, plan.group, body);
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
        if !self.admit(now, op, from) {
            // Answered at once, as reaching nothing: the sender reports this subtree
            // missing (or asks its members directly) instead of waiting out its budget.
            if from != self.me {
                self.send_up(from, op, UpPart::default());
            }
            if self.refused_floods.is_power_of_two() {
                tracing::warn!(
                    root = %op.root,
                    refused = self.refused_floods,
                    "too many collective operations of one root in flight; refusing"
                );
            }
            return;
        }
        let deadline = now + Duration::from_micros(budget_us as u64);
        let mut relay = Relay::blank(from, Phase::Collecting, deadline);
        relay.group = plan.group.clone();
        // Outside the operation's group this node only passes it on.
        let member = (plan.group.as_deref()).is_none_or(|g| ov.in_group(&self.me, g));
        let forward = match body {
            DownBody::Broadcast { payload, purpose } => {
                if member {
                    relay.delivered = true;
                    relay.acc.reached.insert(self.me);
                }
                self.insert_relay(op, relay);
                if member {
                    self.deliver(op, from, delivery_kind(purpose), payload.clone(), purpose);
                }
                let body = DownBody::Broadcast { payload, purpose };
                return self.forward_accepted(now, ov, from, op, budget_us, plan, body);
            }
            DownBody::Stream { len, digest } => {
                relay.own = Own::Stream;
                Some(DownBody::Stream { len, digest })
            }
            DownBody::Scatter { items } => {
                relay.kind = OpKind::Scatter;
                relay.delegated = !plan.delegation.is_empty();
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
                if member {
                    relay.own = Own::Pending;
                    relay.acc.reached.insert(self.me);
                }
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
                if member {
                    relay.own = Own::Pending;
                    relay.acc.reached.insert(self.me);
                }
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
        let Some(body) = forward else {
            return self.finish_accept(now, ov, op);
        };
        self.forward_accepted(now, ov, from, op, budget_us, plan, body)
    }

    /// Passes an accepted operation on: along its route, or across the wide area first and
    /// then inside the cluster.
    #[allow(clippy::too_many_arguments)]
    fn forward_accepted(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        from: NodeId,
        op: OpId,
        budget_us: u32,
        plan: Plan,
        body: DownBody,
    ) {
        if !plan.route.is_empty() {
            let targets = routed_targets(ov, self.me, &plan.route);
            self.send_targets(ov, op, budget_us, targets, &body);
            return self.finish_accept(now, ov, op);
        }
        // The sends across the wide area go first, and leave before the in-cluster part is
        // worked out: that part is deferred until they are drained (see `Deferred`).
        let far = self.far_targets(ov, op, from, &plan);
        // Without clusters every child is far and nothing is left to plan.
        let deferred = !far.is_empty() && ov.plans();
        self.send_targets(ov, op, budget_us, far, &body);
        let rest = Deferred {
            now,
            op,
            from,
            budget_us,
            plan,
            body,
        };
        if deferred {
            self.deferred.push_back(rest);
        } else {
            self.continue_accept(ov, rest);
        }
    }

    /// The in-cluster part of [`Collectives::accept_down`], after the far sends.
    pub(super) fn continue_accept(&mut self, ov: &dyn Overlay, d: Deferred) {
        let near = self.near_targets(ov, d.op, d.from, d.plan);
        self.send_targets(ov, d.op, d.budget_us, near, &d.body);
        self.finish_accept(d.now, ov, d.op);
    }

    /// Sends the operation to `targets`, each with its part of the plan, and waits for them.
    fn send_targets(
        &mut self,
        ov: &dyn Overlay,
        op: OpId,
        budget_us: u32,
        targets: Vec<Target>,
        body: &DownBody,
    ) {
        for Target { to, plan } in targets {
            let b = child_budget(budget_us, ov.rtt_us(to));
            self.send_down_planned(to, op, b, plan, body.clone());
            if let Some(r) = self.relays.get_mut(&op) {
                r.waiting.insert(to, true);
            }
        }
    }

    /// What follows the sends of an accepted operation: this node's own part, a stream that
    /// finished first, and the answer if nothing is awaited.
    fn finish_accept(&mut self, now: Time, ov: &dyn Overlay, op: OpId) {
        if self.relays.get(&op).is_some_and(|r| r.own == Own::Pending) {
            self.resolve_own(now, ov, op);
        }
        if let Some(ok) = self.streams_done.remove(&op) {
            self.stream_done(now, ov, op, ok);
        }
        self.try_finish(now, ov, op);
    }

    pub(super) fn insert_relay(&mut self, op: OpId, relay: Relay) {
        self.wake(relay.deadline, op, Slot::Relay);
        self.forget.push_back((relay.forget_at, op));
        let from = relay.from;
        if self.relays.insert(op, relay).is_none() {
            self.count_entry(op, from);
        }
    }

    /// Splits scatter items: this node's own, and the rest passed on: each to the child whose subtree holds its destination, or
    /// directly to a destination outside every subtree. Where the operation enters a
    /// cluster, the items for the cluster's nodes go by the in-cluster plan instead (each
    /// planned recipient gets its own item and those of its delegation), except below
    /// children whose subtree leaves the cluster: those stay on the tree, so no node is sent
    /// parts of one operation by two senders.
    pub(super) fn route_scatter(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        op: OpId,
        budget_us: u32,
        items: Vec<(NodeId, Vec<u8>)>,
    ) {
        let me = self.me;
        let (from, delegated) = self
            .relays
            .get(&op)
            .map_or((me, false), |r| (r.from, r.delegated));
        let children = self.ordered_children(ov, op.root, from);
        let mut owner: HashMap<NodeId, NodeId> = HashMap::new();
        // Children whose known subtree stays inside the cluster: the plan may serve it.
        let mut inside: HashSet<NodeId> = HashSet::new();
        for c in &children {
            if let Some(sub) = self.subtrees.get(&(op.root, *c)) {
                for n in sub {
                    owner.entry(*n).or_insert(*c);
                }
                if ov.in_cluster(c) && sub.iter().all(|n| ov.in_cluster(n)) {
                    inside.insert(*c);
                }
            }
            owner.insert(*c, *c);
        }
        let entry = from == me || !ov.in_cluster(&from);
        let planning = ov.plans() && (delegated || entry);
        let mut planned: Vec<(NodeId, Vec<u8>)> = Vec::new();
        let mut per_child: BTreeMap<NodeId, Vec<(NodeId, Vec<u8>)>> = BTreeMap::new();
        let mut direct: Vec<(NodeId, Vec<u8>)> = Vec::new();
        for (dest, v) in items {
            if dest == me {
                let r = self.relays.get_mut(&op).expect("relay");
                if !r.delivered {
                    r.delivered = true;
                    r.acc.reached.insert(me);
                    self.events.push_back(Event::Delivered(Delivered {
                        op,
                        group: None,
                        from,
                        kind: DeliveryKind::Scatter,
                        payload: v,
                    }));
                }
            } else if planning
                && dest != from
                && ov.in_cluster(&dest)
                && ov.is_alive(&dest)
                && (delegated || owner.get(&dest).is_none_or(|c| inside.contains(c)))
            {
                planned.push((dest, v));
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
        self.send_scatter_plan(ov, op, budget_us, planned);
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

    /// Sends planned scatter items: the plan over their destinations; each recipient gets
    /// its item and its delegation's.
    fn send_scatter_plan(
        &mut self,
        ov: &dyn Overlay,
        op: OpId,
        budget_us: u32,
        items: Vec<(NodeId, Vec<u8>)>,
    ) {
        if items.is_empty() {
            return;
        }
        let mut by_dest: HashMap<NodeId, Vec<u8>> = items.into_iter().collect();
        let set: Vec<NodeId> = by_dest
            .keys()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let latency = |x: NodeId| ov.rtt_us(x).map_or(ov.send_cost_us(), |r| r / 2);
        for (to, delegation) in plan::schedule(self.me, &set, latency, ov.send_cost_us()) {
            let mine: Vec<(NodeId, Vec<u8>)> = std::iter::once(to)
                .chain(delegation.iter().copied())
                .filter_map(|d| by_dest.remove(&d).map(|v| (d, v)))
                .collect();
            let b = child_budget(budget_us, ov.rtt_us(to));
            let chunks = chunk_items(mine);
            let n = chunks.len();
            for (i, chunk) in chunks.into_iter().enumerate() {
                let plan = Plan {
                    delegation: delegation.clone(),
                    ..Plan::default()
                };
                let body = DownBody::Scatter { items: chunk };
                self.push_down(to, op, b, false, i + 1 < n, plan, body);
            }
            self.relays
                .get_mut(&op)
                .expect("relay")
                .waiting
                .insert(to, true);
        }
    }

    pub(super) fn accept_up(
        &mut self,
        now: Time,
        ov: &dyn Overlay,
        from: NodeId,
        op: OpId,
        last: bool,
        part: UpPart,
    ) {
        if !self.knows(op) {
            // Every node that took part (the root too) keeps its entry until a minute past
            // the deadline: this one is forged or far too late. Not passed on to the root
            // (that would let any member aim its traffic at another), and held against the
            // sender.
            return self.unsolicited(from, wire_len(&part));
        }
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
            // Our answer went up already: late news goes to the root.
            self.send_up(op.root, op, part);
        }
    }
}

/// The sends of a routed operation at `me`: each child of `me` in `route` with the edges of
/// its own subtree. A child that is not alive is stepped over: its children are sent to
/// directly (with their subtrees), so one dead relay does not cut off the nodes below it.
fn routed_targets(ov: &dyn Overlay, me: NodeId, route: &[(NodeId, NodeId)]) -> Vec<Target> {
    let mut out = Vec::new();
    let mut stack: Vec<NodeId> = children_in(route, me).rev().collect();
    let mut seen: HashSet<NodeId> = HashSet::new();
    while let Some(c) = stack.pop() {
        if !seen.insert(c) || c == me {
            continue;
        }
        if ov.is_alive(&c) {
            out.push(Target {
                to: c,
                plan: Plan {
                    route: subtree(route, c),
                    ..Plan::default()
                },
            });
        } else {
            stack.extend(children_in(route, c).rev().collect::<Vec<_>>());
        }
    }
    out
}

/// The receivers of `n` in `route`, in route order.
fn children_in(
    route: &[(NodeId, NodeId)],
    n: NodeId,
) -> impl DoubleEndedIterator<Item = NodeId> + '_ {
    route.iter().filter(move |(s, _)| *s == n).map(|(_, r)| *r)
}

/// The edges of `route` below `n` (a bounded walk: a route with a cycle ends). A leaf gets
/// the one edge `(n, n)`: it must know it is on a route with nothing below it, since an
/// empty route means "follow the tree" and a leaf that did so would send the stripe again
/// to its tree children, who have it from their route parents (seen on the netns testbed:
/// every stripe crossed some wide-area links twice, unpaced, and overflowed them).
fn subtree(route: &[(NodeId, NodeId)], n: NodeId) -> Vec<(NodeId, NodeId)> {
    let mut out = Vec::new();
    let mut seen: HashSet<NodeId> = HashSet::from([n]);
    let mut frontier = vec![n];
    while let Some(x) = frontier.pop() {
        for (s, r) in route.iter().filter(|(s, _)| *s == x) {
            if seen.insert(*r) {
                out.push((*s, *r));
                frontier.push(*r);
            }
        }
    }
    if out.is_empty() {
        out.push((n, n));
    }
    out
}
