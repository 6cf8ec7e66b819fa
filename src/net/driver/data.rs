//! The driver's data-plane starts: a streamed broadcast (one operation, or the parts of a
//! striped one, see [`crate::net::stripes`]), the data streams that waited for a dial, and
//! the packet trains the core allows ([`crate::net::train`]).

use super::Driver;
use crate::net::stripes;
use crate::proto::{Command, NodeId, NodeInput, OpId, OpReport, Start, StartKind, StripePlan};
use bytes::Bytes;
use std::time::Duration;
use tokio::sync::oneshot;
use tracing::{debug, info};

impl Driver {
    /// Starts the streamed operation `nonce` of `payload` (its SHA-256 is `digest`) along
    /// `route`, or the overlay's tree if it is empty. The root has the payload: it counts
    /// as reached from the start.
    pub(super) fn start_stream(
        &mut self,
        nonce: u64,
        payload: Bytes,
        digest: [u8; 32],
        timeout: Duration,
        route: Vec<(NodeId, NodeId)>,
    ) {
        let now = self.now();
        let op = OpId {
            root: self.me,
            nonce,
        };
        let len = payload.len() as u64;
        self.streams.insert_complete(op, payload, digest, timeout);
        let done = Command::StreamDone { op, ok: true };
        self.node.handle(now, NodeInput::Command(done));
        let start = Start {
            nonce,
            timeout,
            what: StartKind::Stream { len, digest, route },
        };
        self.node
            .handle(now, NodeInput::Command(Command::Start(start)));
    }

    /// Starts a broadcast over the routes of `plan`: one streamed operation per route,
    /// each with its share of the payload.
    pub(super) fn start_striped(
        &mut self,
        payload: Bytes,
        timeout: Duration,
        reply: oneshot::Sender<OpReport>,
        plan: StripePlan,
    ) {
        let len = payload.len() as u64;
        let mut parts: Vec<(u64, Vec<(NodeId, NodeId)>)> = stripes::cut(len, &plan.rates_bps)
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
            self.start_stream(nonce, bytes, digest, timeout, route);
        }
    }

    /// Sends the packet train the core allowed (see [`crate::net::train`]); nothing without a
    /// connection (the peer asked over one, so it is there unless it just closed).
    pub(super) fn send_train(&mut self, to: NodeId, id: u32, packets: u16, size: u16) {
        match self.links.conn(&to) {
            Some(conn) => {
                let sent = crate::net::train::send(&conn, id, packets, size);
                debug!(peer = %to, id, sent, "packet train sent");
            }
            None => debug!(peer = %to, "no connection for a packet train"),
        }
    }

    /// Starts the data streams that waited for a connection to `peer`.
    pub(super) fn start_waiting_streams(&mut self, peer: NodeId) {
        let Some(waiting) = self.waiting_streams.remove(&peer) else {
            return;
        };
        let Some(conn) = self.links.conn(&peer) else {
            return;
        };
        for (op, len, digest) in waiting {
            self.streams.forward(conn.clone(), peer, op, len, digest);
        }
    }
}
