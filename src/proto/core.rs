//! The state machine of one node: inputs in through [`Core::handle`], outputs drained
//! through `poll_*` (the drain rule is in the module docs of [`crate::proto`]).
//!
//! Per root, this ties the rules of [`super::tree`] to the messages of [`super::message`]:
//! - parents push `(serial, dist, connected)` to their children on every change
//!   ([`Message::TreeUpdate`]);
//! - changed tree state is advertised to the candidate set in batches, without serial-only
//!   changes (those would cost one entry per root per period per candidate); a node that
//!   needs a candidate's current serial asks for it ([`Message::AdvertRequest`]) and gets
//!   the answer as soon as the candidate has that serial;
//! - a node whose parent is gone asks the root for a fresh serial
//!   ([`Message::SerialRequest`]) so repair does not wait for the next period.
//!
//! This file holds the [`Core`] itself, its driver-facing API and its read-only accessors;
//! the rest is one concept per file:
//! - `inputs`: members coming and going, and the dispatch of received messages;
//! - `entries`: tree entries from peers (adverts, pushed updates), noted down and acted on;
//! - `parents`: judging candidates, switching, detaching, and what follows a change;
//! - `asks`: advert requests, parent queries and serial requests;
//! - `hints`: introducing far children to each other;
//! - `probing`: RTT probes, samples and the candidate set;
//! - `rounds`: timer-driven work (serial ticks, advert flush, housekeeping);
//! - `collectives`: the bridge to the collective engine;
//! - `discovery`: the core's side of cluster discovery;
//! - `stats`: the counters ([`CoreStats`]).

use super::candidates::{CandidateSet, Role};
use super::collective::{Collectives, Overlay};
use super::id::{IdMap as HashMap, IdSet as HashSet};
use super::membership::MemberTable;
use super::outbox::Outbox;
use super::rng::SplitMix64;
use super::rtt::RttEstimator;
use super::timers::{Timer, TimerQueue};
use super::tree::{self, CandidateView, INFINITE, Judgement, SwitchReason, TreeState};
use super::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod asks;
mod collectives;
mod discovery;
mod entries;
mod hints;
mod inputs;
mod parents;
mod probing;
mod rootset;
mod rounds;
mod stats;

use self::entries::{Heard, HeardFrom};
use self::rootset::RootSet;
pub use self::stats::CoreStats;

/// Index of a root in this core's tables (never reused while the core lives).
type RootIdx = usize;

/// The protocol core of one node.
pub struct Core {
    id: NodeId,
    config: Config,
    rng: SplitMix64,
    now: Time,
    members: MemberTable,
    rtt: HashMap<NodeId, RttEstimator>,
    cands: CandidateSet,
    root_index: HashMap<NodeId, RootIdx>,
    trees: Vec<Option<TreeState>>,
    heard: HashMap<NodeId, HeardFrom>,
    /// Roots whose advertised state is due to go out with the next flush.
    dirty: RootSet,
    /// Peers owed a full advert (new candidates, new inbound probers, periodic refresh).
    owed_full: BTreeSet<NodeId>,
    /// Peers the transport may have lost messages to ([`Input::LinkLost`]), resynced when
    /// next heard from.
    lost_to: BTreeSet<NodeId>,
    /// When each peer was last resynced (at most `RESYNC_GAP_PER_SERIAL_PERIOD` times per
    /// serial period).
    resynced_at: HashMap<NodeId, Time>,
    /// Advert bytes that may still be sent (negative: spent ahead), and when last topped up.
    advert_tokens: f64,
    tokens_at: Time,
    /// Advert requests received that wait for our serial to reach the asked one.
    waiting_asks: HashMap<RootIdx, Vec<(NodeId, u32, Time)>>,
    /// Advert requests and parent queries sent, for rate limiting.
    asked: HashMap<(NodeId, RootIdx), (u32, Time)>,
    /// Parent queries sent: when, and our parent and the candidate's dist at the time.
    queried: HashMap<(NodeId, RootIdx), (Time, Option<NodeId>, u32)>,
    serial_requested: HashMap<RootIdx, Time>,
    /// Requests batched until the next flush.
    out_asks: BTreeMap<NodeId, Vec<(NodeId, u32)>>,
    out_queries: BTreeMap<NodeId, Vec<NodeId>>,
    /// Members not measured yet, probed a few per round.
    sweep: Vec<NodeId>,
    last_bump: Time,
    housekeeping_rounds: u64,
    /// Probes of the current round still to send, and the gap between two of them.
    probe_queue: VecDeque<(NodeId, bool)>,
    probe_gap: std::time::Duration,
    /// Tree messages of the current input, coalesced per peer.
    outbox: Outbox,
    /// Far children introduced to each other, and when (see `introduce_far_children`).
    introduced: HashMap<(RootIdx, NodeId, NodeId), Time>,
    timers: TimerQueue,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    left: bool,
    stats: CoreStats,
    /// Broadcast, scatter, gather and reduce along the trees.
    coll: Collectives,
    /// Clusters discovered from the measured latencies.
    discovery: discovery::Discovery,
    /// The cost of one send as the driver measured it (see [`Input::SendCost`]).
    send_cost: collectives::SendCostEstimate,
    /// Scratch space of `handle_entries` (kept to save an allocation per message).
    entry_scratch: Vec<Option<RootIdx>>,
    /// Scratch space of `evaluate_all`.
    heard_scratch: Vec<(NodeId, Heard)>,
}

const OWN_ROOT: RootIdx = 0;

/// Near candidates asked for their state in a member's tree when this node learns of the
/// member (see `handle_member_up`).
const LATE_ROOT_ASKS: usize = 4;

/// A peer is sent our state again after lost messages at most once per this share of the
/// serial period: while the transport keeps losing (a full writer queue), every resend
/// would be lost too, and the peer's replies would set off the next one.
const RESYNC_GAP_PER_SERIAL_PERIOD: u32 = 4;

/// Own RTT samples a peer needs before a connected node switches to it.
const MIN_SAMPLES_TO_MOVE: usize = 3;

/// A child attached over a link at least this long (one-way, µs) is introduced to its
/// siblings at about the same latency (see `Core::introduce_siblings`).
const SIBLING_HINT_MIN_LAT_US: u32 = 1_000;

/// The same two far children are introduced again only after this long.
const REINTRODUCE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The same parent query, with nothing changed on either side, is sent again only after
/// this long.
const REQUERY_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

impl Core {
    /// This node's parent in every tree that has one.
    fn tree_parents(&self) -> HashSet<NodeId> {
        self.trees
            .iter()
            .flatten()
            .filter_map(|t| t.parent)
            .collect()
    }

    /// A core for node `id`, with its own RNG seeded by `seed`, started at `now`.
    pub fn new(id: NodeId, config: Config, seed: u64, now: Time) -> Self {
        let mut rng = SplitMix64::new(seed);
        let mut timers = TimerQueue::default();
        let phase = |rng: &mut SplitMix64, d: std::time::Duration| now + d.mul_f64(rng.unit());
        timers.set(Timer::SerialTick, phase(&mut rng, config.serial_period));
        timers.set(Timer::ProbeRound, phase(&mut rng, config.advert_interval));
        timers.set(Timer::ExploreRotate, now + config.explore_rotate);
        timers.set(
            Timer::Housekeeping,
            phase(&mut rng, config.serial_period) + config.serial_period,
        );
        let mut root_index = HashMap::default();
        root_index.insert(id, OWN_ROOT);
        let discovery = discovery::Discovery::new(id, seed, now, config.cluster_sync);
        let budget = config.advert_budget as f64;
        Core {
            id,
            config,
            rng,
            now,
            members: MemberTable::default(),
            rtt: HashMap::default(),
            cands: CandidateSet::default(),
            root_index,
            trees: vec![Some(TreeState::new_root(id, now))],
            heard: HashMap::default(),
            dirty: RootSet::default(),
            owed_full: BTreeSet::new(),
            lost_to: BTreeSet::new(),
            resynced_at: HashMap::default(),
            advert_tokens: budget,
            tokens_at: now,
            waiting_asks: HashMap::default(),
            asked: HashMap::default(),
            queried: HashMap::default(),
            serial_requested: HashMap::default(),
            out_asks: BTreeMap::new(),
            out_queries: BTreeMap::new(),
            sweep: Vec::new(),
            last_bump: now,
            housekeeping_rounds: 0,
            probe_queue: VecDeque::new(),
            probe_gap: std::time::Duration::ZERO,
            outbox: Outbox::default(),
            introduced: HashMap::default(),
            timers,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            left: false,
            stats: CoreStats::default(),
            coll: Collectives::new(id),
            discovery,
            send_cost: collectives::SendCostEstimate::default(),
            entry_scratch: Vec::new(),
            heard_scratch: Vec::new(),
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The configuration in use.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The cost of one send the in-cluster plan goes by: the driver's recent measurements
    /// ([`Input::SendCost`]), else [`Config::send_cost`]; and whether it is measured.
    pub fn send_cost(&self) -> (Duration, bool) {
        match self.send_cost.measured() {
            Some(c) => (c, true),
            None => (self.config.send_cost, false),
        }
    }

    /// Feeds one input at time `now` (never earlier than a previous call's `now`).
    pub fn handle(&mut self, now: Time, input: Input) {
        if self.left {
            return;
        }
        self.now = self.now.max(now);
        // Work the previous input deferred comes before this one (undrained drivers).
        self.run_deferred();
        match input {
            Input::Received { from, msg } => self.handle_message(from, msg),
            Input::Timeout => {}
            Input::MemberUp { id } => self.handle_member_up(id),
            Input::MemberDown { id, reason } => {
                let was_alive = self.members.is_alive(&id);
                self.handle_member_down(id, reason);
                if was_alive {
                    let now = self.now;
                    self.with_collectives(|c, v| c.member_down(now, v, id));
                }
            }
            Input::RttSample { peer, rtt } => {
                if self.members.is_alive(&peer) {
                    self.add_rtt_sample(peer, rtt.as_micros().min(u32::MAX as u128) as u32);
                }
            }
            Input::SendCost { per_send } => self.send_cost.sample(per_send),
            Input::LinkLost { peer } => {
                if peer != self.id && self.members.is_alive(&peer) {
                    self.stats.links_lost += 1;
                    self.lost_to.insert(peer);
                }
            }
            Input::Command(Command::Leave) => return self.leave(),
            Input::Command(cmd) => self.handle_collective_command(cmd),
        }
        self.fire_due_timers();
        if self.coll.poll_timeout().is_some_and(|t| t <= self.now) {
            let now = self.now;
            self.with_collectives(|c, v| c.handle_timeout(now, v));
        }
        if !self.outbox.is_empty() {
            let mut out = std::mem::take(&mut self.outbox);
            out.drain(|to, msg| self.send(to, msg));
            self.outbox = out;
        }
        if !self.dirty.is_empty()
            || !self.owed_full.is_empty()
            || !self.out_asks.is_empty()
            || !self.out_queries.is_empty()
            || self.discovery.table.has_news()
        {
            self.timers
                .set_if_idle(Timer::AdvertFlush, self.now + self.config.advert_interval);
        }
    }

    /// Next message to send, if any. The sends of an operation across the wide area come
    /// out before its in-cluster part is worked out: that part runs here once they are
    /// drained (a driver that wants them on the wire first sends what
    /// [`Core::poll_ready_transmit`] gives while [`Core::has_deferred`] holds).
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        if let Some(t) = self.poll_ready_transmit() {
            return Some(t);
        }
        self.run_deferred();
        self.poll_ready_transmit()
    }

    /// Next message already worked out, without running deferred work.
    pub fn poll_ready_transmit(&mut self) -> Option<Transmit> {
        self.transmits
            .pop_front()
            .or_else(|| self.coll.poll_transmit())
    }

    /// Whether an operation's in-cluster part waits behind the transmits queued now.
    pub fn has_deferred(&self) -> bool {
        self.coll.has_deferred()
    }

    fn run_deferred(&mut self) {
        if self.coll.has_deferred() {
            self.with_collectives(|c, v| c.run_deferred(v));
        }
    }

    /// Next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front().or_else(|| self.coll.poll_event()) {
            return Some(e);
        }
        // Deferred work may have events too (a driver that drains events first).
        self.run_deferred();
        self.events.pop_front().or_else(|| self.coll.poll_event())
    }

    /// When to call `handle(now, Input::Timeout)` next (`None` after leaving).
    pub fn poll_timeout(&self) -> Option<Time> {
        if self.left {
            return None;
        }
        match (self.timers.next_deadline(), self.coll.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Registers a user-defined reducer under `name` (it must be registered under the same
    /// name on every node that may relay a reduce using it).
    pub fn register_reducer(&mut self, name: impl Into<String>, f: super::collective::ReduceFn) {
        self.coll.register_reducer(name, f);
    }

    /// Collective operations remembered (as relay) and running (as root).
    pub fn collectives_in_flight(&self) -> (usize, usize) {
        self.coll.in_flight()
    }

    /// This node's parent in `root`'s tree.
    pub fn parent(&self, root: NodeId) -> Option<NodeId> {
        self.tree_state(root).and_then(|t| t.parent)
    }

    /// Whether this node has a path to `root`.
    pub fn is_connected(&self, root: NodeId) -> bool {
        self.tree_state(root).is_some_and(|t| t.connected)
    }

    /// A snapshot of this node's state in `root`'s tree.
    pub fn tree(&self, root: NodeId) -> Option<TreeView> {
        self.tree_state(root).map(|t| TreeView {
            root,
            parent: t.parent,
            children: t.children.iter().copied().collect(),
            serial: t.serial,
            dist: std::time::Duration::from_micros(t.dist_us as u64),
            fd: std::time::Duration::from_micros(t.fd_us as u64),
            connected: t.connected,
        })
    }

    /// Every root whose tree this node tracks (itself included).
    pub fn roots(&self) -> Vec<NodeId> {
        self.trees.iter().flatten().map(|t| t.root).collect()
    }

    /// Filtered RTT estimate to `peer`.
    pub fn rtt(&self, peer: NodeId) -> Option<std::time::Duration> {
        self.rtt
            .get(&peer)
            .and_then(|e| e.rtt_us())
            .map(|us| std::time::Duration::from_micros(us as u64))
    }

    /// Every member heard of, with its state.
    pub fn members(&self) -> Vec<(NodeId, MemberState)> {
        self.members.sorted()
    }

    /// What the core has done so far.
    pub fn stats(&self) -> CoreStats {
        self.stats
    }

    /// The peers this node currently watches (its candidate set).
    pub fn candidates(&self) -> Vec<NodeId> {
        self.cands.watched().collect()
    }

    /// Our state in `root`'s tree, if we track it.
    fn tree_state(&self, root: NodeId) -> Option<&TreeState> {
        self.root_index
            .get(&root)
            .and_then(|&i| self.trees[i].as_ref())
    }

    // ---- inputs ---------------------------------------------------------------------

    // ---- tree maintenance -----------------------------------------------------------

    // ---- timers ---------------------------------------------------------------------

    // ---- helpers --------------------------------------------------------------------

    /// Queues `msg` to `to`.
    fn send(&mut self, to: NodeId, msg: Message) {
        self.transmits.push_back(Transmit { to, msg });
    }

    /// Leaves gracefully: detaches from every parent and stops.
    fn leave(&mut self) {
        let detaches: Vec<(NodeId, NodeId)> = self
            .trees
            .iter()
            .flatten()
            .filter_map(|t| t.parent.map(|p| (p, t.root)))
            .collect();
        for (p, root) in detaches {
            self.send(p, Message::Detach { root });
        }
        self.left = true;
        self.events.push_back(Event::Left);
    }
}

/// Our state in a tree as an advert entry.
fn entry_of(t: &TreeState) -> AdvertEntry {
    AdvertEntry {
        root: t.root,
        serial: t.serial,
        dist_us: t.dist_us,
        connected: t.connected,
    }
}
