//! Sending: down the tree or by the in-cluster plan, answers up, local delivery and timer
//! slots.

use super::{Collectives, Plan, Slot, Target, barrier_key, is_empty};
use crate::proto::collective::acc::split_part;
use crate::proto::collective::{
    BarrierOutcome, Delivered, DeliveryKind, Overlay, PART_LIMIT, plan,
};
use crate::proto::message::cover_tag;
use crate::proto::message::{CollectiveMessage, DownBody, Message, OpId, Purpose, UpPart};
use crate::proto::{Event, NodeId, Time, Transmit};
use std::cmp::Reverse;
use std::collections::HashSet;

impl Collectives {
    pub(super) fn send_up(&mut self, to: NodeId, op: OpId, part: UpPart) {
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

    pub(super) fn send_down(
        &mut self,
        to: NodeId,
        op: OpId,
        budget_us: u32,
        direct: bool,
        more: bool,
        body: DownBody,
    ) {
        self.push_down(to, op, budget_us, direct, more, Plan::default(), body);
    }

    /// Passes the operation on to `to` with its part of the in-cluster plan.
    pub(super) fn send_down_planned(
        &mut self,
        to: NodeId,
        op: OpId,
        budget_us: u32,
        plan: Plan,
        body: DownBody,
    ) {
        self.push_down(to, op, budget_us, false, false, plan, body);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_down(
        &mut self,
        to: NodeId,
        op: OpId,
        budget_us: u32,
        direct: bool,
        more: bool,
        plan: Plan,
        body: DownBody,
    ) {
        // A relay's (or, for direct requests, the origin's) scope travels with every send.
        let group = (self.relays.get(&op).and_then(|r| r.group.clone()))
            .or_else(|| self.origins.get(&op).and_then(|o| o.group.clone()));
        self.transmits.push_back(Transmit {
            to,
            msg: Message::Collective(CollectiveMessage::Down {
                op,
                budget_us,
                direct,
                more,
                plan: plan.delegation,
                hoisted: plan.hoisted,
                covered: plan.covered,
                body,
                route: plan.route,
                group,
            }),
        });
    }

    /// Where this relay sends the operation: the tree children, except that inside a
    /// cluster the sends follow a plan (see `plan.rs`), and that the node where the
    /// operation enters a cluster also sends to the tree children outside the cluster of
    /// the nodes its plan covers (one in-cluster hop less before every other cluster; they
    /// are told, so they do not send again). Order: children outside the cluster first
    /// (they have the long way to go; [`Collectives::far_targets`]), then those hoisted,
    /// then the plan, then the tree children in the cluster the plan does not reach
    /// ([`Collectives::near_targets`]).
    ///
    /// Who follows the tree inside a cluster: only the nodes the plan does not reach. The
    /// plan's recipients learn which those are from the `covered` tags, so a node the plan
    /// already reached is not sent the operation a second time by its tree parent, and a
    /// node new below a recipient since the plan was learned is still reached.
    ///
    /// The first part: the tree children outside the cluster, except those an entry already
    /// sent to (`hoisted`). Sets the relay's `entry` flag when it plans for its cluster, and
    /// records this node's children outside the cluster in the answer.
    pub(super) fn far_targets(
        &mut self,
        ov: &dyn Overlay,
        op: OpId,
        from: NodeId,
        received: &Plan,
    ) -> Vec<Target> {
        let me = self.me;
        let children = self.ordered_children(ov, op.root, from);
        let entry = !ov.in_cluster(&from) || from == me;
        let far: Vec<NodeId> = children.into_iter().filter(|c| !ov.in_cluster(c)).collect();
        if let Some(r) = self.relays.get_mut(&op) {
            r.entry = entry && ov.plans();
            r.acc.exits.extend(far.iter().map(|c| (me, *c)));
        }
        far.into_iter()
            .filter(|c| !received.hoisted.contains(c))
            .map(|to| Target {
                to,
                plan: Plan::default(),
            })
            .collect()
    }

    /// The second part (see [`Collectives::far_targets`]): hoisted children, the plan, and
    /// the near tree children it does not reach.
    pub(super) fn near_targets(
        &mut self,
        ov: &dyn Overlay,
        op: OpId,
        from: NodeId,
        received: Plan,
    ) -> Vec<Target> {
        let me = self.me;
        let children = self.ordered_children(ov, op.root, from);
        let near = |x: &NodeId| ov.in_cluster(x);
        let entry = !near(&from) || from == me;
        let delegate = from != me && near(&from);
        // A recipient of an entry's plan (perhaps with nothing to pass on itself). A reach
        // longer than the membership is forged or stale: followed as the tree.
        let planned = delegate
            && !received.covered.is_empty()
            && received.covered.len() <= ov.alive_members().len();
        let far: Vec<NodeId> = children.iter().filter(|c| !near(c)).copied().collect();
        let tree = |c: NodeId| Target {
            to: c,
            plan: Plan::default(),
        };
        let mut out: Vec<Target> = Vec::new();
        let set: Vec<NodeId> = if !received.delegation.is_empty() {
            received.delegation
        } else if entry {
            self.local.get(&op.root).cloned().unwrap_or_default()
        } else {
            Vec::new()
        };
        let set: Vec<NodeId> = set
            .into_iter()
            .filter(|x| *x != me && *x != from && ov.is_alive(x) && near(x))
            .collect();
        if set.is_empty() && !planned {
            out.extend(children.iter().filter(|c| near(c)).map(|c| tree(*c)));
            return out;
        }
        // The plan's reach: the entry's whole set, or the tags a recipient was given.
        let covered: Vec<u16> = if planned {
            received.covered
        } else {
            set.iter().map(|x| cover_tag(&op, x)).collect()
        };
        // Hoisting: only the entry, over the nodes its plan covers.
        let hoist: Vec<(NodeId, NodeId)> = if entry {
            let sent: HashSet<NodeId> = far.iter().copied().collect();
            self.hoist
                .get(&op.root)
                .into_iter()
                .flatten()
                .filter(|(p, f)| {
                    set.contains(p)
                        && *f != from
                        && *f != me
                        && !sent.contains(f)
                        && !near(f)
                        && ov.is_alive(f)
                })
                .copied()
                .collect()
        } else {
            Vec::new()
        };
        let mut hoisted: Vec<NodeId> = Vec::new();
        for (_, f) in &hoist {
            if !hoisted.contains(f) {
                hoisted.push(*f);
                out.push(tree(*f));
            }
        }
        // Unmeasured (rare: discovery groups measured peers): as far as a send costs.
        let latency = |x: NodeId| ov.rtt_us(x).map_or(ov.send_cost_us(), |r| r / 2);
        for (c, delegation) in plan::schedule(me, &set, latency, ov.send_cost_us()) {
            // What the receiver and its delegation must not send again: what this entry
            // hoisted for them, or what a delegate was told, passed on whole.
            let mut told: Vec<NodeId> = hoist
                .iter()
                .filter(|(p, _)| *p == c || delegation.contains(p))
                .map(|(_, f)| *f)
                .collect();
            if delegate {
                told.extend(received.hoisted.iter().copied());
            }
            told.sort_unstable();
            told.dedup();
            out.push(Target {
                to: c,
                plan: Plan {
                    delegation,
                    hoisted: told,
                    covered: covered.clone(),
                    route: Vec::new(),
                    group: None,
                },
            });
        }
        // Near children the plan does not reach follow the tree; they are told the plan's
        // reach in turn, so that below them, too, only what it misses is sent to.
        let planned_set: HashSet<NodeId> = set.iter().copied().collect();
        let told = if delegate {
            received.hoisted.clone()
        } else {
            Vec::new()
        };
        // The entry knows its set exactly; only a recipient goes by the tags.
        let reached = |c: &NodeId| {
            planned_set.contains(c) || (planned && covered.contains(&cover_tag(&op, c)))
        };
        out.extend(
            children
                .iter()
                .filter(|c| near(c) && !reached(c))
                .map(|c| Target {
                    to: *c,
                    plan: Plan {
                        delegation: Vec::new(),
                        hoisted: told.clone(),
                        covered: covered.clone(),
                        route: Vec::new(),
                        group: None,
                    },
                }),
        );
        out
    }

    pub(super) fn deliver(
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
        let group = self.relays.get(&op).and_then(|r| r.group.clone());
        self.events.push_back(Event::Delivered(Delivered {
            op,
            group,
            from,
            kind,
            payload,
        }));
    }

    /// Children in `root`'s tree except `from`, the one with the most descendants first.
    pub(super) fn ordered_children(
        &self,
        ov: &dyn Overlay,
        root: NodeId,
        from: NodeId,
    ) -> Vec<NodeId> {
        let mut children: Vec<NodeId> = ov
            .children(root)
            .into_iter()
            .filter(|c| *c != from && *c != self.me && ov.is_alive(c))
            .collect();
        if ov.descendants_first() {
            children.sort_by_key(|c| {
                let n = self.subtrees.get(&(root, *c)).map_or(1, |s| s.len());
                (Reverse(n), *c)
            });
        } else {
            children.sort_unstable();
        }
        children
    }

    pub(super) fn wake(&mut self, at: Time, op: OpId, slot: Slot) {
        self.wakes.push(Reverse((at, op, slot)));
    }

    // ---- the root --------------------------------------------------------------------

    /// Sends an answer to `to`, or to the root when `to` is gone.
    pub(super) fn reply(&mut self, ov: &dyn Overlay, to: NodeId, op: OpId, part: UpPart) {
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
}
