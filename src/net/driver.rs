//! The driver loop: one tokio task owns a node's protocol [`Node`], feeds it inputs
//! (packets from connection tasks, timers, API commands, what the transport measured and
//! lost) and follows the drain rule of [`crate::proto::node`]: after every input, drain
//! its outputs until empty, then sleep until its deadline. It makes no protocol decision:
//! each output says where its packet goes and how ([`Class`]); the driver moves bytes.
//!
//! Connections: one per peer pair, kept in [`Links`] (bounded dials, idle connections
//! closed). When both sides dial at once, the connection opened by the smaller id wins on
//! both sides and the other is closed. Packets for a peer without a connection wait in a
//! bounded queue while it is dialed (with exponential backoff after failures).

use super::link::{self, DialError, LinkContext, LinkInput};
use super::links::{Links, Outgoing, Priority, Sent};
use super::meter::{BurstPace, SendMeter};
use super::ops::{OpCommand, Ops};
use super::stream::{Forwarding, Streams};
use super::stripes::{Spread, Stripes};
use super::view::{BroadcastPlan, MemberView, NodeEvent, NodeStatus, TreeSnapshot};
use crate::proto::{Class, Command, Node, NodeId, NodeInput, NodeOutput, Packet, Time};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::{debug, info, warn};

mod data;
mod events;
mod inputs;
mod report;
mod tree_log;

use self::report::{TreeQuery, member_info};
use self::tree_log::TreeLog;

/// How often connections are checked for idleness.
const IDLE_CHECK: Duration = Duration::from_secs(1);
/// A frame this large (an inline payload) counts as bulk traffic on its links.
const LARGE_FRAME: usize = 64 * 1024;
/// How long after the last large frame the node still counts as moving bulk data (then
/// the core's own settle time follows).
const LARGE_FRAME_HOLD: Duration = Duration::from_secs(1);

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
    /// How this node forwards streamed payloads from now on.
    SetForwarding(Forwarding),
    /// How this node spreads the large broadcasts it starts from now on.
    SetSpread(Spread),
    /// How a broadcast of this many bytes would be planned now.
    Plan(u64, oneshot::Sender<Option<BroadcastPlan>>),
    /// A connection to a member, dialed if need be (`None`: it cannot be reached).
    Connect(NodeId, oneshot::Sender<Option<quinn::Connection>>),
    /// The clusters and the bandwidths measured between them.
    Bandwidth(oneshot::Sender<crate::proto::bandwidth::BandwidthView>),
    /// This node is now a member of exactly these groups (sorted and valid).
    SetGroups(Vec<String>),
}

/// The member that admitted this node, or why the join failed.
pub type JoinResult = Result<NodeId, DialError>;

/// The state the driver task owns.
pub struct Driver {
    node: Node,
    me: NodeId,
    start: Instant,
    endpoint: quinn::Endpoint,
    ctx: LinkContext,
    inbox: mpsc::Receiver<LinkInput>,
    commands: mpsc::Receiver<ApiCommand>,
    /// Fires when this node's join token changes (a rotation here or from a peer): the
    /// new one goes to every connected peer.
    token_changes: tokio::sync::watch::Receiver<u64>,
    events: broadcast::Sender<NodeEvent>,
    /// What the API reads of the members (written here only).
    members: MemberView,
    links: Links,
    /// Callers waiting for a connection ([`ApiCommand::Connect`]).
    conn_waiters: HashMap<NodeId, Vec<oneshot::Sender<Option<quinn::Connection>>>>,
    /// Data streams waiting for a connection to their child.
    waiting_streams: HashMap<NodeId, Vec<(crate::proto::OpId, u64, [u8; 32])>>,
    next_idle_check: Instant,
    joins: HashMap<u64, oneshot::Sender<JoinResult>>,
    /// Joins waiting for gossip's answer, by the member asked.
    join_answers: HashMap<NodeId, Vec<oneshot::Sender<JoinResult>>>,
    next_join: u64,
    queries: HashMap<u64, TreeQuery>,
    next_query: u64,
    ops: Ops,
    streams: Streams,
    /// When the input being handled came off the network (a delivery's `received`).
    input_at: Option<Instant>,
    /// Measures what one send costs, for the in-cluster plan.
    pace: BurstPace,
    /// Whether the node was last told it is moving bulk data.
    moving_bulk: bool,
    /// When a frame of at least [`LARGE_FRAME`] bytes was last sent or received.
    last_large_frame: Option<Instant>,
    /// Striped broadcasts: parts being put together, part reports being merged.
    stripes: Stripes,
    /// How the large broadcasts this node starts spread.
    spread: Spread,
    /// The INFO summary of parent changes.
    tree_log: TreeLog,
}

/// What [`Driver::new`] needs.
pub struct DriverParts {
    pub node: Node,
    pub start: Instant,
    pub endpoint: quinn::Endpoint,
    pub client_config: quinn::ClientConfig,
    pub ctx: LinkContext,
    pub inbox: mpsc::Receiver<LinkInput>,
    pub commands: mpsc::Receiver<ApiCommand>,
    pub events: broadcast::Sender<NodeEvent>,
    /// The member view the API handles read.
    pub members: MemberView,
    /// Seeds the numbering of this run's collective operations.
    pub seed: u64,
    /// The `deliveries()` streams, shared with the API handles.
    pub subscribers: crate::net::deliveries::Subscribers,
    /// How streamed payloads are passed on to children.
    pub forwarding: Forwarding,
    /// The meter on the endpoint's socket.
    pub meter: Arc<SendMeter>,
}

impl Driver {
    /// Assembles a driver; [`Driver::run`] starts it.
    pub fn new(parts: DriverParts) -> Driver {
        let idle = super::links::IdleLimits::for_config(
            parts.node.core().config(),
            parts.node.gossip().config().probe_interval,
        );
        let token_changes = parts.ctx.ring.subscribe();
        let driver = Driver {
            me: parts.node.id(),
            node: parts.node,
            start: parts.start,
            links: Links::new(
                parts.ctx.me,
                parts.start,
                parts.endpoint.clone(),
                parts.client_config,
                parts.ctx.clone(),
                idle,
            ),
            endpoint: parts.endpoint,
            ctx: parts.ctx,
            inbox: parts.inbox,
            commands: parts.commands,
            events: parts.events,
            members: parts.members,
            waiting_streams: HashMap::new(),
            conn_waiters: HashMap::new(),
            next_idle_check: parts.start + IDLE_CHECK,
            joins: HashMap::new(),
            join_answers: HashMap::new(),
            next_join: 0,
            queries: HashMap::new(),
            next_query: 0,
            ops: Ops::new(parts.seed, parts.subscribers),
            streams: Streams::new(parts.forwarding),
            input_at: None,
            pace: BurstPace::new(parts.meter),
            moving_bulk: false,
            last_large_frame: None,
            stripes: Stripes::default(),
            spread: Spread::default(),
            tree_log: TreeLog::new(Instant::now()),
            token_changes,
        };
        // The view is full before the first handle reads it, not when the task first runs.
        driver.refresh_members();
        driver
    }

    fn now(&self) -> Time {
        Time::from_micros(self.start.elapsed().as_micros() as u64)
    }

    fn instant(&self, t: Time) -> Instant {
        self.start + Duration::from_micros(t.as_micros())
    }

    /// Runs until the node leaves or every API handle is dropped.
    pub async fn run(mut self) {
        crate::net::spawn_in_span(link::accept_loop(self.endpoint.clone(), self.ctx.clone()));
        loop {
            let deadline = self.node.poll_timeout().map(|t| self.instant(t));
            let retry = self.links.next_retry();
            let query = self.queries.values().map(|q| q.deadline).min();
            let pace = self.pace.next_check();
            let wake = [deadline, retry, query, pace, Some(self.next_idle_check)]
                .into_iter()
                .flatten()
                .min();
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
                        Some(cmd) => {
                            // A broadcast's root delivers it "received" now: when it started.
                            self.input_at = Some(Instant::now());
                            self.handle_command(cmd)
                        }
                        None => {
                            // Every handle dropped: leave quietly rather than vanish.
                            self.leave().await;
                            return;
                        }
                    }
                }
                changed = self.token_changes.changed() => {
                    if changed.is_ok() {
                        // Members only: a connection that never joined (someone holding a
                        // leaked token) does not get the token meant to shut it out.
                        for peer in self.links.peers() {
                            if self.members.is_known_member(&peer) {
                                self.send_token(peer);
                            }
                        }
                    }
                }
                _ = sleep_until(wake) => {
                    let now = self.now();
                    if let Some(due) = wake {
                        let by = Instant::now().saturating_duration_since(due);
                        self.node.handle(now, NodeInput::RanLate { by });
                    }
                    self.node.handle(now, NodeInput::Timeout);
                    let gossip = self.node.gossip();
                    self.links.retry_due(|p| gossip.record(&p).map(|r| r.addr));
                    self.finish_queries(false);
                    self.streams.prune();
                    self.stripes.prune();
                    if Instant::now() >= self.next_idle_check {
                        self.next_idle_check = Instant::now() + IDLE_CHECK;
                        let members = self.node.gossip().live_members().count();
                        self.links.close_idle(members);
                        self.feed_saturated_paths();
                        self.refresh_members();
                        self.tree_log.tick(Instant::now(), self.node.core());
                    }
                }
            }
            if self.node.has_deferred() {
                // An operation's sends across the wide area go on the wire before its
                // in-cluster part is worked out: hand them to their connections and let
                // those run first.
                while let Some(out) = self.node.poll_ready_output() {
                    self.output(out);
                }
                // Waiting for the other tasks is no cost of sending: the burst measured
                // is what the plan sends after this.
                self.pace.drop_burst();
                tokio::task::yield_now().await;
            }
            self.drain();
            self.pace.end_burst();
            self.input_at = None;
            if self.feed_reports() {
                self.drain();
                self.pace.end_burst();
            }
        }
    }

    /// Hands a packet to its connection, and opens the data stream it announces.
    fn transmit(&mut self, to: NodeId, class: Class, packet: Packet) {
        // A one-off RTT measurement may wait behind protocol traffic for its dial.
        let priority = match class {
            Class::Probe { urgent: false } => Priority::Background,
            _ => Priority::Urgent,
        };
        let sent = self.send_with(to, packet, class, priority);
        if let Class::Stream { op, len, digest } = class {
            match self.links.conn(&to) {
                Some(conn) => self.streams.forward(conn, to, op, len, digest),
                // Being dialed: the stream starts once connected.
                None if sent == Sent::Pending => {
                    self.waiting_streams
                        .entry(to)
                        .or_default()
                        .push((op, len, digest));
                }
                // Unreachable: the root asks it again directly later.
                None => debug!(peer = %to, "no connection for a data stream"),
            }
        }
    }

    /// Drains the node until it has no output (the drain rule).
    fn drain(&mut self) {
        while let Some(out) = self.node.poll_output() {
            self.output(out);
        }
    }

    /// Carries out one output of the node.
    fn output(&mut self, out: NodeOutput) {
        match out {
            NodeOutput::Transmit { to, class, packet } => self.transmit(to, class, packet),
            NodeOutput::Core(event) => self.core_event(event),
            NodeOutput::MemberUp(record) => {
                debug!(peer = %record.id, name = %record.name, addr = %record.addr, "member up");
                self.refresh_member(record.id);
                let _ = self
                    .events
                    .send(NodeEvent::MemberUp(member_info(&record, None)));
            }
            NodeOutput::MemberRestarted { id } => {
                debug!(peer = %id, "member restarted");
                self.links.forget(id, None);
                self.refresh_member(id);
            }
            NodeOutput::MemberSuspect { id } => {
                debug!(peer = %id, "member suspected");
                self.refresh_member(id);
            }
            NodeOutput::MemberDown { id, reason } => {
                info!(peer = %id, ?reason, "member down");
                self.links.forget(id, Some(b"member down"));
                self.waiting_streams.remove(&id);
                self.refresh_member(id);
                let _ = self.events.send(NodeEvent::MemberDown { id, reason });
            }
            NodeOutput::Joined { via } => {
                debug!(via = %via, "join answered");
                for reply in self.join_answers.remove(&via).unwrap_or_default() {
                    let _ = reply.send(Ok(via));
                }
            }
            NodeOutput::TreeReply {
                from,
                id,
                root,
                parent,
                dist_us,
            } => {
                if let Some(q) = self.queries.get_mut(&id)
                    && q.root == root
                    && let Some(node) = q.nodes.get_mut(&from)
                {
                    node.parent = parent;
                    node.dist_ms = dist_us.map(|us| us as f64 / 1e3);
                    node.answered = true;
                }
                self.finish_queries(false);
            }
        }
    }

    /// Sends this node's current join token to a connected peer (which takes it if newer).
    fn send_token(&mut self, peer: NodeId) {
        let (token, generation) = self.ctx.ring.current();
        let update = crate::proto::message::TokenUpdate {
            generation,
            token: *token.as_bytes(),
        };
        self.send_with(
            peer,
            Packet::Token(update),
            Class::Control,
            Priority::Urgent,
        );
    }

    /// Sends a packet to a peer: on its connection, or queued while it is dialed.
    fn send_with(&mut self, to: NodeId, packet: Packet, class: Class, priority: Priority) -> Sent {
        let kind = packet.kind();
        let frame = match packet.encode() {
            Ok(f) => f,
            Err(e) => {
                warn!(peer = %to, error = %e, "cannot encode a packet");
                return Sent::Dropped;
            }
        };
        let bytes = frame.len();
        self.large_frame(bytes);
        // An operation's messages are what the plan schedules, and so what is measured.
        let operation = class == Class::Operation;
        if operation {
            self.pace.sending();
        }
        let out = match class {
            Class::Probe { .. } => Outgoing::Probe { frame, packet },
            _ => Outgoing::Frame(frame),
        };
        let gossip = self.node.gossip();
        let sent = self
            .links
            .send(to, out, priority, |p| gossip.record(&p).map(|r| r.addr));
        if sent != Sent::Dropped {
            self.ctx.stats.by_kind.sent(kind, bytes);
        }
        if operation && sent != Sent::Dropped {
            self.pace.sent(to, bytes, sent == Sent::Written);
        }
        sent
    }

    /// Graceful leave: detach from every tree, tell every member, flush, close.
    async fn leave(&mut self) {
        let now = self.now();
        info!("leaving the overlay");
        self.finish_queries(true);
        self.node.handle(now, NodeInput::Command(Command::Leave));
        self.drain();
        // Dropping the writers' queues lets each writer finish its stream once flushed.
        let conns = self.links.take_all();
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
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}
