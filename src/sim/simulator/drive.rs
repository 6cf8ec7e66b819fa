//! Driving the cores: inputs, the drain rule, the CPU and network models, the event loop.

use super::handling::{self, Costs, NodeClock, Output, Work};
use super::{MAX_CYCLE_RECORDS, ParentChange, RECENT_CHANGES, Sim};
use crate::proto::{Command, Event, Input, NodeId, Packet, Time};
use crate::sim::bandwidth;
use crate::sim::invariants::CycleRecord;
use crate::sim::node::SimNode;
use crate::sim::queue::Pending;
use crate::sim::traffic;
use std::time::Duration;

impl<N: SimNode> Sim<N> {
    /// Hands `input` to node `idx` at `max(now, busy_until) (+ cpu_recv)`, drains it and
    /// re-arms its timer.
    pub(super) fn feed(&mut self, idx: usize, input: Input, recv: bool) {
        self.feed_work(idx, Work::Input { input, recv });
    }

    /// [`Sim::feed`] for any [`Work`]; the outputs are carried at once, in order.
    fn feed_work(&mut self, idx: usize, work: Work) {
        let now = self.now;
        self.handle_alone(idx, |n, c, costs, out| {
            handling::feed(n, c, now, work, costs, out)
        });
        self.rearm(idx);
    }

    /// Drains the outputs of node `idx` handled at `t` and carries them; returns the CPU
    /// cursor after the sends.
    pub(super) fn drain(&mut self, idx: usize, t: Time) -> Time {
        self.handle_alone(idx, |n, _, costs, out| handling::drain(n, t, costs, out))
    }

    /// Runs `handle` on node `idx` and its clock outside a window, then carries the
    /// outputs it drained, in order.
    fn handle_alone<R>(
        &mut self,
        idx: usize,
        handle: impl FnOnce(&mut N, &mut NodeClock, Costs, &mut Vec<(Time, Output)>) -> R,
    ) -> R {
        let mut out = std::mem::take(&mut self.outputs);
        let costs = self.costs();
        let r = handle(&mut self.nodes[idx], &mut self.clocks[idx], costs, &mut out);
        self.carry_all(idx, &mut out);
        self.outputs = out;
        r
    }

    /// The CPU model's charges.
    pub(super) fn costs(&self) -> Costs {
        Costs {
            send: self.cfg.cpu_send,
            recv: self.cfg.cpu_recv,
        }
    }

    /// Carries the outputs of node `idx` in `out`, in order, and empties it.
    fn carry_all(&mut self, idx: usize, out: &mut Vec<(Time, Output)>) {
        for (at, output) in out.drain(..) {
            self.carry(idx, at, output);
        }
    }

    /// Carries one output of node `idx`: a send leaves at `at`, an event is recorded as
    /// handled at `at`.
    pub(super) fn carry(&mut self, idx: usize, at: Time, output: Output) {
        match output {
            Output::Send { to, packet, len } => {
                self.stats.cpu_us += self.cfg.cpu_send.as_micros();
                match &packet {
                    Packet::Overlay(msg) => traffic::record(&mut self.stats.traffic, msg, len),
                    Packet::Gossip(msg) => {
                        traffic::record_gossip(&mut self.stats.traffic, msg, len)
                    }
                    Packet::Query(_) | Packet::Data(_) | Packet::Bulk(_) | Packet::Token(_) => {}
                }
                self.send(idx, to, packet, len, at);
            }
            Output::Train { to, train } => self.send_train(idx, to, train, at),
            Output::Event(ev) => self.on_event(idx, at, ev),
        }
    }

    /// Records the node's current deadline. A queue entry is added only when the deadline
    /// moved earlier than the one already queued; a later deadline is picked up lazily when
    /// the queued entry comes due (so re-arming after every input does not flood the queue).
    pub(super) fn rearm(&mut self, idx: usize) {
        if !self.alive[idx] {
            self.clocks[idx].timer = None;
            return;
        }
        let next = self.nodes[idx].poll_timeout();
        self.clocks[idx].timer = next;
        if let Some(deadline) = next
            && self.timer_queued[idx].is_none_or(|q| deadline < q)
        {
            self.push_timer(idx, deadline);
        }
    }

    pub(super) fn push_timer(&mut self, node: usize, deadline: Time) {
        self.timer_queued[node] = Some(deadline);
        self.queue
            .push(deadline.max(self.now), Pending::Timer { node, deadline });
    }

    /// Carries a packet of `len` bytes from node `from` to `to`, departing at `depart`.
    pub(super) fn send(
        &mut self,
        from: usize,
        to: NodeId,
        packet: Packet,
        len: usize,
        depart: Time,
    ) {
        self.stats.messages += 1;
        self.stats.bytes += len as u64;
        let Some(&to) = self.index.get(&to) else {
            self.stats.dropped_unknown += 1;
            return;
        };
        self.trace_packet(from, to, &packet, depart);
        let (cf, ct) = (self.cluster_of[from], self.cluster_of[to]);
        if self.net.is_partitioned(cf, ct) {
            self.stats.dropped_partition += 1;
            return self.report_loss(from, to, depart);
        }
        if self.cfg.loss > 0.0 && self.rng.unit() < self.cfg.loss {
            self.stats.dropped_loss += 1;
            return self.report_loss(from, to, depart);
        }
        // The sender's NIC: its sends come in time order, so it is served at once.
        let Some(left) = self.pipes.nic(from, bandwidth::since_zero(depart), len) else {
            self.stats.dropped_tail += 1;
            return self.report_loss(from, to, depart);
        };
        if self.pipes.has_link(cf, ct) {
            // A shared link takes its senders' datagrams in time order: through the queue.
            let what = Pending::Link {
                from,
                to,
                packet,
                len,
                at: left,
            };
            return self.schedule_link(bandwidth::at_or_after(left), what);
        }
        self.deliver(from, to, packet, left);
    }

    /// A message `len` bytes long reaches the shared link between the clusters of `from`
    /// and `to` at `at` (the simulator's clock at `now`): through it, or lost to a full
    /// buffer.
    pub(super) fn link_arrival(
        &mut self,
        (from, to): (usize, usize),
        packet: Packet,
        len: usize,
        at: Duration,
        now: Time,
    ) {
        let (cf, ct) = (self.cluster_of[from], self.cluster_of[to]);
        match self.pipes.link(cf, ct, at, len) {
            Some(left) => self.deliver(from, to, packet, left),
            None => {
                self.stats.dropped_tail += 1;
                self.report_loss(from, to, now);
            }
        }
    }

    /// Queues `packet` for delivery one latency after it left its last pipe at `left`.
    fn deliver(&mut self, from: usize, to: usize, packet: Packet, left: Duration) {
        let (cf, ct) = (self.cluster_of[from], self.cluster_of[to]);
        let at = bandwidth::at_or_after(left) + self.net.latency(cf, ct);
        self.queue.push(at, Pending::Deliver { from, to, packet });
    }

    /// Tells `from` (if [`SimConfig::report_losses`]) that its message to `to` was lost.
    pub(super) fn report_loss(&mut self, from: usize, to: usize, at: Time) {
        if self.cfg.report_losses {
            self.queue.push(
                at,
                Pending::Lost {
                    node: from,
                    peer: to,
                },
            );
        }
    }

    pub(super) fn on_event(&mut self, idx: usize, t: Time, ev: Event) {
        match &ev {
            Event::ParentChanged { root, old, new } => {
                self.on_parent_changed(idx, t, *root, *old, *new)
            }
            Event::Unsolicited { from, bytes } => {
                *self.stats.unsolicited.entry((idx, *from)).or_default() += bytes;
            }
            Event::RootRemoved { root } => {
                let tracked = self.index.get(root).copied();
                if let Some(r) = tracked.filter(|&r| self.view.parent(r, idx).is_some()) {
                    self.view.clear(r, idx);
                    self.dirty[r] = true;
                }
            }
            _ => {}
        }
        if let Some(log) = &mut self.log {
            log.push((t, idx, ev));
        }
    }

    pub(super) fn on_parent_changed(
        &mut self,
        idx: usize,
        t: Time,
        root: NodeId,
        old: Option<NodeId>,
        new: Option<NodeId>,
    ) {
        let Some(&r) = self.index.get(&root) else {
            self.stats.unknown_ids += 1;
            return;
        };
        let new_idx = match new {
            None => None,
            Some(p) => match self.index.get(&p) {
                Some(&i) => Some(i),
                None => {
                    self.stats.unknown_ids += 1;
                    return;
                }
            },
        };
        let prev = self.view.set(r, idx, new_idx);
        if prev.map(|i| self.ids[i]) != old {
            self.stats.event_mismatches += 1;
        }
        self.stats.parent_changes += 1;
        let own = self.cluster_of[idx];
        if prev.is_some_and(|p| self.cluster_of[p] == own)
            && new_idx.is_some_and(|p| self.cluster_of[p] == own)
        {
            self.stats.parent_changes_intra += 1;
        }
        if self.recent.len() == RECENT_CHANGES {
            self.recent.pop_front();
        }
        self.recent.push_back(ParentChange {
            at: t,
            root: r,
            node: idx,
            old: prev,
            new: new_idx,
        });
        self.good_since = None;
        self.dirty[r] = true;
        let cycle = new_idx.and_then(|_| self.view.find_cycle(r, idx, &self.alive));
        if let Some(cycle) = cycle {
            self.cycles_seen += 1;
            if self.cycles.len() < MAX_CYCLE_RECORDS {
                let nodes = cycle.iter().map(|&i| self.ids[i]).collect();
                self.cycles.push(CycleRecord { at: t, root, nodes });
            }
        }
    }

    pub(super) fn process(&mut self, what: Pending) {
        match what {
            Pending::Deliver { from, to, packet } => {
                if !self.alive[to] {
                    self.stats.dropped_dead += 1;
                    return;
                }
                self.stats.delivered += 1;
                let from = self.ids[from];
                match packet {
                    Packet::Overlay(msg) => self.feed(to, Input::Received { from, msg }, true),
                    Packet::Gossip(msg) => self.feed_work(to, Work::Gossip { from, msg }),
                    // Nodes in the simulator send neither queries nor data streams.
                    Packet::Query(_) | Packet::Data(_) | Packet::Bulk(_) | Packet::Token(_) => {}
                }
            }
            Pending::Link {
                from,
                to,
                packet,
                len,
                at,
            } => self.link_arrival((from, to), packet, len, at, self.now),
            Pending::TrainLink { train, seq, at } => self.train_link(train, seq, at),
            Pending::TrainArrived { train } => self.train_arrived(train),
            Pending::Timer { node, deadline } => {
                if !self.alive[node] || self.timer_queued[node] != Some(deadline) {
                    return;
                }
                self.timer_queued[node] = None;
                match self.clocks[node].timer {
                    None => return,
                    Some(want) if want > self.now => {
                        self.push_timer(node, want);
                        return;
                    }
                    Some(_) => self.clocks[node].timer = None,
                }
                let now = self.now;
                self.handle_alone(node, |n, c, costs, out| {
                    handling::fire_timer(n, c, node, now, costs, out)
                });
                self.rearm(node);
            }
            Pending::Member { to, subject, down } => {
                if !self.alive[to] {
                    return;
                }
                let id = self.ids[subject];
                match down {
                    // A node that is already gone again is not announced as up.
                    None if !self.alive[subject] => {}
                    None => self.feed(to, Input::MemberUp { id }, false),
                    Some(reason) => self.feed(to, Input::MemberDown { id, reason }, false),
                }
            }
            Pending::Action(a) => {
                self.apply(a);
            }
            Pending::Lost { node, peer } => {
                if self.alive[node] {
                    let peer = self.ids[peer];
                    self.feed(node, Input::LinkLost { peer }, false);
                }
            }
            Pending::JoinCheck { node } => self.check_join(node),
        }
    }

    /// Hands an application command to node `idx` now (ignored if it is not alive), e.g. a
    /// collective operation to start.
    pub fn command(&mut self, idx: usize, cmd: Command) {
        if self.alive.get(idx).copied().unwrap_or(false) {
            self.feed(idx, Input::Command(cmd), false);
        }
    }

    /// Hands node `idx` a measurement its driver would make now (ignored if it is not
    /// alive): a packet train, a transfer's rate, a connection that ran its path full
    /// ([`Input::PathSaturated`], which the simulator's links do not report by
    /// themselves).
    pub fn measure(&mut self, idx: usize, m: Input) {
        if self.alive.get(idx).copied().unwrap_or(false) {
            self.feed(idx, m, false);
        }
    }

    // ----- running ---------------------------------------------------------------------

    /// Runs until virtual time `t` (events at exactly `t` included).
    pub fn run_until(&mut self, t: Time) {
        self.run_inner(t, |_| false);
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// Runs until the run is converged (see [`Sim::is_converged`]) or `max` more virtual time
    /// has passed. Returns the convergence time (since t = 0), or `None` if `max` ran out.
    /// On success every (node, root) pair of the parent view is cross-checked against the
    /// cores.
    pub fn run_until_converged(&mut self, max: Duration) -> Option<Duration> {
        let deadline = self.now + max;
        if !self.is_converged() && !self.run_inner(deadline, |s| s.is_converged()) {
            return None;
        }
        self.cross_check_all();
        self.converged_at()
            .map(|t| Duration::from_micros(t.as_micros()))
    }

    /// Runs until a snapshot taken after this call shows every live tree spanning every live
    /// node, or `max` has passed. Returns the time from the call to that snapshot.
    pub fn run_until_spanning(&mut self, max: Duration) -> Option<Duration> {
        let start = self.now;
        let seq = self.snap.seq;
        let ok = self.run_inner(start + max, |s| s.snap.seq > seq && s.snap.all_spanning());
        ok.then(|| self.snap.at - start)
    }

    /// Crashes `node` now and measures the repair: the time until the first snapshot at which
    /// every live root's tree spans every live node again (`None` if not within `max`).
    /// Resolution is the check interval (see [`Sim::set_check_interval`]).
    pub fn measure_repair(&mut self, node: usize, max: Duration) -> Option<Duration> {
        self.crash(node);
        self.run_until_spanning(max)
    }

    /// Runs events and snapshots up to `until`; stops early (returning true) as soon as
    /// `stop` holds after a snapshot.
    pub(super) fn run_inner(&mut self, until: Time, mut stop: impl FnMut(&Self) -> bool) -> bool {
        loop {
            let next = self.queue.peek_time().filter(|&t| t <= until);
            if self.next_check <= until && next.is_none_or(|e| self.next_check < e) {
                self.now = self.now.max(self.next_check);
                self.take_snapshot();
                self.next_check = self.next_check + self.check_interval;
                if stop(self) {
                    return true;
                }
                continue;
            }
            if next.is_none() {
                break;
            }
            if self.run_window(until) {
                continue;
            }
            let (at, what) = self.queue.pop().expect("peeked");
            self.now = self.now.max(at);
            self.process(what);
        }
        self.now = self.now.max(until);
        false
    }
}
