//! The driver's data-plane starts: a streamed broadcast (one operation, or the parts of a
//! striped one, see [`crate::net::stripes`]), the data streams that waited for a dial, and
//! the packet trains the core allows ([`crate::net::train`]).

use super::Driver;
use crate::net::pace::Pace;
use crate::net::stripes;
use crate::proto::{Command, NodeId, NodeInput, OpId, OpReport, Start, StartKind, StripePlan};
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tracing::debug;

/// A streamed operation to start: the payload and its SHA-256, its deadline, the route it
/// follows (empty: the overlay's tree), its pacing and the group it is for.
pub(super) struct Stream {
    pub(super) payload: Bytes,
    pub(super) digest: [u8; 32],
    pub(super) timeout: Duration,
    pub(super) route: Vec<(NodeId, NodeId)>,
    pub(super) pace: Option<Arc<Pace>>,
    pub(super) group: Option<String>,
}

impl Driver {
    /// Starts the streamed operation `nonce` of `payload` (its SHA-256 is `digest`) along
    /// `route`, or the overlay's tree if it is empty. The root has the payload: it counts
    /// as reached from the start.
    pub(super) fn start_stream(&mut self, nonce: u64, stream: Stream) {
        let Stream {
            payload,
            digest,
            timeout,
            route,
            pace,
            group,
        } = stream;
        let now = self.now();
        let op = OpId {
            root: self.me,
            nonce,
        };
        let len = payload.len() as u64;
        self.streams
            .insert_complete(op, payload, digest, timeout, pace);
        let done = Command::StreamDone { op, ok: true };
        self.node.handle(now, NodeInput::Command(done));
        let start = Start {
            group,
            nonce,
            timeout,
            what: StartKind::Stream { len, digest, route },
        };
        self.node
            .handle(now, NodeInput::Command(Command::Start(start)));
    }

    /// Starts a broadcast over the routes of `plan`: the payload cut into equal parts, each
    /// a streamed operation down one route, handed to the routes as earlier parts complete
    /// (see [`stripes::Schedule`]).
    pub(super) fn start_striped(
        &mut self,
        payload: Bytes,
        timeout: Duration,
        reply: oneshot::Sender<OpReport>,
        plan: StripePlan,
    ) {
        let now = Instant::now();
        // One tree: one part, as a plain streamed broadcast would be.
        let max_parts = if plan.striped() {
            stripes::MAX_STRIPES
        } else {
            1
        };
        let trees = plan.routes.len();
        let view = self.node.core().bandwidth_view();
        let links: Vec<String> = view
            .links
            .iter()
            .map(|l| format!("{}->{}:{:.2}", l.from, l.to, l.bps / 1e6))
            .collect();
        debug!(?links, "measured cluster links");
        for t in &plan.trees {
            debug!(parents = ?t.parent, mbit = t.rate_bps / 1e6, "planned tree");
        }
        let paced = plan.striped();
        let schedule = stripes::Schedule::new(
            payload,
            plan.routes,
            &plan.rates_bps,
            max_parts,
            paced,
            now,
            timeout,
        )
        .with_delays(&plan.delays_s);
        let whole = self.ops.register(reply);
        debug!(
            whole,
            trees,
            parts = schedule.count(),
            predicted_s = plan.striped_s.min(plan.single_s),
            bound_mbit = plan.bound_bps / 1e6,
            "large broadcast planned from the measured bandwidths"
        );
        let starts = self.stripes.start(whole, schedule, now);
        self.start_parts(whole, starts);
    }

    /// Starts parts of the striped broadcast numbered `whole`.
    pub(super) fn start_parts(&mut self, whole: u64, starts: Vec<stripes::PartStart>) {
        for p in starts {
            let mut digest = [0u8; 32];
            digest.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, &p.bytes).as_ref());
            let nonce = stripes::stripe_nonce(whole, p.index, p.count);
            debug!(whole, part = p.index, tree = p.lane, "stripe part started");
            let stream = Stream {
                payload: p.bytes,
                digest,
                timeout: p.timeout,
                route: p.route,
                pace: p.pace,
                group: None,
            };
            self.start_stream(nonce, stream);
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
