//! What the API's commands and the connections' reports become: node inputs, dials,
//! streams and replies.

use super::{ApiCommand, Driver};
use crate::net::link::LinkInput;
use crate::net::ops::OpCommand;
use crate::net::stripes::Spread;
use crate::net::view::BroadcastPlan;
use crate::proto::{Command, Input, NodeInput, StripePlan};
use tracing::{debug, warn};

impl Driver {
    pub(super) fn handle_command(&mut self, cmd: ApiCommand) {
        match cmd {
            ApiCommand::Status(reply) => {
                let _ = reply.send(self.status());
            }
            ApiCommand::Join(addr, reply) => {
                self.next_join += 1;
                let request = self.next_join;
                self.joins.insert(request, reply);
                let name = crate::net::identity::ANY_NODE.to_string();
                self.links
                    .spawn_dial(addr, name, Some(request), move |error| {
                        LinkInput::JoinFailed { request, error }
                    });
            }
            ApiCommand::Tree(root, reply) => self.start_tree_query(root, reply),
            ApiCommand::SetForwarding(forwarding) => {
                debug!(?forwarding, "data plane forwarding changed");
                self.streams.set_forwarding(forwarding);
            }
            ApiCommand::SetGroups(groups) => {
                debug!(?groups, "groups changed");
                self.node
                    .handle(self.now(), NodeInput::SetGroups { groups });
            }
            ApiCommand::SetSpread(spread) => {
                debug!(?spread, "large broadcasts spread changed");
                self.spread = spread;
            }
            ApiCommand::Connect(peer, reply) => {
                if let Some(conn) = self.links.conn(&peer) {
                    let _ = reply.send(Some(conn));
                    return;
                }
                let gossip = self.node.gossip();
                if gossip.record(&peer).is_none() {
                    // No address to dial: unreachable, now rather than never.
                    let _ = reply.send(None);
                    return;
                }
                self.conn_waiters.entry(peer).or_default().push(reply);
                self.links.want(peer, |p| gossip.record(&p).map(|r| r.addr));
            }
            ApiCommand::Bandwidth(reply) => {
                let _ = reply.send(self.node.core().bandwidth_view());
            }
            ApiCommand::Plan(bytes, reply) => {
                let plan = self.plan_for(bytes).map(|p| BroadcastPlan::new(bytes, &p));
                let _ = reply.send(plan);
            }
            ApiCommand::Op(OpCommand::StartStream {
                payload,
                digest,
                timeout,
                group,
                reply,
            }) => {
                if group.is_none()
                    && let Some(plan) = self.plan_for(payload.len() as u64)
                {
                    return self.start_striped(payload, timeout, reply, plan);
                }
                let nonce = self.ops.register(reply);
                let stream = super::data::Stream {
                    payload,
                    digest,
                    timeout,
                    route: Vec::new(),
                    pace: None,
                    group,
                };
                self.start_stream(nonce, stream);
            }
            ApiCommand::Op(cmd) => {
                let now = self.now();
                self.ops.command(&mut self.node, now, cmd);
            }
            ApiCommand::Leave(_) => unreachable!("handled in run"),
        }
    }

    pub(super) fn handle_link(&mut self, input: LinkInput) {
        let now = self.now();
        match input {
            LinkInput::Connected {
                peer,
                conn,
                dialed,
                join,
                behind,
            } => {
                self.links.connected(peer, conn, dialed);
                // A peer admitted with an older token needs ours; any member may have
                // missed a rotation between its admission and now (40 bytes).
                if behind || self.members.is_known_member(&peer) {
                    self.send_token(peer);
                }
                self.start_waiting_streams(peer);
                for waiter in self.conn_waiters.remove(&peer).unwrap_or_default() {
                    let _ = waiter.send(self.links.conn(&peer));
                }
                let gossip = self.node.gossip();
                self.links.pump(|p| gossip.record(&p).map(|r| r.addr));
                if let Some(request) = join
                    && let Some(reply) = self.joins.remove(&request)
                {
                    debug!(via = %peer, "connected to the overlay, asking to join");
                    self.join_answers.entry(peer).or_default().push(reply);
                    self.node.handle(now, NodeInput::JoinVia { peer });
                }
            }
            LinkInput::DialFailed { peer, error } => {
                debug!(peer = %peer, %error, "dial failed");
                self.links.dial_failed(peer);
                self.waiting_streams.remove(&peer);
                // Dropped: the waiters read "unreachable".
                self.conn_waiters.remove(&peer);
                self.node.handle(now, NodeInput::Unreachable { peer });
                let gossip = self.node.gossip();
                self.links.pump(|p| gossip.record(&p).map(|r| r.addr));
            }
            LinkInput::JoinFailed { request, error } => {
                warn!(%error, "join failed");
                if let Some(reply) = self.joins.remove(&request) {
                    let _ = reply.send(Err(error));
                }
            }
            LinkInput::Received {
                peer,
                packet,
                at,
                len,
            } => {
                self.input_at = Some(at);
                self.large_frame(len);
                let from = peer;
                self.node.handle(now, NodeInput::Received { from, packet });
            }
            LinkInput::StreamDone { op, ok, rate } => {
                let done = Command::StreamDone { op, ok };
                self.node.handle(now, NodeInput::Command(done));
                if let Some((from, bytes, span)) = rate {
                    let m = Input::TransferRate { from, bytes, span };
                    self.node.handle(now, NodeInput::Measured(m));
                }
            }
            LinkInput::Train { peer, train } => {
                let m = Input::TrainArrived {
                    from: peer,
                    id: train.id,
                    received: train.received,
                    size: train.size,
                    spread: train.spread,
                    span: train.span,
                };
                self.node.handle(now, NodeInput::Measured(m));
            }
            LinkInput::DataStream { peer, header, recv } => {
                self.streams.accept(peer, header, recv, &self.ctx);
            }
            LinkInput::Closed { peer, conn, reason } => {
                if self.links.closed(peer, conn) {
                    debug!(peer = %peer, %reason, "connection closed");
                }
            }
        }
    }
}

impl Driver {
    /// Hands the core what the driver measured and lost since the last call: the send cost
    /// of a burst that has left, and the peers frames may have been lost to. Only after a
    /// drain: an input makes the core work out deferred in-cluster sends at once, before
    /// their far copies are on the wire. Returns whether anything was handed over.
    pub(super) fn feed_reports(&mut self) -> bool {
        let mut fed = false;
        if let Some(per_send) = self.pace.poll(std::time::Instant::now()) {
            debug!(
                per_send_us = per_send.as_micros() as u64,
                "send cost measured"
            );
            self.node
                .handle(self.now(), NodeInput::SendCost { per_send });
            fed = true;
        }
        for peer in self.links.take_lost() {
            self.node.handle(self.now(), NodeInput::LinkLost { peer });
            fed = true;
        }
        // Told when it changes; a stream that ends between two wake-ups is seen at the
        // next one (at most a second later: the idle check).
        let activity = self.ctx.mailbox.activity();
        let moving = self.streams.moving()
            || activity.moving(super::LARGE_FRAME_HOLD)
            || (self.last_large_frame).is_some_and(|t| t.elapsed() < super::LARGE_FRAME_HOLD);
        // What the large collectives' transfers reached, per peer and busy period.
        for (from, bytes, span) in activity.take_rates() {
            let m = Input::TransferRate { from, bytes, span };
            self.node.handle(self.now(), NodeInput::Measured(m));
            fed = true;
        }
        if moving != self.moving_bulk {
            self.moving_bulk = moving;
            debug!(moving, "bulk transfer");
            self.node
                .handle(self.now(), NodeInput::BulkTransfer { active: moving });
            fed = true;
        }
        fed
    }

    /// Tells the core of every connection whose last window ran its path full (read
    /// from QUIC's path statistics once a second, see [`Input::PathSaturated`]).
    /// Only while bulk data moves: trains (QUIC datagrams, sent only when none does) are
    /// bursts that may back off a connection and say nothing of the path's rate.
    pub(super) fn feed_saturated_paths(&mut self) {
        let now = self.now();
        let saturated = self.links.saturated_paths(std::time::Instant::now());
        if !self.moving_bulk {
            return;
        }
        for (to, bytes, span) in saturated {
            debug!(peer = %to, bytes, ?span, "path ran full");
            let m = Input::PathSaturated { to, bytes, span };
            self.node.handle(now, NodeInput::Measured(m));
        }
    }

    /// A frame of `len` bytes was sent or received: a large one (an inline payload) loads
    /// the links like a data-plane stream, so trains and RTT samples wait for it as for
    /// bulk transfers (a 20 Mbit/s link read 0.34 after a run of 256 KiB broadcasts whose
    /// queues the trains measured).
    pub(super) fn large_frame(&mut self, len: usize) {
        if len >= super::LARGE_FRAME {
            self.last_large_frame = Some(std::time::Instant::now());
        }
    }

    /// How a broadcast of `len` bytes from this node spreads now, by its [`Spread`]:
    /// `None` for the latency tree.
    fn plan_for(&self, len: u64) -> Option<StripePlan> {
        let core = self.node.core();
        match self.spread {
            Spread::Auto => core.stripe_plan(len),
            Spread::Striped => core.stripe_plan_forced(len),
            Spread::LatencyTree => None,
        }
    }
}
