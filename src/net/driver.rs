//! The driver loop: one tokio task owns a node's tree [`Core`] and its membership
//! [`Gossip`], feeds them inputs (packets from connection tasks, timers, API commands) and
//! follows the drain rule of [`crate::proto`]: after every input, drain both machines'
//! transmits and events until empty, then sleep until the earlier of their deadlines.
//!
//! Connections: one per peer pair. When both sides dial at once, the connection opened by
//! the smaller id wins on both sides and the other is closed. Packets for a peer without a
//! connection wait in a bounded queue while it is dialed (with exponential backoff after
//! failures).

use super::link::{self, DialError, LinkContext, LinkInput};
use super::ops::{OpCommand, Ops};
use super::stream::Streams;
use crate::api::{MemberInfo, NodeEvent, NodeStatus, TreeInfo, TreeNode, TreeSnapshot};
use crate::proto::gossip::{Gossip, GossipEvent};
use crate::proto::{
    CollectiveMessage, Command, Core, DownBody, DownReason, Event, Input, Liveness, Message,
    NodeId, Packet, QueryMessage, Time,
};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::{debug, info, warn};

/// Packets kept for a peer while it is being dialed.
const PENDING_PER_PEER: usize = 1024;
/// First retry delay after a failed dial; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Requests from the API handle to the driver.
pub enum ApiCommand {
    /// Snapshot of members, trees and counters.
    Status(oneshot::Sender<NodeStatus>),
    /// Join the overlay through a member at this address.
    Join(SocketAddr, oneshot::Sender<JoinResult>),
    /// Ask every live member for its parent in a root's tree and assemble the answers.
    Tree(NodeId, oneshot::Sender<TreeSnapshot>),
    /// Leave gracefully, then stop.
    Leave(oneshot::Sender<()>),
    /// A collective operation or its set-up.
    Op(OpCommand),
}

/// The member that admitted this node, or why the join failed.
pub type JoinResult = Result<NodeId, DialError>;

/// How long a tree query waits for members' answers.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// A tree query in progress.
struct TreeQuery {
    root: NodeId,
    nodes: HashMap<NodeId, TreeNode>,
    deadline: Instant,
    reply: oneshot::Sender<TreeSnapshot>,
}

/// One admitted connection in use.
struct Link {
    conn: quinn::Connection,
    writer: mpsc::Sender<Vec<u8>>,
    /// Who opened it (decides which one survives when both sides dial at once).
    opened_by: NodeId,
}

#[derive(Default)]
struct DialState {
    in_progress: bool,
    failures: u32,
    retry_at: Option<Instant>,
}

/// The state the driver task owns.
pub struct Driver {
    core: Core,
    gossip: Gossip,
    me: NodeId,
    start: Instant,
    endpoint: quinn::Endpoint,
    client_config: quinn::ClientConfig,
    ctx: LinkContext,
    inbox: mpsc::UnboundedReceiver<LinkInput>,
    commands: mpsc::Receiver<ApiCommand>,
    events: broadcast::Sender<NodeEvent>,
    links: HashMap<NodeId, Link>,
    pending: HashMap<NodeId, VecDeque<Vec<u8>>>,
    dials: HashMap<NodeId, DialState>,
    joins: HashMap<u64, oneshot::Sender<JoinResult>>,
    /// Joins waiting for gossip's answer, by the member asked.
    join_answers: HashMap<NodeId, Vec<oneshot::Sender<JoinResult>>>,
    next_join: u64,
    /// Boot value of each member as last fed to the core (detects restarts).
    boots: HashMap<NodeId, u64>,
    queries: HashMap<u64, TreeQuery>,
    next_query: u64,
    dropped: u64,
    ops: Ops,
    streams: Streams,
}

/// What [`Driver::new`] needs.
pub struct DriverParts {
    pub core: Core,
    pub gossip: Gossip,
    pub start: Instant,
    pub endpoint: quinn::Endpoint,
    pub client_config: quinn::ClientConfig,
    pub ctx: LinkContext,
    pub inbox: mpsc::UnboundedReceiver<LinkInput>,
    pub commands: mpsc::Receiver<ApiCommand>,
    pub events: broadcast::Sender<NodeEvent>,
    /// Seeds the numbering of this run's collective operations.
    pub seed: u64,
}

impl Driver {
    /// Assembles a driver; [`Driver::run`] starts it.
    pub fn new(parts: DriverParts) -> Driver {
        Driver {
            me: parts.core.id(),
            core: parts.core,
            gossip: parts.gossip,
            start: parts.start,
            endpoint: parts.endpoint,
            client_config: parts.client_config,
            ctx: parts.ctx,
            inbox: parts.inbox,
            commands: parts.commands,
            events: parts.events,
            links: HashMap::new(),
            pending: HashMap::new(),
            dials: HashMap::new(),
            joins: HashMap::new(),
            join_answers: HashMap::new(),
            next_join: 0,
            boots: HashMap::new(),
            queries: HashMap::new(),
            next_query: 0,
            dropped: 0,
            ops: Ops::new(parts.seed),
            streams: Streams::default(),
        }
    }

    fn now(&self) -> Time {
        Time::from_micros(self.start.elapsed().as_micros() as u64)
    }

    fn instant(&self, t: Time) -> Instant {
        self.start + Duration::from_micros(t.as_micros())
    }

    /// Runs until the node leaves or every API handle is dropped.
    pub async fn run(mut self) {
        tokio::spawn(link::accept_loop(self.endpoint.clone(), self.ctx.clone()));
        loop {
            let deadline = [self.core.poll_timeout(), self.gossip.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .map(|t| self.instant(t));
            let retry = self.dials.values().filter_map(|d| d.retry_at).min();
            let query = self.queries.values().map(|q| q.deadline).min();
            let wake = [deadline, retry, query].into_iter().flatten().min();
            tokio::select! {
                input = self.inbox.recv() => {
                    let Some(input) = input else { break };
                    self.handle_link(input);
                }
                cmd = self.commands.recv() => {
                    match cmd {
                        Some(ApiCommand::Leave(done)) => {
                            self.leave().await;
                            let _ = done.send(());
                            return;
                        }
                        Some(cmd) => self.handle_command(cmd),
                        None => {
                            // Every handle dropped: leave quietly rather than vanish.
                            self.leave().await;
                            return;
                        }
                    }
                }
                _ = sleep_until(wake) => {
                    let now = self.now();
                    self.core.handle(now, Input::Timeout);
                    self.gossip.handle_timeout(now);
                    self.retry_dials();
                    self.finish_queries(false);
                    self.streams.prune();
                }
            }
            self.drain();
        }
    }

    fn handle_command(&mut self, cmd: ApiCommand) {
        match cmd {
            ApiCommand::Status(reply) => {
                let _ = reply.send(self.status());
            }
            ApiCommand::Join(addr, reply) => {
                self.next_join += 1;
                let request = self.next_join;
                self.joins.insert(request, reply);
                let name = super::identity::ANY_NODE.to_string();
                self.spawn_dial(addr, name, Some(request), move |error| {
                    LinkInput::JoinFailed { request, error }
                });
            }
            ApiCommand::Tree(root, reply) => self.start_tree_query(root, reply),
            ApiCommand::Op(OpCommand::StartStream {
                payload,
                digest,
                timeout,
                reply,
            }) => {
                let now = self.now();
                let nonce = self.ops.register(reply);
                let op = crate::proto::OpId {
                    root: self.me,
                    nonce,
                };
                let len = payload.len() as u64;
                self.streams.insert_complete(op, payload, digest);
                // The root has the payload: it counts as reached from the start.
                self.core
                    .handle(now, Input::Command(Command::StreamDone { op, ok: true }));
                let start = crate::proto::Start {
                    nonce,
                    timeout,
                    what: crate::proto::StartKind::Stream { len, digest },
                };
                self.core.handle(now, Input::Command(Command::Start(start)));
            }
            ApiCommand::Op(cmd) => {
                let now = self.now();
                self.ops.command(&mut self.core, now, cmd);
            }
            ApiCommand::Leave(_) => unreachable!("handled in run"),
        }
    }

    fn handle_link(&mut self, input: LinkInput) {
        let now = self.now();
        match input {
            LinkInput::Connected {
                peer,
                conn,
                dialed,
                join,
            } => {
                if let Some(d) = self.dials.get_mut(&peer) {
                    d.in_progress = false;
                    d.failures = 0;
                    d.retry_at = None;
                }
                self.adopt(peer, conn, dialed);
                if let Some(request) = join
                    && let Some(reply) = self.joins.remove(&request)
                {
                    info!(via = %peer, "connected to the overlay, asking to join");
                    self.join_answers.entry(peer).or_default().push(reply);
                    self.gossip.join(now, peer);
                }
            }
            LinkInput::DialFailed { peer, error } => {
                debug!(peer = %peer, %error, "dial failed");
                let d = self.dials.entry(peer).or_default();
                d.in_progress = false;
                d.failures += 1;
                let backoff = MIN_BACKOFF
                    .saturating_mul(1 << d.failures.min(8))
                    .min(MAX_BACKOFF);
                d.retry_at = Some(Instant::now() + backoff);
                if let Some(q) = self.pending.remove(&peer) {
                    self.dropped += q.len() as u64;
                }
                self.gossip.handle_unreachable(now, peer);
            }
            LinkInput::JoinFailed { request, error } => {
                warn!(%error, "join failed");
                if let Some(reply) = self.joins.remove(&request) {
                    let _ = reply.send(Err(error));
                }
            }
            LinkInput::Received { peer, packet } => match packet {
                Packet::Overlay(msg) => {
                    self.core.handle(now, Input::Received { from: peer, msg });
                }
                Packet::Gossip(msg) => self.gossip.handle_message(now, peer, msg),
                Packet::Query(q) => self.handle_query(peer, q),
                Packet::Data(_) => {} // only ever the first frame of a stream (link.rs)
            },
            LinkInput::StreamDone { op, ok } => {
                self.core
                    .handle(now, Input::Command(Command::StreamDone { op, ok }));
            }
            LinkInput::DataStream { peer, header, recv } => {
                self.streams.accept(peer, header, recv, &self.ctx);
            }
            LinkInput::Closed { peer, conn, reason } => {
                if self
                    .links
                    .get(&peer)
                    .is_some_and(|l| l.conn.stable_id() == conn)
                {
                    debug!(peer = %peer, %reason, "connection closed");
                    self.links.remove(&peer);
                }
            }
        }
    }

    /// Installs an admitted connection, resolving a simultaneous dial from both sides.
    fn adopt(&mut self, peer: NodeId, conn: quinn::Connection, dialed: bool) {
        let opened_by = if dialed { self.me } else { peer };
        let preferred = self.me.min(peer);
        if let Some(existing) = self.links.get(&peer) {
            let existing_alive = existing.conn.close_reason().is_none();
            // The same side opening a second connection has given up the first (e.g. it
            // restarted): the new one wins. Otherwise both dialed at once: the connection
            // opened by the smaller id wins, on both sides.
            let keep_existing = existing.opened_by != opened_by
                && (existing.opened_by == preferred || opened_by != preferred);
            if existing_alive && keep_existing {
                // Keep the existing one; the peer applies the same rule. Let it drain.
                let extra = conn.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    extra.close(super::auth::CLOSE_DUPLICATE.into(), b"duplicate connection");
                });
                // Still read from it until then, so nothing the peer sent on it is lost.
                let _ = link::start(peer, conn, &self.ctx);
                return;
            }
            let old = existing.conn.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                old.close(super::auth::CLOSE_DUPLICATE.into(), b"duplicate connection");
            });
        }
        let writer = link::start(peer, conn.clone(), &self.ctx);
        if let Some(queue) = self.pending.remove(&peer) {
            for frame in queue {
                if writer.try_send(frame).is_err() {
                    self.dropped += 1;
                }
            }
        }
        self.links.insert(
            peer,
            Link {
                conn,
                writer,
                opened_by,
            },
        );
    }

    /// Drains both state machines until neither has output (the drain rule).
    fn drain(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(t) = self.core.poll_transmit() {
                let stream = match &t.msg {
                    Message::Collective(CollectiveMessage::Down {
                        op,
                        body: DownBody::Stream { len, digest },
                        ..
                    }) => Some((*op, *len, *digest)),
                    _ => None,
                };
                let to = t.to;
                self.send(to, Packet::Overlay(t.msg));
                if let Some((op, len, digest)) = stream {
                    match self.links.get(&to) {
                        Some(link) => {
                            let conn = link.conn.clone();
                            self.streams.forward(conn, to, op, len, digest);
                        }
                        // Not connected yet: the root asks it again directly later.
                        None => debug!(peer = %to, "no connection for a data stream yet"),
                    }
                }
                progressed = true;
            }
            while let Some(e) = self.core.poll_event() {
                let now = self.now();
                if let Event::Delivered(d) = &e
                    && d.payload.is_empty()
                    && let Some(payload) = self.streams.payload(d.op)
                {
                    self.ops.deliver(crate::api::Delivery {
                        root: d.op.root,
                        op: d.op.nonce,
                        kind: d.kind,
                        payload,
                    });
                    progressed = true;
                    continue;
                }
                if self.ops.event(&mut self.core, now, &e) {
                    progressed = true;
                    continue;
                }
                self.publish_core_event(e);
                progressed = true;
            }
            while let Some(t) = self.gossip.poll_transmit() {
                self.send(t.to, Packet::Gossip(t.msg));
                progressed = true;
            }
            while let Some(e) = self.gossip.poll_event() {
                self.handle_gossip_event(e);
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
    }

    fn handle_gossip_event(&mut self, event: GossipEvent) {
        let now = self.now();
        match event {
            GossipEvent::Up(record) => {
                let id = record.id;
                let previous = self.boots.insert(id, record.boot);
                if previous.is_some_and(|b| b != record.boot) {
                    // Restarted: forget its previous run before taking it back.
                    info!(peer = %id, "member restarted");
                    self.core.handle(
                        now,
                        Input::MemberDown {
                            id,
                            reason: DownReason::Dead,
                        },
                    );
                    self.links.remove(&id);
                }
                if previous != Some(record.boot) {
                    self.core.handle(now, Input::MemberUp { id });
                    info!(peer = %id, name = %record.name, addr = %record.addr, "member up");
                    let _ = self
                        .events
                        .send(NodeEvent::MemberUp(member_info(&record, None)));
                }
            }
            GossipEvent::Suspect(id) => {
                debug!(peer = %id, "member suspected");
            }
            GossipEvent::Down { id, state } => {
                let reason = if state == Liveness::Left {
                    DownReason::Left
                } else {
                    DownReason::Dead
                };
                info!(peer = %id, ?reason, "member down");
                self.boots.remove(&id);
                self.core.handle(now, Input::MemberDown { id, reason });
                if let Some(link) = self.links.remove(&id) {
                    link.conn
                        .close(super::auth::CLOSE_LEAVING.into(), b"member down");
                }
                self.pending.remove(&id);
                let _ = self.events.send(NodeEvent::MemberDown { id, reason });
            }
            GossipEvent::Joined { via } => {
                info!(via = %via, "joined the overlay");
                for reply in self.join_answers.remove(&via).unwrap_or_default() {
                    let _ = reply.send(Ok(via));
                }
            }
        }
    }

    fn publish_core_event(&mut self, event: Event) {
        let out = match event {
            Event::ParentChanged { root, old, new } => {
                debug!(root = %root, old = ?old, new = ?new, "parent changed");
                NodeEvent::ParentChanged { root, parent: new }
            }
            Event::ConnectedChanged { root, connected } => {
                NodeEvent::TreeConnected { root, connected }
            }
            Event::RootAdded { root } => NodeEvent::TreeAdded { root },
            Event::RootRemoved { root } => NodeEvent::TreeRemoved { root },
            // Member changes are published from gossip, which knows names and addresses.
            Event::MemberUp { .. } | Event::MemberDown { .. } | Event::Left => return,
            // Handled by `Ops`.
            Event::Delivered(_) | Event::ContributionNeeded { .. } | Event::Report(_) => return,
        };
        let _ = self.events.send(out);
    }

    /// Sends a packet to a peer: on its connection, or queued while it is dialed.
    fn send(&mut self, to: NodeId, packet: Packet) {
        let frame = match packet.encode() {
            Ok(f) => f,
            Err(e) => {
                warn!(peer = %to, error = %e, "cannot encode a packet");
                return;
            }
        };
        if let Some(link) = self.links.get(&to) {
            if link.conn.close_reason().is_none() {
                if link.writer.try_send(frame).is_err() {
                    self.dropped += 1;
                }
                return;
            }
            self.links.remove(&to);
        }
        let queue = self.pending.entry(to).or_default();
        if queue.len() >= PENDING_PER_PEER {
            queue.pop_front();
            self.dropped += 1;
        }
        queue.push_back(frame);
        self.dial(to);
    }

    fn dial(&mut self, peer: NodeId) {
        let state = self.dials.entry(peer).or_default();
        if state.in_progress || state.retry_at.is_some_and(|t| t > Instant::now()) {
            return;
        }
        let Some(addr) = self.gossip.record(&peer).map(|r| r.addr) else {
            // Unknown address: nothing to dial (e.g. a message to a member not yet gossiped).
            if let Some(q) = self.pending.remove(&peer) {
                self.dropped += q.len() as u64;
            }
            return;
        };
        state.in_progress = true;
        state.retry_at = None;
        let name = super::identity::server_name_for(peer);
        self.spawn_dial(addr, name, None, move |error| LinkInput::DialFailed {
            peer,
            error,
        });
    }

    /// Dials in a task; the outcome comes back as [`LinkInput::Connected`] (tagged with
    /// `join`) or as what `on_error` makes of the failure.
    fn spawn_dial(
        &self,
        addr: SocketAddr,
        server_name: String,
        join: Option<u64>,
        on_error: impl FnOnce(DialError) -> LinkInput + Send + 'static,
    ) {
        let endpoint = self.endpoint.clone();
        let config = self.client_config.clone();
        let ctx = self.ctx.clone();
        tokio::spawn(async move {
            let input = match link::dial(endpoint, config, addr, server_name, &ctx).await {
                Ok((peer, conn)) => LinkInput::Connected {
                    peer,
                    conn,
                    dialed: true,
                    join,
                },
                Err(error) => on_error(error),
            };
            let _ = ctx.to_driver.send(input);
        });
    }

    fn retry_dials(&mut self) {
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
            if self.pending.get(&peer).is_some_and(|q| !q.is_empty()) {
                self.dial(peer);
            }
        }
    }

    fn start_tree_query(&mut self, root: NodeId, reply: oneshot::Sender<TreeSnapshot>) {
        self.next_query += 1;
        let id = self.next_query;
        let mut nodes = HashMap::new();
        let me = self.gossip.me().clone();
        nodes.insert(me.id, self.tree_node(me.id, &me.name, root));
        let members: Vec<(NodeId, String)> = self
            .gossip
            .live_members()
            .map(|r| (r.id, r.name.clone()))
            .collect();
        for (peer, name) in members {
            nodes.insert(
                peer,
                TreeNode {
                    id: peer,
                    name,
                    parent: None,
                    dist_ms: None,
                    answered: false,
                },
            );
            self.send(peer, Packet::Query(QueryMessage::TreeRequest { id, root }));
        }
        self.queries.insert(
            id,
            TreeQuery {
                root,
                nodes,
                deadline: Instant::now() + QUERY_TIMEOUT,
                reply,
            },
        );
        self.finish_queries(false);
    }

    fn tree_node(&self, id: NodeId, name: &str, root: NodeId) -> TreeNode {
        let view = self.core.tree(root);
        TreeNode {
            id,
            name: name.to_string(),
            parent: view.as_ref().and_then(|v| v.parent),
            dist_ms: view
                .filter(|v| v.connected)
                .map(|v| v.dist.as_secs_f64() * 1e3),
            answered: true,
        }
    }

    fn handle_query(&mut self, peer: NodeId, query: QueryMessage) {
        match query {
            QueryMessage::TreeRequest { id, root } => {
                let view = self.core.tree(root);
                let reply = QueryMessage::TreeReply {
                    id,
                    root,
                    parent: view.as_ref().and_then(|v| v.parent),
                    dist_us: view
                        .filter(|v| v.connected)
                        .map(|v| v.dist.as_micros() as u64),
                };
                self.send(peer, Packet::Query(reply));
            }
            QueryMessage::TreeReply {
                id,
                root,
                parent,
                dist_us,
            } => {
                if let Some(q) = self.queries.get_mut(&id)
                    && q.root == root
                    && let Some(node) = q.nodes.get_mut(&peer)
                {
                    node.parent = parent;
                    node.dist_ms = dist_us.map(|us| us as f64 / 1e3);
                    node.answered = true;
                }
                self.finish_queries(false);
            }
        }
    }

    /// Answers queries that are complete or past their deadline (all of them if `all`).
    fn finish_queries(&mut self, all: bool) {
        let now = Instant::now();
        let done: Vec<u64> = self
            .queries
            .iter()
            .filter(|(_, q)| all || q.deadline <= now || q.nodes.values().all(|n| n.answered))
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            if let Some(q) = self.queries.remove(&id) {
                let mut nodes: Vec<TreeNode> = q.nodes.into_values().collect();
                nodes.sort_by_key(|n| n.id);
                let _ = q.reply.send(TreeSnapshot {
                    root: q.root,
                    nodes,
                });
            }
        }
    }

    /// Graceful leave: detach from every tree, tell every member, flush, close.
    async fn leave(&mut self) {
        let now = self.now();
        info!("leaving the overlay");
        self.finish_queries(true);
        self.core.handle(now, Input::Command(Command::Leave));
        self.gossip.leave(now);
        self.drain();
        // Dropping the writers' queues lets each writer finish its stream once flushed.
        let conns: Vec<quinn::Connection> = self.links.drain().map(|(_, l)| l.conn).collect();
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            for c in &conns {
                // Wait until the peer has the data or the connection is gone.
                let _ = tokio::time::timeout(Duration::from_millis(200), c.closed()).await;
            }
        })
        .await;
        self.endpoint
            .close(super::auth::CLOSE_LEAVING.into(), b"node left");
        let _ = tokio::time::timeout(Duration::from_secs(1), self.endpoint.wait_idle()).await;
    }

    fn status(&self) -> NodeStatus {
        let me = self.gossip.me();
        let members = self
            .gossip
            .records()
            .iter()
            .map(|r| member_info(r, self.core.rtt(r.id)))
            .collect();
        let mut trees: Vec<TreeInfo> = self
            .core
            .roots()
            .into_iter()
            .filter_map(|root| self.core.tree(root))
            .map(TreeInfo::from)
            .collect();
        trees.sort_by_key(|t| t.root);
        let stats = &self.ctx.stats;
        use std::sync::atomic::Ordering::Relaxed;
        NodeStatus {
            id: me.id,
            name: me.name.clone(),
            addr: me.addr,
            members,
            trees,
            connections: self.links.len(),
            frames_in: stats.frames_in.load(Relaxed),
            frames_out: stats.frames_out.load(Relaxed),
            bytes_in: stats.bytes_in.load(Relaxed),
            bytes_out: stats.bytes_out.load(Relaxed),
            frames_rejected: stats.frames_rejected.load(Relaxed),
            protocol_errors: stats.protocol_errors.load(Relaxed),
            auth_failures: stats.auth_failures.load(Relaxed),
            packets_dropped: self.dropped,
            uptime_ms: self.start.elapsed().as_millis() as u64,
        }
    }
}

fn member_info(r: &crate::proto::MemberRecord, rtt: Option<Duration>) -> MemberInfo {
    MemberInfo {
        id: r.id,
        name: r.name.clone(),
        addr: r.addr,
        state: r.state,
        rtt_ms: rtt.map(|d| d.as_secs_f64() * 1e3),
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}
