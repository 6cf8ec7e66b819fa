//! Dialing: the two dial queues, the limits on dials in flight, backoff and retries.

use super::{
    Links, MAX_BACKGROUND_IN_FLIGHT, MAX_BACKOFF, MAX_DIALS_IN_FLIGHT, MIN_BACKOFF, Priority,
};
use crate::net::identity;
use crate::net::link::{self, DialError, LinkInput};
use crate::proto::NodeId;
use std::net::SocketAddr;
use std::time::Instant;

impl Links {
    /// Puts `peer` in the dial queue of `priority` unless it is being dialed, waits for a
    /// retry, or already waits at that priority or above.
    pub(super) fn request_dial(&mut self, peer: NodeId, priority: Priority) {
        let state = self.dials.entry(peer).or_default();
        if state.in_progress || state.retry_at.is_some_and(|t| t > Instant::now()) {
            return;
        }
        match (state.queued, priority) {
            (Some(Priority::Urgent), _) | (Some(Priority::Background), Priority::Background) => {}
            (Some(Priority::Background), Priority::Urgent) => {
                // Promote: the stale background entry is skipped when popped.
                state.queued = Some(Priority::Urgent);
                self.urgent.push_back(peer);
            }
            (None, p) => {
                state.queued = Some(p);
                match p {
                    Priority::Urgent => self.urgent.push_back(peer),
                    Priority::Background => self.background.push_back(peer),
                }
            }
        }
    }

    /// Starts queued dials while slots are free, urgent ones first.
    pub fn pump(&mut self, addr: impl Fn(NodeId) -> Option<SocketAddr>) {
        while self.in_flight < MAX_DIALS_IN_FLIGHT {
            let (peer, from) = match self.urgent.pop_front() {
                Some(p) => (p, Priority::Urgent),
                None if self.background_in_flight >= MAX_BACKGROUND_IN_FLIGHT => return,
                None => match self.background.pop_front() {
                    Some(p) => (p, Priority::Background),
                    None => return,
                },
            };
            let Some(state) = self.dials.get_mut(&peer) else {
                continue;
            };
            if state.queued != Some(from) {
                continue; // promoted, or already handled
            }
            state.queued = None;
            let connected = self
                .links
                .get(&peer)
                .is_some_and(|l| l.conn.close_reason().is_none());
            let waiting = self.pending.get(&peer).is_some_and(|q| !q.is_empty());
            if connected || !(waiting || state.wanted) {
                continue;
            }
            let Some(to) = addr(peer) else {
                self.dropped += self.pending.remove(&peer).map_or(0, |q| q.len() as u64);
                self.lost.insert(peer);
                continue;
            };
            state.in_progress = true;
            state.background = from == Priority::Background;
            state.retry_at = None;
            self.in_flight += 1;
            if state.background {
                self.background_in_flight += 1;
            }
            let name = identity::server_name_for(peer);
            self.spawn_dial(to, name, None, move |error| LinkInput::DialFailed {
                peer,
                error,
            });
        }
    }

    /// Dials in a task (not counted against the limit: joins use this directly); the
    /// outcome comes back as [`LinkInput::Connected`] (tagged with `join`) or as what
    /// `on_error` makes of the failure.
    pub fn spawn_dial(
        &self,
        addr: SocketAddr,
        server_name: String,
        join: Option<u64>,
        on_error: impl FnOnce(DialError) -> LinkInput + Send + 'static,
    ) {
        let endpoint = self.endpoint.clone();
        let config = self.client_config.clone();
        let ctx = self.ctx.clone();
        crate::net::spawn_in_span(async move {
            let input = match link::dial(endpoint, config, addr, server_name, &ctx).await {
                Ok((admitted, conn)) => LinkInput::Connected {
                    peer: admitted.peer,
                    conn,
                    dialed: true,
                    join,
                    behind: admitted.behind,
                },
                Err(error) => on_error(error),
            };
            let _ = ctx.to_driver.send(input).await;
        });
    }

    /// Dials `peer` (at the address `addr` gives) without a frame to send: someone wants
    /// the connection itself (a large collective's transfers).
    pub fn want(&mut self, peer: NodeId, addr: impl Fn(NodeId) -> Option<SocketAddr>) {
        self.dials.entry(peer).or_default().wanted = true;
        self.request_dial(peer, Priority::Urgent);
        self.pump(addr);
    }

    /// A dial of ours, or the peer's, produced an admitted connection.
    pub fn connected(&mut self, peer: NodeId, conn: quinn::Connection, dialed: bool) {
        let mut measure_only = false;
        if let Some(d) = self.dials.get_mut(&peer) {
            d.wanted = false;
            if dialed && d.in_progress {
                d.in_progress = false;
                self.in_flight -= 1;
                if std::mem::take(&mut d.background) {
                    self.background_in_flight -= 1;
                    measure_only = true;
                    self.counters.measure_dialed += 1;
                }
            }
            d.failures = 0;
            d.retry_at = None;
        }
        self.adopt(peer, conn, dialed, measure_only);
    }

    /// A dial failed: back off, drop what waited (the protocols resend what matters).
    pub fn dial_failed(&mut self, peer: NodeId) {
        let d = self.dials.entry(peer).or_default();
        d.wanted = false;
        if d.in_progress {
            d.in_progress = false;
            self.in_flight -= 1;
            if std::mem::take(&mut d.background) {
                self.background_in_flight -= 1;
            }
        }
        d.failures += 1;
        let backoff = MIN_BACKOFF
            .saturating_mul(1 << d.failures.min(8))
            .min(MAX_BACKOFF);
        d.retry_at = Some(Instant::now() + backoff);
        if let Some(q) = self.pending.remove(&peer) {
            self.dropped += q.len() as u64;
            self.lost.insert(peer);
        }
    }

    /// Retries dials whose backoff has passed and that still have packets waiting.
    pub fn retry_due(&mut self, addr: impl Fn(NodeId) -> Option<SocketAddr>) {
        let now = Instant::now();
        let due: Vec<NodeId> = self
            .dials
            .iter()
            .filter(|(_, d)| !d.in_progress && d.retry_at.is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for peer in due {
            if let Some(d) = self.dials.get_mut(&peer) {
                d.retry_at = None;
            }
            let wanted = self.dials.get(&peer).is_some_and(|d| d.wanted);
            if wanted || self.pending.get(&peer).is_some_and(|q| !q.is_empty()) {
                self.request_dial(peer, Priority::Urgent);
            }
        }
        self.pump(addr);
    }
}
