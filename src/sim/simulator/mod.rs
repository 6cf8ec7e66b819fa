//! The simulator proper: the node table and its accessors. The event loop is in [`drive`],
//! a node's handling in [`handling`], the windows that spread it over the cores in
//! [`window`], scenario actions in [`actions`], snapshots, convergence and figures in
//! [`checks`].

mod actions;
mod checks;
mod drive;
mod handling;
mod stats;
mod trace;
mod trains;
mod window;

pub use checks::OptimalBreak;

use super::bandwidth::Pipes;
use super::config::SimConfig;
use super::invariants::{CycleRecord, ParentView};
use super::member_node::MemberNode;
use super::metrics::{Scratch, Snapshot, TreeMetrics};
use super::network::NetModel;
use super::node::{SimNode, Spawn};
use super::queue::{EventQueue, Pending};
use super::traffic::{self, TrafficByKind};
use super::train::Flights;
use crate::proto::gossip::GossipConfig;
use crate::proto::id::IdMap;
use crate::proto::rng::SplitMix64;
use crate::proto::{Core, Event, Input, NodeId, Time};
use crate::topology::Topology;
use handling::{NodeClock, Output, WorkItem};
use stats::Stats;
use std::collections::VecDeque;
use std::time::Duration;
use window::Merge;

/// How many cycles are kept for diagnostics (all are counted).
const MAX_CYCLE_RECORDS: usize = 8;

/// How many recent parent changes are kept for diagnostics.
const RECENT_CHANGES: usize = 32;

/// After this many timeouts of one node at the same instant, the core is considered stuck.
const MAX_SAME_INSTANT_TIMEOUTS: u32 = 100_000;

/// A repair being measured: an action and when the trees spanned again.
struct Repair {
    kind: &'static str,
    at: Time,
    done: Option<Time>,
}

/// A seeded discrete-event simulation of one [`Core`] (or any [`SimNode`]) per node.
///
/// Nodes are named by their index (dense, in creation order; the initial nodes of a topology
/// come first, cluster by cluster). Indices stay valid after a node leaves or crashes.
pub struct Sim<N: SimNode = Core> {
    cfg: SimConfig,
    net: NetModel,
    pipes: Pipes,
    /// Packet trains whose datagrams are still on their way.
    trains: Flights,
    rng: SplitMix64,
    factory: Box<dyn FnMut(Spawn) -> N>,
    now: Time,
    nodes: Vec<N>,
    ids: Vec<NodeId>,
    index: IdMap<NodeId, usize>,
    cluster_of: Vec<usize>,
    alive: Vec<bool>,
    doomed: Vec<bool>,
    /// Each node's CPU clock and deadline.
    clocks: Vec<NodeClock>,
    /// The deadline of each node's live queue entry (stale entries are skipped).
    timer_queued: Vec<Option<Time>>,
    queue: EventQueue,
    /// The smallest one-way latency of the network: how far a window reaches.
    lookahead: Duration,
    /// A node's outputs being carried (kept for its capacity).
    outputs: Vec<(Time, Output)>,
    /// The current window's work, its link arrivals, the outputs of its nodes (one list per
    /// node, ascending) and those nodes; kept between windows for their capacity.
    work: Vec<WorkItem>,
    window_links: Vec<(Time, Pending)>,
    window_outputs: Vec<Vec<(Time, Output)>>,
    window_nodes: Vec<usize>,
    /// The window's own queue while its outputs are carried, and its storage between.
    merge: Option<Merge>,
    merge_buffer: Merge,
    view: ParentView,
    cycles_seen: u64,
    cycles: Vec<CycleRecord>,
    live: usize,
    live_per_cluster: Vec<usize>,
    live_per_site: Vec<usize>,
    node_us: u128,
    node_us_at: Time,
    tree_cache: Vec<Option<TreeMetrics>>,
    dirty: Vec<bool>,
    /// With shared trees, the representative of every node's cluster (see
    /// `checks::shared_reps`); empty without.
    reps: Vec<usize>,
    /// Lines of [`SimConfig::trace`].
    traced: Vec<String>,
    dirty_all: bool,
    scratch: Scratch,
    check_interval: Duration,
    next_check: Time,
    snap: Snapshot,
    cross_cursor: usize,
    good_since: Option<Time>,
    good_mark: (u64, u128),
    /// Traffic by kind when the current stable period began.
    good_traffic: TrafficByKind,
    first_converged: Option<Time>,
    /// Since when every live tree has been spanning and wide-area optimal, parents
    /// moving or not (the convergence; `good_since` also asks for no move).
    optimal_since: Option<Time>,
    /// `optimal_since` when the run first converged.
    first_optimal: Option<Time>,
    /// The snapshots at which every tree had been optimal and one no longer was.
    breaks: checks::Breaks,
    stats: Stats,
    repairs: Vec<Repair>,
    log: Option<Vec<(Time, usize, Event)>>,
    recent: VecDeque<ParentChange>,
}

/// One parent change, by node index, as kept for diagnostics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParentChange {
    /// When the node handled the input that caused it.
    pub at: Time,
    /// The tree's root.
    pub root: usize,
    /// The node that changed its parent.
    pub node: usize,
    /// Its previous parent.
    pub old: Option<usize>,
    /// Its new parent.
    pub new: Option<usize>,
}

impl Sim<Core> {
    /// A simulation of `topology` with one [`Core`] per node: every node of the topology
    /// starts at t = 0 and learns of every other initial node at once.
    pub fn new(topology: &Topology, config: SimConfig) -> Self {
        let core_cfg = config.core.clone();
        Self::with_nodes(
            NetModel::from_topology(topology),
            config,
            Box::new(move |s: Spawn| Core::new(s.id, core_cfg.clone(), s.seed, s.now)),
        )
    }

    /// The core of node `i`.
    pub fn core(&self, i: usize) -> &Core {
        &self.nodes[i]
    }
}

impl Sim<MemberNode> {
    /// A simulation of `topology` with one whole [`proto::Node`](crate::proto::Node) per
    /// node, membership protocol included: the nodes start at t = 0 and join through the
    /// first; later joins go through the lowest-numbered live node; departures and crashes
    /// are learnt from membership messages, and those count in every traffic figure.
    pub fn with_membership(topology: &Topology, config: SimConfig, gossip: GossipConfig) -> Self {
        let core_cfg = config.core.clone();
        Self::with_nodes(
            NetModel::from_topology(topology),
            config,
            Box::new(move |s: Spawn| MemberNode::new(s, core_cfg.clone(), gossip.clone())),
        )
    }

    /// The core of node `i`.
    pub fn core(&self, i: usize) -> &Core {
        self.nodes[i].node().core()
    }
}

impl<N: SimNode> Sim<N> {
    /// A simulation over `net` whose nodes are made by `factory` (used by the simulator's
    /// tests with scripted nodes; [`Sim::new`] is the usual constructor). The verdict's
    /// groups of clusters are those of the cores' own grouping rule
    /// (`proto::Config::cluster_params`).
    pub fn with_nodes(
        net: NetModel,
        config: SimConfig,
        factory: Box<dyn FnMut(Spawn) -> N>,
    ) -> Self {
        let net = net.grouped(&config.core.cluster_params());
        let check_interval = config.check_interval.max(Duration::from_micros(1));
        let lookahead = net.min_latency();
        let mut sim = Sim {
            rng: SplitMix64::new(config.seed ^ 0x5151_7E57_0000_0001),
            live_per_cluster: vec![0; net.clusters()],
            live_per_site: vec![0; net.sites()],
            pipes: Pipes::new(&net, config.bandwidth),
            trains: Flights::default(),
            net,
            factory,
            now: Time::ZERO,
            nodes: Vec::new(),
            ids: Vec::new(),
            index: IdMap::default(),
            cluster_of: Vec::new(),
            alive: Vec::new(),
            doomed: Vec::new(),
            clocks: Vec::new(),
            timer_queued: Vec::new(),
            queue: EventQueue::default(),
            lookahead,
            outputs: Vec::new(),
            work: Vec::new(),
            window_links: Vec::new(),
            window_outputs: Vec::new(),
            window_nodes: Vec::new(),
            merge: None,
            merge_buffer: Merge::default(),
            view: ParentView::new(),
            cycles_seen: 0,
            cycles: Vec::new(),
            traced: Vec::new(),
            live: 0,
            node_us: 0,
            node_us_at: Time::ZERO,
            tree_cache: Vec::new(),
            dirty: Vec::new(),
            reps: Vec::new(),
            dirty_all: true,
            scratch: Scratch::default(),
            check_interval,
            next_check: Time::ZERO + check_interval,
            snap: Snapshot::default(),
            cross_cursor: 0,
            good_since: None,
            optimal_since: None,
            first_optimal: None,
            breaks: checks::Breaks::default(),
            good_mark: (0, 0),
            good_traffic: TrafficByKind::new(),
            first_converged: None,
            stats: Stats::default(),
            repairs: Vec::new(),
            log: None,
            recent: VecDeque::with_capacity(RECENT_CHANGES),
            cfg: config,
        };
        let initial = sim.net.initial_clusters().to_vec();
        for &c in &initial {
            sim.spawn(c);
        }
        if N::OWN_MEMBERSHIP {
            // Every node joins through the first, as nodes started together on a seed do.
            for a in 1..sim.nodes.len() {
                sim.join_through(a, 0);
            }
            return sim;
        }
        for a in 0..sim.nodes.len() {
            for b in 0..sim.nodes.len() {
                if a != b {
                    let id = sim.ids[b];
                    sim.feed(a, Input::MemberUp { id }, false);
                }
            }
        }
        sim
    }

    // ----- accessors -------------------------------------------------------------------

    /// The settings.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// The network model (clusters, sites, latencies, partitions).
    pub fn net(&self) -> &NetModel {
        &self.net
    }

    /// Current virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// How many nodes were ever created (indices run `0..total_nodes()`).
    pub fn total_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Number of live nodes.
    pub fn live_count(&self) -> usize {
        self.live
    }

    /// Indices of the live nodes, ascending.
    pub fn live_nodes(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| self.alive[i]).collect()
    }

    /// Whether node `i` is live.
    pub fn is_alive(&self, i: usize) -> bool {
        self.alive.get(i).copied().unwrap_or(false)
    }

    /// Id of node `i`.
    pub fn id(&self, i: usize) -> NodeId {
        self.ids[i]
    }

    /// Ids of all nodes ever created, by index.
    pub fn ids(&self) -> &[NodeId] {
        &self.ids
    }

    /// Index of the node with id `id`.
    pub fn index_of(&self, id: NodeId) -> Option<usize> {
        self.index.get(&id).copied()
    }

    /// Cluster of node `i`.
    pub fn cluster_of(&self, i: usize) -> usize {
        self.cluster_of[i]
    }

    /// Indices of the nodes (live or not) of the cluster named `name`.
    pub fn nodes_in_cluster(&self, name: &str) -> Vec<usize> {
        let Some(c) = self.net.cluster_index(name) else {
            return Vec::new();
        };
        (0..self.nodes.len())
            .filter(|&i| self.cluster_of[i] == c)
            .collect()
    }

    /// Node `i` itself (its core).
    pub fn node(&self, i: usize) -> &N {
        &self.nodes[i]
    }

    /// The global parent view built from `ParentChanged` events.
    pub fn view(&self) -> &ParentView {
        &self.view
    }

    /// `node`'s parent in `root`'s tree according to the global view (with shared trees,
    /// outside `root`'s cluster: in its representative's tree).
    pub fn parent_of(&self, root: usize, node: usize) -> Option<usize> {
        let row = checks::row_holding(&self.reps, &self.cluster_of, root, node);
        self.view.parent(row, node)
    }

    /// How many times `node` changed its parent in `root`'s tree.
    pub fn parent_changes(&self, root: usize, node: usize) -> u32 {
        self.view.changes(root, node)
    }

    /// Parent changes so far, and how many of them stayed inside the node's cluster (old
    /// and new parent both in it); what [`Sim::report`] gives, without building a report.
    pub fn parent_change_counts(&self) -> (u64, u64) {
        (self.stats.parent_changes, self.stats.parent_changes_intra)
    }

    /// The most recent parent changes (up to 32), oldest first.
    pub fn recent_parent_changes(&self) -> impl Iterator<Item = &ParentChange> {
        self.recent.iter()
    }

    /// Parent changes that closed a cycle, over the whole run (must stay 0).
    pub fn cycles_seen(&self) -> u64 {
        self.cycles_seen
    }

    /// The first few cycles seen, for diagnostics.
    pub fn cycles(&self) -> &[CycleRecord] {
        &self.cycles
    }

    /// The most recent snapshot.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// Messages sent so far.
    pub fn messages_sent(&self) -> u64 {
        self.stats.messages
    }

    /// Control bytes sent so far (sum of `Message::encoded_len`).
    pub fn control_bytes(&self) -> u64 {
        self.stats.bytes
    }

    /// Bytes of membership messages sent so far (part of [`Sim::control_bytes`]).
    pub fn membership_bytes(&self) -> u64 {
        traffic::gossip_bytes(&self.stats.traffic)
    }

    /// Traffic sent so far, by message kind (`gossip_*` for membership messages, `train`
    /// for packet-train datagrams, which [`Sim::control_bytes`] leaves out).
    pub fn traffic(&self) -> &TrafficByKind {
        &self.stats.traffic
    }

    /// Messages dropped so far (loss, partition, a full NIC or link buffer, dead or unknown
    /// destination).
    pub fn messages_dropped(&self) -> u64 {
        let s = &self.stats;
        s.dropped_loss + s.dropped_partition + s.dropped_tail + s.dropped_dead + s.dropped_unknown
    }

    /// Messages dropped so far because a NIC's or a link's buffer was full.
    pub fn tail_drops(&self) -> u64 {
        self.stats.dropped_tail
    }

    /// Packet trains sent so far (on the cores' `Event::SendTrain`), and how many of them
    /// were reported to their askers (`Input::TrainArrived`; a train none of whose
    /// datagrams came, or whose asker died, is not).
    pub fn trains(&self) -> (u64, u64) {
        (self.stats.trains_sent, self.stats.trains_delivered)
    }

    /// Train datagrams lost so far (loss, partition, a full NIC or link buffer, unknown
    /// destination); not counted in [`Sim::messages_dropped`].
    pub fn train_drops(&self) -> u64 {
        self.stats.train_drops
    }

    /// `ParentChanged` events whose `old` did not match the global view, and events naming
    /// ids the simulator does not know (both should be 0; a debugging aid).
    pub fn event_anomalies(&self) -> (u64, u64) {
        (self.stats.event_mismatches, self.stats.unknown_ids)
    }

    /// The most bytes of messages nobody asked for (`Event::Unsolicited`) one node got from
    /// one sender over the whole run: what a driver holds against a peer in a window is at
    /// most this.
    pub fn unsolicited_most(&self) -> u64 {
        self.stats.unsolicited.values().copied().max().unwrap_or(0)
    }

    /// Windows run so far (see [`window`]), and how many of them had their nodes handled on
    /// more than one thread.
    pub fn windows(&self) -> (u64, u64) {
        (self.stats.windows, self.stats.windows_spread)
    }

    /// Entries in the event queue (messages in flight, timers, notices, actions).
    pub fn pending_events(&self) -> usize {
        self.queue.len()
    }

    /// The current check interval.
    pub fn check_interval(&self) -> Duration {
        self.check_interval
    }

    /// Changes how often snapshots are taken (e.g. 10 ms around churn, for finer repair
    /// figures); the next snapshot is one interval from now.
    pub fn set_check_interval(&mut self, interval: Duration) {
        self.check_interval = interval.max(Duration::from_micros(1));
        self.next_check = self.now + self.check_interval;
    }

    /// Starts (or stops) recording every event of every node, for tests.
    pub fn record_events(&mut self, on: bool) {
        self.log = on.then(Vec::new);
    }

    /// Takes the recorded events: (time the node handled the input, node index, event).
    pub fn take_events(&mut self) -> Vec<(Time, usize, Event)> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }
}

/// A duration in milliseconds as a float.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
