//! What the API's commands and the connections' reports become: node inputs, dials,
//! streams and replies.

use super::{ApiCommand, Driver};
use crate::net::link::LinkInput;
use crate::net::ops::OpCommand;
use crate::net::stripes::{self, Spread};
use crate::proto::{Command, Input, NodeInput};
use tracing::{debug, info, warn};

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
            ApiCommand::SetSpread(spread) => {
                debug!(?spread, "large broadcasts spread changed");
                self.spread = spread;
            }
            ApiCommand::Op(OpCommand::StartStream {
                payload,
                digest,
                timeout,
                reply,
            }) => {
                let plan = match self.spread {
                    Spread::Auto => self.node.core().stripe_plan(payload.len() as u64),
                    Spread::LatencyTree => None,
                };
                if let Some(plan) = plan {
                    return self.start_striped(payload, timeout, reply, plan);
                }
                let now = self.now();
                let nonce = self.ops.register(reply);
                let op = crate::proto::OpId {
                    root: self.me,
                    nonce,
                };
                let len = payload.len() as u64;
                self.streams.insert_complete(op, payload, digest, timeout);
                // The root has the payload: it counts as reached from the start.
                let done = Command::StreamDone { op, ok: true };
                self.node.handle(now, NodeInput::Command(done));
                let start = crate::proto::Start {
                    nonce,
                    timeout,
                    what: crate::proto::StartKind::Stream {
                        len,
                        digest,
                        route: Vec::new(),
                    },
                };
                self.node
                    .handle(now, NodeInput::Command(Command::Start(start)));
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
            } => {
                self.links.connected(peer, conn, dialed);
                self.start_waiting_streams(peer);
                let gossip = self.node.gossip();
                self.links.pump(|p| gossip.record(&p).map(|r| r.addr));
                if let Some(request) = join
                    && let Some(reply) = self.joins.remove(&request)
                {
                    info!(via = %peer, "connected to the overlay, asking to join");
                    self.join_answers.entry(peer).or_default().push(reply);
                    self.node.handle(now, NodeInput::JoinVia { peer });
                }
            }
            LinkInput::DialFailed { peer, error } => {
                debug!(peer = %peer, %error, "dial failed");
                self.links.dial_failed(peer);
                self.waiting_streams.remove(&peer);
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
            LinkInput::Received { peer, packet, at } => {
                self.input_at = Some(at);
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
    /// Starts a broadcast over the routes of `plan`: one streamed operation per route,
    /// each with its share of the payload (see [`crate::net::stripes`]).
    fn start_striped(
        &mut self,
        payload: bytes::Bytes,
        timeout: std::time::Duration,
        reply: tokio::sync::oneshot::Sender<crate::proto::OpReport>,
        plan: crate::proto::StripePlan,
    ) {
        let now = self.now();
        let len = payload.len() as u64;
        let mut parts: Vec<(u64, Vec<(crate::proto::NodeId, crate::proto::NodeId)>)> =
            stripes::cut(len, &plan.rates_bps)
                .into_iter()
                .zip(plan.routes)
                .filter(|(l, _)| *l > 0)
                .collect();
        parts.truncate(stripes::MAX_STRIPES);
        if parts.is_empty() {
            parts.push((len, Vec::new()));
        }
        let whole = self.ops.register(reply);
        let count = parts.len();
        self.stripes.expect(whole, count);
        info!(
            whole,
            trees = count,
            predicted_s = plan.striped_s.min(plan.single_s),
            bound_mbit = plan.bound_bps / 1e6,
            "large broadcast planned from the measured bandwidths"
        );
        let mut offset = 0usize;
        for (i, (part_len, route)) in parts.into_iter().enumerate() {
            let end = offset + part_len as usize;
            let bytes = payload.slice(offset..end);
            offset = end;
            let mut digest = [0u8; 32];
            digest.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref());
            let nonce = stripes::stripe_nonce(whole, i, count);
            let op = crate::proto::OpId {
                root: self.me,
                nonce,
            };
            self.streams.insert_complete(op, bytes, digest, timeout);
            let done = Command::StreamDone { op, ok: true };
            self.node.handle(now, NodeInput::Command(done));
            let start = crate::proto::Start {
                nonce,
                timeout,
                what: crate::proto::StartKind::Stream {
                    len: part_len,
                    digest,
                    route,
                },
            };
            self.node
                .handle(now, NodeInput::Command(Command::Start(start)));
        }
    }
}
