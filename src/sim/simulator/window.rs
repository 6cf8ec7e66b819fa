//! Windows: the nodes' handling spread over the machine's cores, with the same results
//! whatever their number.
//!
//! Nothing a node sends reaches another node sooner than the smallest one-way latency of
//! the network, `L`. So once the clock is at `T`, the events of `[T, T + L)` that are a
//! node's own (a message delivered to it, its timer, a loss reported to it) can be handled
//! node by node, each node on its own, in any order or at once: whatever one of them sends
//! arrives at `T + L` or later. A window is that: its events are taken from the queue,
//! grouped by node, and each node runs through its group (and its timer, when it comes due
//! inside the window) on whichever thread is free ([`handling::run_window`]); the nodes'
//! outputs are then carried one at a time, in order of (time, node, the node's own order),
//! which does not depend on how the nodes were spread, together with the shared links'
//! arrivals of the window (a link takes its datagrams in time order: an arrival inside the
//! window waits in the window's own queue, [`Merge`]).
//!
//! What touches more than one node's state (a scenario action, a membership notice, a
//! join check, a train's report) ends the window before it and is handled alone, as are
//! all events when some latency is zero.

use super::Sim;
use super::handling::{self, Costs, NodeClock, Output, Work, WorkItem};
use crate::proto::{Input, Packet, Time};
use crate::sim::node::SimNode;
use crate::sim::queue::Pending;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// The window's own queue of things to carry: the nodes' outputs and the shared links'
/// arrivals before the window's end, by (time, order of insertion).
#[derive(Debug, Default)]
pub(super) struct Merge {
    /// The window's end (exclusive): a link arrival before it is carried in the window.
    end: Time,
    heap: BinaryHeap<Reverse<(Time, usize)>>,
    items: Vec<Option<Carry>>,
}

/// Something a window carries.
#[derive(Debug)]
enum Carry {
    /// An output of node `.0`.
    Output(usize, Output),
    /// A link arrival ([`Pending::Link`] or [`Pending::TrainLink`]).
    Link(Pending),
}

impl Merge {
    fn push(&mut self, at: Time, what: Carry) {
        self.heap.push(Reverse((at, self.items.len())));
        self.items.push(Some(what));
    }

    fn pop(&mut self) -> Option<(Time, Carry)> {
        let Reverse((at, i)) = self.heap.pop()?;
        Some((at, self.items[i].take().expect("each item is popped once")))
    }
}

/// One node's part of a window, with what it needs, borrowed apart from every other's.
struct Job<'a, N> {
    index: usize,
    node: &'a mut N,
    clock: &'a mut NodeClock,
    work: &'a mut [WorkItem],
    out: &'a mut Vec<(Time, Output)>,
}

/// Below this many items a window's nodes are not spread: handing them to another thread
/// would cost more than it saves.
const MIN_SPREAD: usize = 4;

impl<N: SimNode> Sim<N> {
    /// Runs the next window, if the next event starts one, up to `until` (inclusive) and
    /// the next snapshot; returns whether it did (if not, the next event is to be handled
    /// alone).
    pub(super) fn run_window(&mut self, until: Time) -> bool {
        let Some((head, what)) = self.queue.peek() else {
            return false;
        };
        if self.lookahead.is_zero() || ends_window(what) {
            return false;
        }
        let start = self.now.max(head);
        // Nothing is handled before `start`: what a window sends arrives at or after its
        // end, after everything the last window handled (its end was at most this one's).
        self.now = start;
        let end = (start + self.lookahead)
            .min(self.next_check + Duration::from_micros(1))
            .min(until + Duration::from_micros(1));
        self.take_window(end);
        let mut work = std::mem::take(&mut self.work);
        // Stable: each node's items stay in time order.
        work.sort_by_key(|w| w.node);
        let nodes = self.run_jobs(&mut work, (start, end));
        work.clear();
        self.work = work;
        self.carry_window(&nodes, end);
        for &i in &nodes {
            if let Some(d) = self.clocks[i].timer
                && self.timer_queued[i].is_none_or(|q| d < q)
            {
                self.push_timer(i, d);
            }
        }
        self.window_nodes = nodes;
        true
    }

    /// Takes the window's events before `end` from the queue: each node's into
    /// `self.work`, the links' arrivals into `self.window_links`.
    fn take_window(&mut self, end: Time) {
        while let Some((at, what)) = self.queue.peek() {
            if at >= end || ends_window(what) {
                break;
            }
            let (at, what) = self.queue.pop().expect("peeked");
            self.now = self.now.max(at);
            let (node, work) = match what {
                Pending::Deliver { to, .. } | Pending::Lost { node: to, .. } if !self.alive[to] => {
                    if matches!(what, Pending::Deliver { .. }) {
                        self.stats.dropped_dead += 1;
                    }
                    continue;
                }
                Pending::Deliver { from, to, packet } => {
                    self.stats.delivered += 1;
                    let from = self.ids[from];
                    let work = match packet {
                        Packet::Overlay(msg) => Work::Input {
                            input: Input::Received { from, msg },
                            recv: true,
                        },
                        Packet::Gossip(msg) => Work::Gossip { from, msg },
                        Packet::Query(_) | Packet::Data(_) | Packet::Bulk(_) | Packet::Token(_) => {
                            continue;
                        }
                    };
                    (to, work)
                }
                Pending::Lost { node, peer } => {
                    let peer = self.ids[peer];
                    let input = Input::LinkLost { peer };
                    (node, Work::Input { input, recv: false })
                }
                Pending::Timer { node, deadline } => {
                    if !self.alive[node] || self.timer_queued[node] != Some(deadline) {
                        continue;
                    }
                    self.timer_queued[node] = None;
                    (node, Work::Wake)
                }
                link @ (Pending::Link { .. } | Pending::TrainLink { .. }) => {
                    self.window_links.push((at, link));
                    continue;
                }
                other => unreachable!("{other:?} ends a window"),
            };
            self.work.push(WorkItem { node, at, work });
        }
    }

    /// Runs every node of `work` (sorted by node) through the window; returns the nodes,
    /// ascending, whose outputs are in `self.window_outputs[..]` in the same order.
    fn run_jobs(&mut self, work: &mut [WorkItem], window: (Time, Time)) -> Vec<usize> {
        let mut nodes = std::mem::take(&mut self.window_nodes);
        nodes.clear();
        let costs = self.costs();
        let mut distinct = 0;
        for (i, w) in work.iter().enumerate() {
            if i == 0 || work[i - 1].node != w.node {
                distinct += 1;
            }
        }
        if self.window_outputs.len() < distinct {
            self.window_outputs.resize_with(distinct, Vec::new);
        }
        let mut jobs = Vec::with_capacity(distinct);
        let (mut node_rest, mut clock_rest) = (&mut self.nodes[..], &mut self.clocks[..]);
        let mut out_rest = &mut self.window_outputs[..];
        let (mut work_rest, mut base) = (work, 0);
        while let Some(first) = work_rest.first() {
            let index = first.node;
            let n = work_rest.iter().take_while(|w| w.node == index).count();
            let (mine, rest) = std::mem::take(&mut work_rest).split_at_mut(n);
            work_rest = rest;
            let (node, rest) = std::mem::take(&mut node_rest)[index - base..]
                .split_first_mut()
                .expect("a node of the simulation");
            node_rest = rest;
            let (clock, rest) = std::mem::take(&mut clock_rest)[index - base..]
                .split_first_mut()
                .expect("its clock");
            clock_rest = rest;
            base = index + 1;
            let (out, rest) = std::mem::take(&mut out_rest)
                .split_first_mut()
                .expect("an output list per node of the window");
            out_rest = rest;
            nodes.push(index);
            jobs.push(Job {
                index,
                node,
                clock,
                work: mine,
                out,
            });
        }
        self.stats.windows += 1;
        if run_jobs(&mut jobs, window, costs) {
            self.stats.windows_spread += 1;
        }
        nodes
    }

    /// Carries the window's outputs and link arrivals in order.
    fn carry_window(&mut self, nodes: &[usize], end: Time) {
        let mut merge = std::mem::take(&mut self.merge_buffer);
        merge.end = end;
        for (at, link) in self.window_links.drain(..) {
            merge.push(at, Carry::Link(link));
        }
        for (k, &node) in nodes.iter().enumerate() {
            for (at, output) in self.window_outputs[k].drain(..) {
                merge.push(at, Carry::Output(node, output));
            }
        }
        self.merge = Some(merge);
        while let Some((at, what)) = self.merge.as_mut().and_then(Merge::pop) {
            match what {
                Carry::Output(node, output) => self.carry(node, at, output),
                Carry::Link(Pending::Link {
                    from,
                    to,
                    packet,
                    len,
                    at: reached,
                }) => self.link_arrival((from, to), packet, len, reached, at),
                Carry::Link(Pending::TrainLink { train, seq, at }) => {
                    self.train_link(train, seq, at)
                }
                Carry::Link(other) => unreachable!("{other:?} is no link arrival"),
            }
        }
        let mut merge = self.merge.take().expect("set above");
        merge.items.clear();
        self.merge_buffer = merge;
    }

    /// Queues a link arrival at `at`: in the window's own queue if one is being carried
    /// and `at` is before its end, else in the simulator's.
    pub(super) fn schedule_link(&mut self, at: Time, what: Pending) {
        match &mut self.merge {
            Some(m) if at < m.end => m.push(at, Carry::Link(what)),
            _ => self.queue.push(at, what),
        }
    }
}

/// Whether `what` touches more than one node's state (or the simulator's): it is handled
/// alone, between windows.
fn ends_window(what: &Pending) -> bool {
    !matches!(
        what,
        Pending::Deliver { .. }
            | Pending::Lost { .. }
            | Pending::Timer { .. }
            | Pending::Link { .. }
            | Pending::TrainLink { .. }
    )
}

/// Runs the jobs, split in two halves of about equal work on two threads, recursively;
/// returns whether they were split.
fn run_jobs<N: SimNode>(jobs: &mut [Job<'_, N>], window: (Time, Time), costs: Costs) -> bool {
    let weight: usize = jobs.iter().map(|j| j.work.len()).sum();
    if jobs.len() < 2 || weight < MIN_SPREAD {
        for j in jobs {
            run_job(j, window, costs);
        }
        return false;
    }
    let mut acc = 0;
    let mut mid = jobs.len() - 1;
    for (i, j) in jobs.iter().enumerate() {
        acc += j.work.len();
        if 2 * acc >= weight {
            mid = i + 1;
            break;
        }
    }
    let (a, b) = jobs.split_at_mut(mid.clamp(1, jobs.len() - 1));
    rayon::join(|| run_jobs(a, window, costs), || run_jobs(b, window, costs));
    true
}

fn run_job<N: SimNode>(j: &mut Job<'_, N>, window: (Time, Time), costs: Costs) {
    handling::run_window(j.node, j.clock, j.index, j.work, window, costs, j.out);
}
