//! One node's handling, apart from the rest of the simulator: inputs fed at the node's CPU
//! clock, its outputs drained into a list ([`Output`]) that the simulator then carries. It
//! touches nothing but the node and its [`NodeClock`], which is what lets the nodes of a
//! window run on several threads (see [`super::window`]).

use super::MAX_SAME_INSTANT_TIMEOUTS;
use crate::proto::{Event, GossipMessage, Input, NodeId, Packet, Time};
use crate::sim::node::SimNode;
use std::time::Duration;

/// A node's CPU and timer state, as the simulator keeps it.
#[derive(Clone, Copy, Debug)]
pub(super) struct NodeClock {
    /// Until when the node's CPU is busy (inputs wait for it).
    pub(super) busy_until: Time,
    /// The deadline the node asked for last.
    pub(super) timer: Option<Time>,
    /// The instant of the node's last timeout and how many it had there (a core that asks
    /// for timeouts forever without time advancing is stuck).
    pub(super) same_instant: (Time, u32),
}

impl NodeClock {
    /// A node that starts at `now`.
    pub(super) fn new(now: Time) -> Self {
        NodeClock {
            busy_until: now,
            timer: None,
            same_instant: (Time::ZERO, 0),
        }
    }
}

/// What the CPU model charges: per message sent and per message received.
#[derive(Clone, Copy, Debug)]
pub(super) struct Costs {
    pub(super) send: Duration,
    pub(super) recv: Duration,
}

/// Something for a node to handle.
#[derive(Debug)]
pub(super) enum Work {
    /// An input; `recv` says whether it came over the network (charged a receive).
    Input { input: Input, recv: bool },
    /// A membership message from `from`.
    Gossip { from: NodeId, msg: GossipMessage },
    /// The node's deadline may be due: nothing to feed, but its timer is looked at.
    Wake,
}

/// A window's work for one node: `work` at `at`.
#[derive(Debug)]
pub(super) struct WorkItem {
    pub(super) node: usize,
    pub(super) at: Time,
    pub(super) work: Work,
}

/// Something a node's handling asks of the simulator, with its time: a send's time is the
/// CPU cursor after the send (when the NIC gets it), an event's the time of the handling.
#[derive(Debug)]
pub(super) enum Output {
    /// A message of `len` encoded bytes to `to`.
    Send {
        to: NodeId,
        packet: Packet,
        len: usize,
    },
    /// A packet train to `to`: (id, datagrams, datagram size).
    Train { to: NodeId, train: (u32, u16, u16) },
    /// A core event.
    Event(Event),
}

/// Feeds `work` to `node` at `now` (or when its CPU is free), drains its outputs into `out`
/// and moves its CPU clock past them. Does not re-arm the timer.
pub(super) fn feed<N: SimNode>(
    node: &mut N,
    clock: &mut NodeClock,
    now: Time,
    work: Work,
    costs: Costs,
    out: &mut Vec<(Time, Output)>,
) {
    let start = now.max(clock.busy_until);
    let t = match work {
        Work::Input { input, recv } => {
            let t = if recv { start + costs.recv } else { start };
            node.handle(t, input);
            t
        }
        Work::Gossip { from, msg } => {
            let t = start + costs.recv;
            node.receive_gossip(t, from, msg);
            t
        }
        Work::Wake => return,
    };
    clock.busy_until = drain(node, t, costs, out);
}

/// Fires `node`'s timeout at `now` (or when its CPU is free), as [`feed`] feeds an input.
///
/// # Panics
/// If the node asked for [`MAX_SAME_INSTANT_TIMEOUTS`] timeouts without time advancing.
pub(super) fn fire_timer<N: SimNode>(
    node: &mut N,
    clock: &mut NodeClock,
    index: usize,
    now: Time,
    costs: Costs,
    out: &mut Vec<(Time, Output)>,
) {
    let t = now.max(clock.busy_until);
    let (last, count) = &mut clock.same_instant;
    if *last == t {
        *count += 1;
        assert!(
            *count < MAX_SAME_INSTANT_TIMEOUTS,
            "node {index} asked for {count} timeouts at {t:?} without time advancing"
        );
    } else {
        *last = t;
        *count = 0;
    }
    let input = Work::Input {
        input: Input::Timeout,
        recv: false,
    };
    feed(node, clock, now, input, costs, out);
}

/// Drains the transmits, membership messages and events of `node`, handled at `t`, into
/// `out` in the order the node gives them; returns the CPU cursor after the sends.
pub(super) fn drain<N: SimNode>(
    node: &mut N,
    t: Time,
    costs: Costs,
    out: &mut Vec<(Time, Output)>,
) -> Time {
    let mut cursor = t;
    loop {
        let mut progressed = false;
        while let Some(tx) = node.poll_transmit() {
            progressed = true;
            cursor = cursor + costs.send;
            let len = tx.msg.encoded_len();
            let packet = Packet::Overlay(tx.msg);
            out.push((
                cursor,
                Output::Send {
                    to: tx.to,
                    packet,
                    len,
                },
            ));
        }
        while let Some((to, msg)) = node.poll_gossip() {
            progressed = true;
            cursor = cursor + costs.send;
            let len = gossip_len(&msg);
            let packet = Packet::Gossip(msg);
            out.push((cursor, Output::Send { to, packet, len }));
        }
        while let Some(ev) = node.poll_event() {
            progressed = true;
            if let Event::SendTrain {
                to,
                id,
                packets,
                size,
            } = ev
            {
                // Handed to the NIC when drained, after the messages drained before it.
                let train = (id, packets, size);
                out.push((cursor, Output::Train { to, train }));
            }
            out.push((t, Output::Event(ev)));
        }
        if !progressed {
            return cursor;
        }
    }
}

/// Runs a node through one window: its `work` (in time order), and its timer whenever it
/// comes due before `end`, each at its time but not before `start`. Leaves the node's
/// current deadline in `clock.timer` (at or after `end`, if any).
pub(super) fn run_window<N: SimNode>(
    node: &mut N,
    clock: &mut NodeClock,
    index: usize,
    work: &mut [WorkItem],
    (start, end): (Time, Time),
    costs: Costs,
    out: &mut Vec<(Time, Output)>,
) {
    let mut items = work.iter_mut();
    let mut next = items.next();
    loop {
        let at = next.as_ref().map(|w| w.at.max(start));
        let due = clock
            .timer
            .filter(|&d| d < end && at.is_none_or(|a| d <= a));
        if let Some(d) = due {
            clock.timer = None;
            fire_timer(node, clock, index, d.max(start), costs, out);
        } else if let Some(item) = next {
            let w = std::mem::replace(&mut item.work, Work::Wake);
            feed(node, clock, at.expect("an item"), w, costs, out);
            next = items.next();
        } else {
            return;
        }
        clock.timer = node.poll_timeout();
    }
}

/// Encoded size of a membership message, counted as a tree message's is (a version byte,
/// then postcard).
fn gossip_len(msg: &GossipMessage) -> usize {
    1 + postcard::experimental::serialized_size(msg).unwrap_or(0)
}
