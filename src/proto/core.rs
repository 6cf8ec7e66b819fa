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

mod discovery;

/// What a peer last told us about one root.
#[derive(Clone, Copy, Debug, Default)]
struct Heard {
    serial: u32,
    dist_us: u32,
    connected: bool,
    known: bool,
}

/// Counters of what the core did, for diagnostics and the simulator's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CoreStats {
    /// Parent switches under conditions (1)-(4).
    pub switches_rules: u64,
    /// Parent switches by the shortcut rule.
    pub switches_shortcut: u64,
    /// Re-attachments of a node without a path.
    pub switches_repair: u64,
    /// Parents lost because they left or died.
    pub parents_lost: u64,
    /// Parents dropped because they went quiet for six serial periods.
    pub parents_quiet: u64,
    /// Advert requests and parent queries sent.
    pub asks: u64,
    /// Parent queries sent.
    pub parent_queries: u64,
    /// Versions of its own cluster summary this node published.
    pub cluster_publishes: u64,
    /// Cluster discovery messages sent (summaries, digests, version lists).
    pub cluster_messages: u64,
    /// Their encoded bytes.
    pub cluster_bytes: u64,
    /// Full adverts sent (one entry per connected tree).
    pub full_adverts: u64,
    /// Entries carried by full adverts.
    pub full_advert_entries: u64,
    /// Entries sent in adverts of changes.
    pub delta_advert_entries: u64,
    /// Peers newly watched as near peers or explorers (a full advert each way).
    pub watches: u64,
    /// Peers newly hinted (measured only).
    pub hinted: u64,
}

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
    heard: HashMap<NodeId, Vec<Heard>>,
    /// Roots whose advertised state is due to go out with the next flush.
    dirty: BTreeSet<RootIdx>,
    /// Peers owed a full advert (new candidates, new inbound probers, periodic refresh).
    owed_full: BTreeSet<NodeId>,
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
    /// Scratch space of `handle_entries` (kept to save an allocation per message).
    entry_scratch: Vec<Option<RootIdx>>,
}

/// The overlay as the collective engine sees it: borrowed from the core's tables.
struct CoreView<'a> {
    id: NodeId,
    config: &'a Config,
    members: &'a MemberTable,
    root_index: &'a HashMap<NodeId, RootIdx>,
    trees: &'a [Option<TreeState>],
    rtt: &'a HashMap<NodeId, RttEstimator>,
}

impl Overlay for CoreView<'_> {
    fn me(&self) -> NodeId {
        self.id
    }
    fn alive_members(&self) -> &[NodeId] {
        self.members.alive()
    }
    fn is_alive(&self, id: &NodeId) -> bool {
        *id == self.id || self.members.is_alive(id)
    }
    fn children(&self, root: NodeId) -> Vec<NodeId> {
        self.root_index
            .get(&root)
            .and_then(|&i| self.trees[i].as_ref())
            .map(|t| t.children.iter().copied().collect())
            .unwrap_or_default()
    }
    fn rtt_us(&self, peer: NodeId) -> Option<u32> {
        self.rtt.get(&peer).and_then(|e| e.rtt_us())
    }
    fn cluster_rtt_us(&self) -> u32 {
        self.config.cluster_rtt.as_micros().min(u32::MAX as u128) as u32
    }
    fn send_cost_us(&self) -> u32 {
        self.config.send_cost.as_micros().min(u32::MAX as u128) as u32
    }
}

const OWN_ROOT: RootIdx = 0;

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
            dirty: BTreeSet::new(),
            owed_full: BTreeSet::new(),
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
            entry_scratch: Vec::new(),
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

    /// Feeds one input at time `now` (never earlier than a previous call's `now`).
    pub fn handle(&mut self, now: Time, input: Input) {
        if self.left {
            return;
        }
        self.now = self.now.max(now);
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

    /// Next message to send, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits
            .pop_front()
            .or_else(|| self.coll.poll_transmit())
    }

    /// Next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
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

    /// Runs `f` on the collective engine with a view of the overlay.
    fn with_collectives(&mut self, f: impl FnOnce(&mut Collectives, &CoreView<'_>)) {
        let view = CoreView {
            id: self.id,
            config: &self.config,
            members: &self.members,
            root_index: &self.root_index,
            trees: &self.trees,
            rtt: &self.rtt,
        };
        f(&mut self.coll, &view);
    }

    fn handle_collective_command(&mut self, cmd: Command) {
        let now = self.now;
        match cmd {
            Command::Leave => self.leave(),
            Command::Start(s) => self.with_collectives(|c, v| c.start(now, v, s)),
            Command::Publish { key, value } => {
                self.with_collectives(|c, v| c.publish(now, v, key, value))
            }
            Command::Withdraw { key } => self.coll.withdraw(&key),
            Command::Contribute { op, value } => {
                self.with_collectives(|c, v| c.contribute(now, v, op, value))
            }
            Command::StreamDone { op, ok } => {
                self.with_collectives(|c, v| c.stream_done(now, v, op, ok))
            }
        }
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

    fn tree_state(&self, root: NodeId) -> Option<&TreeState> {
        self.root_index
            .get(&root)
            .and_then(|&i| self.trees[i].as_ref())
    }

    // ---- inputs ---------------------------------------------------------------------

    fn handle_member_up(&mut self, id: NodeId) {
        if id == self.id || !self.members.up(id) {
            return;
        }
        self.events.push_back(Event::MemberUp { id });
        self.discovery.table.touch();
        let idx = match self.root_index.get(&id) {
            Some(&i) => i,
            None => {
                self.trees.push(None);
                self.root_index.insert(id, self.trees.len() - 1);
                self.trees.len() - 1
            }
        };
        self.trees[idx] = Some(TreeState::new_detached(id, self.now));
        self.events.push_back(Event::RootAdded { root: id });
        // Measured by the sweep; the candidate set is topped up with random members at the
        // next probe round (taking the first members to arrive would make every node of a
        // fresh overlay watch the same few peers, and load them with everyone's traffic).
        self.sweep.push(id);
    }

    fn handle_member_down(&mut self, id: NodeId, reason: DownReason) {
        let state = match reason {
            DownReason::Left => MemberState::Left,
            DownReason::Dead => MemberState::Dead,
        };
        if id == self.id || !self.members.down(id, state) {
            return;
        }
        self.events.push_back(Event::MemberDown { id, reason });
        self.discovery.table.remove(&id);
        self.cands.remove(&id);
        self.rtt.remove(&id);
        self.heard.remove(&id);
        self.owed_full.remove(&id);
        self.out_asks.remove(&id);
        self.out_queries.remove(&id);
        if let Some(&ri) = self.root_index.get(&id)
            && let Some(t) = self.trees[ri].take()
        {
            if t.parent.is_some() {
                self.events.push_back(Event::ParentChanged {
                    root: id,
                    old: t.parent,
                    new: None,
                });
            }
            self.events.push_back(Event::RootRemoved { root: id });
            self.waiting_asks.remove(&ri);
            self.dirty.remove(&ri);
        }
        for ri in 0..self.trees.len() {
            let Some(t) = self.trees[ri].as_mut() else {
                continue;
            };
            t.children.remove(&id);
            if t.parent == Some(id) {
                self.stats.parents_lost += 1;
                self.detach(ri);
                self.evaluate_all(ri);
            }
        }
        self.refill();
    }

    fn handle_message(&mut self, from: NodeId, msg: Message) {
        if from == self.id || !self.members.is_alive(&from) {
            return; // Only members take part; late messages of departed ones are dropped.
        }
        match msg {
            Message::Ping {
                sent_us,
                rtt_hint_us,
                watch,
            } => {
                if watch
                    && self.cands.note_inbound(from, self.now)
                    && self.cands.role(&from).is_none()
                {
                    self.owed_full.insert(from);
                }
                self.send(from, Message::Pong { sent_us });
                if let Some(h) = rtt_hint_us {
                    let e = self.rtt.entry(from).or_default();
                    if !e.measured() {
                        let before = e.rtt_us();
                        e.set_hint(h);
                        if before != e.rtt_us() {
                            self.on_rtt_changed(from);
                        }
                    }
                }
            }
            Message::Pong { sent_us } => {
                if sent_us <= self.now.as_micros() {
                    let rtt = (self.now.as_micros() - sent_us).min(u32::MAX as u64) as u32;
                    self.add_rtt_sample(from, rtt);
                    // A hinted peer is measured at once, a few times back to back, so the
                    // verdict that made us measure it can be taken again soon.
                    if self.is_hinted(&from)
                        && self
                            .rtt
                            .get(&from)
                            .is_some_and(|e| e.samples() < MIN_SAMPLES_TO_MOVE)
                    {
                        self.ping(from, false);
                    }
                }
            }
            Message::Advert { entries } => self.handle_entries(from, &entries, false),
            Message::TreeUpdate(e) => self.handle_entry(from, e, true),
            Message::TreeUpdates(entries) => self.handle_entries(from, &entries, true),
            Message::Attach { root } => self.handle_link(from, root, true),
            Message::Detach { root } => self.handle_link(from, root, false),
            Message::Links { attach, detach } => {
                for root in detach {
                    self.handle_link(from, root, false);
                }
                for root in attach {
                    self.handle_link(from, root, true);
                }
            }
            Message::SerialRequest { root, serial } => {
                if root == self.id
                    && serial > self.trees[OWN_ROOT].as_ref().expect("own tree").serial
                {
                    let at = self
                        .now
                        .max(self.last_bump + self.config.serial_request_gap);
                    self.timers.set(Timer::SerialTick, at);
                }
            }
            Message::AdvertRequest { roots } => {
                let mut now_entries = Vec::new();
                for (root, serial) in roots {
                    let Some(ri) = self.live_root(root) else {
                        continue;
                    };
                    let t = self.trees[ri].as_ref().expect("live");
                    if t.serial >= serial {
                        now_entries.push(entry_of(t));
                    } else {
                        self.waiting_asks
                            .entry(ri)
                            .or_default()
                            .push((from, serial, self.now));
                    }
                }
                if !now_entries.is_empty() {
                    self.send(
                        from,
                        Message::Advert {
                            entries: now_entries,
                        },
                    );
                }
            }
            Message::Collective(m) => {
                let now = self.now;
                self.with_collectives(|c, v| c.handle_message(now, v, from, m));
            }
            Message::Resync => {
                self.owed_full.insert(from);
            }
            Message::Cluster(m) => self.handle_cluster_message(from, m),
            Message::ParentQuery { roots } => {
                let parents: Vec<(NodeId, NodeId)> = roots
                    .into_iter()
                    .filter_map(|r| self.tree_state(r).and_then(|t| t.parent).map(|p| (r, p)))
                    .collect();
                if !parents.is_empty() {
                    self.send(from, Message::ParentHint { parents });
                }
            }
            Message::ParentHint { parents } => {
                for (root, q) in parents {
                    if q == self.id || !self.members.is_alive(&q) {
                        continue;
                    }
                    let Some(ri) = self.live_root(root) else {
                        continue;
                    };
                    let t = self.trees[ri].as_ref().expect("live");
                    if t.parent == Some(q) || t.children.contains(&q) {
                        continue;
                    }
                    // Measure q, and trade states in this one tree: q's answer lets us
                    // judge it, ours lets q judge us (it may be the one to move).
                    let (e, serial) = (entry_of(t), t.serial);
                    self.measure(q);
                    self.outbox.answer(q, e);
                    self.out_asks.entry(q).or_default().push((root, serial));
                }
            }
        }
    }

    /// `from` attached to us (`true`) or detached from us in `root`'s tree.
    fn handle_link(&mut self, from: NodeId, root: NodeId, attach: bool) {
        let Some(ri) = self.live_root(root) else {
            return;
        };
        let t = self.trees[ri].as_mut().expect("live");
        if attach {
            if t.children.insert(from) {
                self.introduce_siblings(ri, from);
            }
            let t = self.trees[ri].as_ref().expect("live");
            let e = entry_of(t);
            self.outbox.update(from, e);
        } else {
            t.children.remove(&from);
        }
    }

    /// Introduces to each other the far children whose latencies from us are within an
    /// eighth of each other (neighbours in latency order; at most `max_hinted` pairs).
    /// Not while this node is still meeting the members: every tree is forming then, and
    /// each hint costs the receiver a hinted peer to measure.
    fn introduce_far_children(&mut self, ri: RootIdx) {
        if !self.sweep.is_empty() {
            return;
        }
        let t = self.trees[ri].as_ref().expect("live");
        let root = t.root;
        let mut far: Vec<(u32, NodeId)> = t
            .children
            .iter()
            .filter_map(|c| self.lat_us(c).map(|l| (l, *c)))
            .filter(|(l, _)| *l >= SIBLING_HINT_MIN_LAT_US)
            .collect();
        far.sort_unstable();
        let pairs: Vec<(NodeId, NodeId)> = far
            .windows(2)
            .filter(|w| w[1].0 <= w[0].0 + w[0].0 / 8)
            .map(|w| (w[0].1, w[1].1))
            .take(self.config.max_hinted)
            .collect();
        for (a, b) in pairs {
            // A pair in different clusters stays apart; telling it again every few rounds
            // would cost two hinted watches each time, for nothing.
            let key = (ri, a.min(b), a.max(b));
            if self
                .introduced
                .get(&key)
                .is_some_and(|at| self.now.saturating_since(*at) < REINTRODUCE_AFTER)
            {
                continue;
            }
            self.introduced.insert(key, self.now);
            self.outbox.hint(a, root, b);
            self.outbox.hint(b, root, a);
        }
    }

    /// A child attached over a long link: it has entered a far cluster. Other children at
    /// about the same latency from us are probably in that cluster too, and then only one
    /// of them should stay attached to us (wide-area optimality). Nothing in their own
    /// candidate sets may lead them to each other (each sees only its own subtree nearby),
    /// so we introduce them to each other with parent hints, both ways; the rules then
    /// decide who moves under whom. Costs a few hints per long attach, nothing in a settled
    /// tree.
    fn introduce_siblings(&mut self, ri: RootIdx, child: NodeId) {
        // Not while still meeting the members (see `introduce_far_children`).
        if !self.sweep.is_empty() {
            return;
        }
        let Some(lat) = self.lat_us(&child) else {
            return;
        };
        if lat < SIBLING_HINT_MIN_LAT_US {
            return;
        }
        let (lo, hi) = (lat - lat / 8, lat + lat / 8);
        let t = self.trees[ri].as_ref().expect("live");
        let root = t.root;
        let sibs: Vec<NodeId> = t
            .children
            .iter()
            .copied()
            .filter(|s| *s != child)
            .filter(|s| self.lat_us(s).is_some_and(|l| (lo..=hi).contains(&l)))
            .take(self.config.max_hinted + 1)
            .collect();
        if sibs.len() > self.config.max_hinted {
            // A tree still forming (many far children at once): the candidate sets are
            // doing the work, and introductions would only flood everyone with hints.
            return;
        }
        for s in sibs {
            self.outbox.hint(child, root, s);
            self.outbox.hint(s, root, child);
        }
    }

    /// One root's state from a peer: from our parent it sets our own state; from anyone
    /// else it is a candidate to judge. `pushed` marks a [`Message::TreeUpdate`].
    fn handle_entry(&mut self, from: NodeId, e: AdvertEntry, pushed: bool) {
        let Some(ri) = self.live_root(e.root) else {
            return;
        };
        let slot = self.heard.entry(from).or_default();
        if slot.len() <= ri {
            slot.resize(ri + 1, Heard::default());
        }
        slot[ri] = heard_of(&e);
        self.act_on_entry(from, ri, e, pushed);
    }

    /// Several entries from one peer, as [`Core::handle_entry`] one after the other would
    /// handle them, in fewer passes over memory: every root is looked up first (the lookups
    /// are independent, so their cache misses overlap instead of queueing behind each
    /// other's work), then everything heard is written under one lookup of the peer, then
    /// each entry is acted on. Equivalent because acting on one root's entry reads and
    /// writes only that root's tree and what was heard about that root, and nothing in
    /// between adds or removes roots or forgets the peer.
    fn handle_entries(&mut self, from: NodeId, entries: &[AdvertEntry], pushed: bool) {
        if let [e] = entries {
            return self.handle_entry(from, *e, pushed);
        }
        let mut live = std::mem::take(&mut self.entry_scratch);
        live.clear();
        live.extend(entries.iter().map(|e| self.root_index.get(&e.root).copied()));
        for slot in live.iter_mut() {
            *slot = slot.filter(|&i| self.trees[i].is_some());
        }
        if let Some(max) = live.iter().flatten().copied().max() {
            let heard = self.heard.entry(from).or_default();
            if heard.len() <= max {
                heard.resize(max + 1, Heard::default());
            }
            for (e, ri) in entries.iter().zip(&live) {
                if let Some(ri) = *ri {
                    heard[ri] = heard_of(e);
                }
            }
            for (e, ri) in entries.iter().zip(&live) {
                if let Some(ri) = *ri {
                    self.act_on_entry(from, ri, *e, pushed);
                }
            }
        }
        self.entry_scratch = live;
    }

    /// The part of [`Core::handle_entry`] after `e` was written down as heard from `from`.
    fn act_on_entry(&mut self, from: NodeId, ri: RootIdx, e: AdvertEntry, pushed: bool) {
        let t = self.trees[ri].as_ref().expect("live");
        if t.parent == Some(from) {
            self.apply_parent_state(ri, e);
        } else if pushed {
            // It thinks we are its child; we are not (any more).
            self.outbox.detach(from, e.root);
        } else {
            self.consider(ri, from);
        }
    }

    fn add_rtt_sample(&mut self, peer: NodeId, rtt_us: u32) {
        let window = self.config.rtt_window;
        let e = self.rtt.entry(peer).or_default();
        let before = e.rtt_us();
        e.push(rtt_us, window);
        // Enough samples to move to it is a change too (see `judge`).
        if before != e.rtt_us() || e.samples() == MIN_SAMPLES_TO_MOVE {
            self.on_rtt_changed(peer);
        }
    }

    fn on_rtt_changed(&mut self, peer: NodeId) {
        if self.cands.role(&peer).is_none() {
            // A swept or inbound peer: watch it if it is nearer than our farthest near peer.
            let rtt = &self.rtt;
            let cutoff = self.cands.near_cutoff(
                |k| rtt.get(k).and_then(|e| e.rtt_us()),
                self.config.max_near,
            );
            let mine = rtt.get(&peer).and_then(|e| e.rtt_us());
            match (mine, cutoff) {
                (Some(m), Some(c)) if m < c => self.watch(peer),
                (Some(_), None) => self.watch(peer),
                _ => {}
            }
        }
        let rtt = &self.rtt;
        self.cands.rebalance(
            |k| rtt.get(k).and_then(|e| e.rtt_us()),
            self.config.max_near,
            self.config.explorers,
        );
        if !self.heard.contains_key(&peer) {
            return; // Nothing heard from it yet: no tree to re-judge.
        }
        for ri in 0..self.trees.len() {
            let Some(t) = self.trees[ri].as_ref() else {
                continue;
            };
            if t.parent == Some(peer) {
                let e = AdvertEntry {
                    root: t.root,
                    serial: t.serial,
                    dist_us: t.parent_dist_us,
                    connected: t.connected,
                };
                self.apply_parent_state(ri, e);
            } else {
                self.consider(ri, peer);
            }
        }
    }

    // ---- tree maintenance -----------------------------------------------------------

    fn lat_us(&self, peer: &NodeId) -> Option<u32> {
        self.rtt.get(peer).and_then(|e| e.lat_us())
    }

    fn live_root(&self, root: NodeId) -> Option<RootIdx> {
        self.root_index
            .get(&root)
            .copied()
            .filter(|&i| self.trees[i].is_some())
    }

    fn view(&self, ri: RootIdx, c: NodeId) -> Option<CandidateView> {
        let h = *self.heard.get(&c)?.get(ri)?;
        if !h.known || !self.members.is_alive(&c) {
            return None;
        }
        Some(CandidateView {
            id: c,
            serial: h.serial,
            dist_us: h.dist_us,
            connected: h.connected,
            lat_us: self.lat_us(&c)?,
        })
    }

    fn judge(&self, ri: RootIdx, view: &CandidateView) -> Judgement {
        let t = self.trees[ri].as_ref().expect("live");
        let parent_lat = t.parent.and_then(|p| self.lat_us(&p));
        let verdict = tree::judge_with(
            t,
            self.id,
            parent_lat,
            view,
            self.config.shortcut_threshold.as_micros() as u32,
            self.sweep.is_empty(),
        );
        // A connected node only moves to a peer measured a few times: a first sample can
        // be far off (queueing), and a move on noise is a move too many. Repair need not
        // wait. A peer that would be taken but is not measured enough (it advertises to us
        // because it watches us) is probed first; without that, two equally good entries
        // into a cluster of which only one watches the other would never merge.
        let samples = self.rtt.get(&view.id).map_or(0, |e| e.samples());
        if t.connected && samples < MIN_SAMPLES_TO_MOVE {
            return match verdict {
                // A candidate that would qualify once its state is fresh is measured first
                // too: without that, one heard of long ago, that does not advertise to us
                // again (its dist did not change), is never looked at again.
                Judgement::Switch(_) | Judgement::NeedFresh => Judgement::NeedMeasure,
                // Asking for its parent moves nothing: one sample of our own will do (noise
                // only makes a peer look farther). Waiting for three would stall the walk up
                // a cluster's subtree at every step, and lose it where the hinted peer is
                // dropped before its third sample.
                Judgement::AskParent if samples > 0 => Judgement::AskParent,
                _ => Judgement::No,
            };
        }
        verdict
    }

    /// Judges one candidate and acts on the verdict.
    fn consider(&mut self, ri: RootIdx, c: NodeId) {
        if ri == OWN_ROOT {
            return;
        }
        let Some(view) = self.view(ri, c) else { return };
        match self.judge(ri, &view) {
            Judgement::Switch(why) => self.switch_to(ri, view, why),
            other => self.follow_up(ri, &view, other),
        }
    }

    /// Acts on a verdict that is not a switch: ask for fresher state, or for the
    /// candidate's parent.
    fn follow_up(&mut self, ri: RootIdx, view: &CandidateView, verdict: Judgement) {
        match verdict {
            Judgement::NeedFresh => self.ask(ri, view),
            // Parent queries only once the sweep has met every member: before that, every
            // tree is forming, nearly every neighbour looks worth asking, and each answer
            // costs a hinted peer and its probes; in a large overlay that floods.
            Judgement::AskParent if !self.sweep.is_empty() => {}
            Judgement::AskParent => {
                // What we heard may be stale by a little (small changes are not advertised):
                // ask for its exact state too.
                if self.query_parent(ri, view) {
                    self.ask(ri, view);
                }
            }
            Judgement::NeedMeasure => self.measure(view.id),
            Judgement::No if self.sweep.is_empty() && self.entry_walk(ri, view) => {
                self.query_parent(ri, view);
            }
            Judgement::Switch(_) | Judgement::No => {}
        }
    }

    /// Whether to walk up the ancestry of `view.id`, a peer much closer to us than our
    /// parent that is neither a better parent nor, by its dist, obviously hanging near a
    /// better one. We then entered a cluster over a long link, and the cluster may be
    /// entered a second time, through the subtree `view.id` is in: the walk up finds that
    /// other entry. Two entries whose near peers all hang in their own subtrees never see
    /// each other otherwise. In a settled tree the walk leads back to us; the parent query
    /// is then not repeated while nothing changes (see `query_parent`).
    fn entry_walk(&self, ri: RootIdx, view: &CandidateView) -> bool {
        let t = self.trees[ri].as_ref().expect("live");
        let Some(parent) = t.parent else {
            return false;
        };
        t.connected
            && view.connected
            && parent != view.id
            && !t.children.contains(&view.id)
            && self.rtt.get(&view.id).is_some_and(|e| e.measured())
            && self
                .lat_us(&parent)
                .is_some_and(|pl| view.lat_us.saturating_mul(2) < pl)
    }

    /// Watches `peer` for a while (as a hinted peer) so it gets probed; it stays watched
    /// if it becomes a parent. Only measured: probes to a hinted peer do not subscribe us
    /// to its adverts, and no full adverts are traded (what it costs at a thousand roots
    /// would dwarf the few entries a hint is about).
    fn measure(&mut self, peer: NodeId) {
        // Measured enough already (an earlier candidate, or a peer measured on an earlier
        // hint): the entries traded with it can be judged at once, and the hinted places
        // stay free for the peers that still need their samples.
        if self
            .rtt
            .get(&peer)
            .is_some_and(|e| e.samples() >= MIN_SAMPLES_TO_MOVE)
        {
            return;
        }
        let expires = self.now + self.config.serial_period * 6;
        if self.cands.add_hinted(peer, expires, self.config.max_hinted) {
            self.stats.hinted += 1;
            self.ping(peer, false);
        }
    }

    fn is_hinted(&self, peer: &NodeId) -> bool {
        matches!(self.cands.role(peer), Some(Role::Hinted { .. }))
    }

    /// Judges every candidate heard of for this root and takes the best switch; a node
    /// still without a path asks the root for a fresh serial.
    fn evaluate_all(&mut self, ri: RootIdx) {
        if ri == OWN_ROOT || self.trees[ri].is_none() {
            return;
        }
        let peers: Vec<NodeId> = self.heard.keys().copied().collect();
        let mut best: Option<((SwitchReason, u32, u32, NodeId), CandidateView)> = None;
        for c in peers {
            let Some(view) = self.view(ri, c) else {
                continue;
            };
            match self.judge(ri, &view) {
                Judgement::Switch(why) => {
                    let key = tree::preference(why, &view);
                    if best.as_ref().is_none_or(|(k, _)| key < *k) {
                        best = Some((key, view));
                    }
                }
                other => self.follow_up(ri, &view, other),
            }
        }
        if let Some(((why, ..), view)) = best {
            self.switch_to(ri, view, why);
        }
        if !self.trees[ri].as_ref().expect("live").connected {
            self.request_serial(ri);
        }
    }

    fn switch_to(&mut self, ri: RootIdx, view: CandidateView, why: SwitchReason) {
        match why {
            SwitchReason::Rules => self.stats.switches_rules += 1,
            SwitchReason::Shortcut => self.stats.switches_shortcut += 1,
            SwitchReason::Repair => self.stats.switches_repair += 1,
        }
        let now = self.now;
        let t = self.trees[ri].as_mut().expect("live");
        let old = t.parent;
        let was_connected = t.connected;
        let root = t.root;
        t.parent = Some(view.id);
        t.parent_dist_us = view.dist_us;
        let advanced = t.adopt_serial(view.serial);
        t.set_dist(view.dist_through());
        t.track_best(why == SwitchReason::Repair);
        t.connected = view.connected;
        t.refreshed_at = now;
        if let Some(o) = old {
            self.outbox.detach(o, root);
        }
        self.outbox.attach(view.id, root);
        self.events.push_back(Event::ParentChanged {
            root,
            old,
            new: Some(view.id),
        });
        if !was_connected {
            self.events.push_back(Event::ConnectedChanged {
                root,
                connected: true,
            });
        }
        self.after_change(ri, advanced);
    }

    /// Our parent is gone: no path until repaired.
    fn detach(&mut self, ri: RootIdx) {
        let t = self.trees[ri].as_mut().expect("live");
        let old = t.parent.take();
        let root = t.root;
        let was_connected = t.connected;
        t.connected = false;
        t.dist_us = INFINITE;
        t.parent_dist_us = INFINITE;
        self.events.push_back(Event::ParentChanged {
            root,
            old,
            new: None,
        });
        if was_connected {
            self.events.push_back(Event::ConnectedChanged {
                root,
                connected: false,
            });
        }
        self.after_change(ri, false);
    }

    /// Our parent told us its state (pushed, advertised, or our latency to it changed).
    fn apply_parent_state(&mut self, ri: RootIdx, e: AdvertEntry) {
        let lat = self.trees[ri]
            .as_ref()
            .and_then(|t| t.parent)
            .and_then(|p| self.lat_us(&p));
        let now = self.now;
        let t = self.trees[ri].as_mut().expect("live");
        if e.serial < t.serial {
            return; // Reordered or stale.
        }
        let advanced = t.adopt_serial(e.serial);
        let before = (t.dist_us, t.connected);
        t.parent_dist_us = e.dist_us;
        t.refreshed_at = now;
        let dist = match (e.connected, lat) {
            (true, Some(l)) => e.dist_us.saturating_add(l),
            (true, None) => t.dist_us, // Latency unknown for a moment: keep the last figure.
            (false, _) => INFINITE,
        };
        t.set_dist(dist);
        t.track_best(false);
        t.connected = e.connected && dist != INFINITE;
        let root = t.root;
        if before.1 != t.connected {
            self.events.push_back(Event::ConnectedChanged {
                root,
                connected: t.connected,
            });
        }
        if advanced || before != (t.dist_us, t.connected) {
            self.after_change(ri, advanced);
        }
        if !self.trees[ri].as_ref().expect("live").connected {
            self.evaluate_all(ri);
        }
    }

    /// After our state in a tree changed: push it to the children, schedule an advert if
    /// it changed enough, and answer advert requests that waited for this serial.
    fn after_change(&mut self, ri: RootIdx, serial_advanced: bool) {
        let t = self.trees[ri].as_mut().expect("live");
        let e = entry_of(t);
        if t.advert_due() {
            self.dirty.insert(ri);
        }
        if serial_advanced || t.push_due() {
            t.pushed = (t.dist_us, t.connected);
            for &c in &t.children {
                self.outbox.update(c, e);
            }
        }
        if serial_advanced && let Some(waiting) = self.waiting_asks.get_mut(&ri) {
            let ready: Vec<NodeId> = waiting
                .iter()
                .filter(|(_, s, _)| *s <= e.serial)
                .map(|(p, _, _)| *p)
                .collect();
            waiting.retain(|(_, s, _)| *s > e.serial);
            for p in ready {
                self.outbox.answer(p, e);
            }
        }
    }

    /// Asks `view.id` for its state once its serial reaches ours (or the next one, if our
    /// feasibility distance is what blocks it).
    fn ask(&mut self, ri: RootIdx, view: &CandidateView) {
        let t = self.trees[ri].as_ref().expect("live");
        let want = if view.serial < t.serial {
            t.serial
        } else {
            t.serial + 1
        };
        let key = (view.id, ri);
        if let Some(&(s, at)) = self.asked.get(&key)
            && s >= want
            && self.now.saturating_since(at) < self.config.serial_period
        {
            return;
        }
        self.asked.insert(key, (want, self.now));
        self.stats.asks += 1;
        let root = t.root;
        self.out_asks.entry(view.id).or_default().push((root, want));
    }

    /// Asks `view.id` for its parent in this tree, at most once per serial period; and
    /// while neither our parent nor its dist changed, only once per `REQUERY_AFTER`: the
    /// same question would get the same answer (in a settled tree the candidate is often
    /// in our own subtree, and the walk up its ancestry only leads back to us). Returns
    /// whether the query goes out.
    fn query_parent(&mut self, ri: RootIdx, view: &CandidateView) -> bool {
        let key = (view.id, ri);
        let t = self.trees[ri].as_ref().expect("live");
        let (parent, root) = (t.parent, t.root);
        if let Some(&(at, p, d)) = self.queried.get(&key) {
            let age = self.now.saturating_since(at);
            // Dists as heard jitter a little (an answer carries the exact figure, adverts
            // only changes above 0.1%): the same bound as for adverts.
            let delta = d.abs_diff(view.dist_us);
            let same = p == parent && (delta <= 20 || delta as u64 * 1000 <= d as u64);
            if age < self.config.serial_period || (same && age < REQUERY_AFTER) {
                return false;
            }
        }
        self.queried.insert(key, (self.now, parent, view.dist_us));
        self.stats.parent_queries += 1;
        self.out_queries.entry(view.id).or_default().push(root);
        true
    }

    fn request_serial(&mut self, ri: RootIdx) {
        let gap = self.config.serial_period / 4;
        if self
            .serial_requested
            .get(&ri)
            .is_some_and(|at| self.now.saturating_since(*at) < gap)
        {
            return;
        }
        self.serial_requested.insert(ri, self.now);
        let t = self.trees[ri].as_ref().expect("live");
        let (root, serial) = (t.root, t.serial + 1);
        self.send(root, Message::SerialRequest { root, serial });
    }

    // ---- timers ---------------------------------------------------------------------

    fn fire_due_timers(&mut self) {
        while let Some(timer) = self.timers.pop_due(self.now) {
            match timer {
                Timer::SerialTick => self.on_serial_tick(),
                Timer::AdvertFlush => self.on_flush(),
                Timer::ProbeRound => self.on_probe_round(),
                Timer::ProbeNext => self.on_probe_next(),
                Timer::ExploreRotate => self.on_explore_rotate(),
                Timer::Housekeeping => self.on_housekeeping(),
            }
        }
    }

    fn on_serial_tick(&mut self) {
        let t = self.trees[OWN_ROOT].as_mut().expect("own tree");
        t.serial += 1;
        t.refreshed_at = self.now;
        self.last_bump = self.now;
        self.after_change(OWN_ROOT, true);
        self.timers
            .set(Timer::SerialTick, self.now + self.config.serial_period);
    }

    fn on_flush(&mut self) {
        for (peer, roots) in std::mem::take(&mut self.out_asks) {
            self.send(peer, Message::AdvertRequest { roots });
        }
        for (peer, roots) in std::mem::take(&mut self.out_queries) {
            self.send(peer, Message::ParentQuery { roots });
        }
        // The advert budget: spent ahead, the adverts wait (and coalesce) until it is
        // paid back.
        let rate = self.config.advert_budget as f64;
        if rate > 0.0 {
            let dt = self.now.saturating_since(self.tokens_at).as_secs_f64();
            self.advert_tokens = (self.advert_tokens + rate * dt).min(rate);
            self.tokens_at = self.now;
            if self.advert_tokens < 0.0 {
                let wait = std::time::Duration::from_secs_f64(-self.advert_tokens / rate);
                self.timers.set(
                    Timer::AdvertFlush,
                    self.now + wait.max(self.config.advert_interval),
                );
                return;
            }
        }
        let mut spent = 0usize;
        let mut entries = Vec::with_capacity(self.dirty.len());
        for ri in std::mem::take(&mut self.dirty) {
            if let Some(t) = self.trees[ri].as_mut() {
                t.advertised = (t.dist_us, t.connected);
                entries.push(entry_of(t));
            }
        }
        let targets = self.cands.advert_targets();
        let owed = std::mem::take(&mut self.owed_full);
        for peer in targets {
            if owed.contains(&peer) {
                // Only trees we are connected to: an unknown entry already means "no path".
                let all: Vec<AdvertEntry> = self
                    .trees
                    .iter()
                    .flatten()
                    .filter(|t| t.connected)
                    .map(entry_of)
                    .collect();
                self.stats.full_adverts += 1;
                self.stats.full_advert_entries += all.len() as u64;
                let msg = Message::Advert { entries: all };
                spent += msg.encoded_len();
                self.send(peer, msg);
            } else if !entries.is_empty() {
                self.stats.delta_advert_entries += entries.len() as u64;
                let msg = Message::Advert {
                    entries: entries.clone(),
                };
                spent += msg.encoded_len();
                self.send(peer, msg);
            }
        }
        self.push_cluster_news();
        self.advert_tokens -= spent as f64;
    }

    /// Plans a round of probes: every watched peer and parent, and a few members not
    /// measured yet. The probes are paced over most of the round, in random order: sent
    /// in one burst, the last of them would leave many per-message costs after its
    /// timestamp, and the peers late in a fixed order would always look farther away
    /// than they are (that bias alone kept parents inside a cluster changing).
    fn on_probe_round(&mut self) {
        self.refill();
        let mut targets: HashSet<NodeId> = self.cands.watched().collect();
        let parents: HashSet<NodeId> = self
            .trees
            .iter()
            .flatten()
            .filter_map(|t| t.parent)
            .collect();
        targets.extend(parents.iter().copied());
        let mut targets: Vec<NodeId> = targets.into_iter().collect();
        targets.sort_unstable();
        // Hinted peers are only measured: they need not send us their whole state.
        let mut round: Vec<(NodeId, bool)> = targets
            .into_iter()
            .map(|p| (p, !self.is_hinted(&p) || parents.contains(&p)))
            .collect();
        let per_round = self
            .config
            .sweep_per_round
            .max(self.members.alive().len() / self.config.sweep_rounds.max(1));
        for _ in 0..per_round {
            if self.sweep.is_empty() {
                break;
            }
            let i = self.rng.below(self.sweep.len() as u64) as usize;
            let peer = self.sweep.swap_remove(i);
            if self.members.is_alive(&peer) && self.cands.role(&peer).is_none() {
                round.push((peer, false));
            }
        }
        for i in (1..round.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            round.swap(i, j);
        }
        let jitter = 0.75 + 0.5 * self.rng.unit();
        let interval = self.config.probe_interval.mul_f64(jitter);
        self.probe_gap = interval.mul_f64(0.8) / (round.len() as u32 + 1);
        self.probe_queue = round.into();
        self.timers.set(Timer::ProbeNext, self.now);
        self.timers.set(Timer::ProbeRound, self.now + interval);
    }

    /// Sends the next probe of the round.
    fn on_probe_next(&mut self) {
        while let Some((peer, watch)) = self.probe_queue.pop_front() {
            if !self.members.is_alive(&peer) {
                continue;
            }
            self.ping(peer, watch);
            break;
        }
        if !self.probe_queue.is_empty() {
            self.timers.set(Timer::ProbeNext, self.now + self.probe_gap);
        }
    }

    fn on_explore_rotate(&mut self) {
        if let Some(peer) = self.random_unwatched()
            && self.cands.add_explorer(peer)
        {
            // On trial: we need its state to judge it, it does not need our whole state
            // (it gets our changes from now on, and the periodic full adverts). At a
            // thousand trees, a full advert each way every rotation would cost more than
            // all the rest of a settled node's traffic.
            self.stats.watches += 1;
            self.ping(peer, true);
            self.send(peer, Message::Resync);
            let rtt = &self.rtt;
            self.cands.rebalance(
                |k| rtt.get(k).and_then(|e| e.rtt_us()),
                self.config.max_near,
                self.config.explorers + 1,
            );
        }
        self.timers
            .set(Timer::ExploreRotate, self.now + self.config.explore_rotate);
    }

    fn on_housekeeping(&mut self) {
        let now = self.now;
        let period = self.config.serial_period;
        self.housekeeping_rounds += 1;
        let parents: HashSet<NodeId> = self
            .trees
            .iter()
            .flatten()
            .filter_map(|t| t.parent)
            .collect();
        self.cands
            .expire(now, self.config.inbound_expiry, |k| parents.contains(k));
        // Forget what we heard from peers we no longer trade with.
        let targets = self.cands.advert_targets();
        let mut keep: HashSet<NodeId> = targets.iter().copied().collect();
        keep.extend(parents.iter().copied());
        keep.extend(self.cands.watched());
        keep.extend(
            self.trees
                .iter()
                .flatten()
                .flat_map(|t| t.children.iter().copied()),
        );
        self.heard.retain(|k, _| keep.contains(k));
        for list in self.waiting_asks.values_mut() {
            list.retain(|(_, _, at)| now.saturating_since(*at) < period * 2);
        }
        self.asked
            .retain(|_, (_, at)| now.saturating_since(*at) < period);
        self.queried
            .retain(|_, (at, ..)| now.saturating_since(*at) < REQUERY_AFTER);
        self.introduced
            .retain(|_, at| now.saturating_since(*at) < REINTRODUCE_AFTER);
        // Rolling anti-entropy: each target gets a full advert every `full_advert_every` rounds
        // (more in a large overlay, see `Config::refresh_entries_per_s`).
        let trees = self.trees.iter().flatten().count() as u64;
        let every = (self.config.full_advert_every.max(1) as u64)
            .max(trees.div_ceil(self.config.refresh_entries_per_s.max(1) as u64));
        for (i, peer) in targets.into_iter().enumerate() {
            if (i as u64 + self.housekeeping_rounds) % every == 0 {
                self.owed_full.insert(peer);
            }
        }
        // Trees: re-attach where the parent went quiet, retry repair, and re-judge a rolling
        // share of the connected ones (a candidate may have improved without a change of
        // its own to advertise).
        for ri in 1..self.trees.len() {
            let Some(t) = self.trees[ri].as_ref() else {
                continue;
            };
            let quiet = now.saturating_since(t.refreshed_at);
            if let Some(p) = t.parent {
                if quiet > period * 6 {
                    self.stats.parents_quiet += 1;
                    self.detach(ri);
                } else if quiet > period * 3 {
                    let root = t.root;
                    self.outbox.attach(p, root);
                }
            }
            let t = self.trees[ri].as_ref().expect("live");
            if !t.connected || (ri as u64 + self.housekeeping_rounds) % 4 == 0 {
                self.evaluate_all(ri);
            }
        }
        // Far children that may share a cluster: introduce them again now and then (an
        // introduction at attach time is skipped while a tree is still forming).
        for ri in 0..self.trees.len() {
            if self.trees[ri].is_some() && (ri as u64 + self.housekeeping_rounds) % 8 == 0 {
                self.introduce_far_children(ri);
            }
        }
        self.refill();
        self.cluster_round();
        self.timers.set(Timer::Housekeeping, now + period);
    }

    // ---- helpers --------------------------------------------------------------------

    fn send(&mut self, to: NodeId, msg: Message) {
        self.transmits.push_back(Transmit { to, msg });
    }

    /// Probes `peer`; `watch` subscribes us to its adverts (candidates and parents).
    fn ping(&mut self, peer: NodeId, watch: bool) {
        let rtt_hint_us = self
            .rtt
            .get(&peer)
            .filter(|e| e.measured())
            .and_then(|e| e.rtt_us());
        self.send(
            peer,
            Message::Ping {
                sent_us: self.now.as_micros(),
                rtt_hint_us,
                watch,
            },
        );
    }

    /// Starts watching `peer` as an explorer: probe it now and send it our full state.
    fn watch(&mut self, peer: NodeId) {
        if self.cands.add_explorer(peer) {
            self.start_watching(peer);
        }
    }

    /// A peer has just become watched: probe it, send it our state, and ask for its full
    /// state. It may count us as a subscriber already (it watches us, or we watched it a
    /// moment ago) and then sends only changes; what we heard from it before may be
    /// partial or forgotten, and a tree it never mentions again would stay unknown.
    fn start_watching(&mut self, peer: NodeId) {
        self.stats.watches += 1;
        self.owed_full.insert(peer);
        self.ping(peer, true);
        self.send(peer, Message::Resync);
    }

    /// Tops the candidate set up to its size with random members.
    fn refill(&mut self) {
        let want = self.config.max_near + self.config.explorers;
        let mut tries = 0;
        while self.cands.watched_len() < want && tries < want * 2 {
            tries += 1;
            match self.random_unwatched() {
                Some(p) => self.watch(p),
                None => break,
            }
        }
    }

    fn random_unwatched(&mut self) -> Option<NodeId> {
        let alive = self.members.alive();
        if alive.is_empty() {
            return None;
        }
        for _ in 0..8 {
            let p = alive[self.rng.below(alive.len() as u64) as usize];
            if self.cands.role(&p).is_none() {
                return Some(p);
            }
        }
        None
    }

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

/// What we note down about a peer's entry.
fn heard_of(e: &AdvertEntry) -> Heard {
    Heard {
        serial: e.serial,
        dist_us: e.dist_us,
        connected: e.connected,
        known: true,
    }
}

fn entry_of(t: &TreeState) -> AdvertEntry {
    AdvertEntry {
        root: t.root,
        serial: t.serial,
        dist_us: t.dist_us,
        connected: t.connected,
    }
}
