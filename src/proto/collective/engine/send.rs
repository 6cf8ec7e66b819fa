//! Sending: down the tree or by the in-cluster plan, answers up, local delivery and timer
//! slots.

use super::*;

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
        self.send_down_planned(to, op, budget_us, direct, more, Vec::new(), body);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_down_planned(
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
    pub(super) fn targets(
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
        self.events.push_back(Event::Delivered(Delivery {
            op,
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
        children.sort_by_key(|c| {
            let n = self.subtrees.get(&(root, *c)).map_or(1, |s| s.len());
            (Reverse(n), *c)
        });
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
