//! The state machine of one node: inputs in through [`Core::handle`], outputs drained
//! through `poll_*` (the drain rule is in the module docs of [`crate::proto`]).
//!
//! Per root, this ties the rules of [`super::tree`] to the messages of [`super::message`]:
//! - parents push `(serial, dist, connected)` to their children on every change
//!   ([`Message::TreeUpdate`]); nothing travels while nothing changes (a root's serial
//!   advances when asked, and otherwise only every refresh period, see
//!   [`Config::serial_refresh`]);
//! - changed tree state is advertised to the candidate set in batches, without serial-only
//!   changes (those would cost one entry per root per period per candidate); a node that
//!   needs a candidate's current serial asks for it ([`Message::AdvertRequest`]) and gets
//!   the answer as soon as the candidate has that serial;
//! - a node whose parent is gone, or whose feasibility distance blocks a better parent,
//!   asks the root for a fresh serial ([`Message::SerialRequest`], Babel's seqno request)
//!   so it does not wait for a refresh;
//! - an explorer on trial sends us its state in the trees of the roots nearest it, not its
//!   full state ([`Config::explorer_sample`]).
//!
//! What a settled node still sends whatever the number of trees: its RTT probes, the
//! explorers' samples, the rolling full adverts (a few entries per second per candidate)
//! and the trees' refreshes (a few entries per second).
//!
//! The core is composed of one part per concern; each part is a struct defined in the file
//! of its concern, owns its fields, and has the methods that need only those fields. The
//! [`Core`] methods in that file are the logic of the concern that needs several parts.
//!
//! | file | part | owns |
//! |---|---|---|
//! | `trees` | `Trees` | our state in every tree, by root index |
//! | `entries` | `HeardTable` | what peers told us about each tree |
//! | `neighbours` | `Neighbours` | RTT estimates, candidate set |
//! | `probing` | `Probing` | the measuring sweep, the round's probes |
//! | `guided` | `Guide` | where measuring past a limited sweep stands |
//! | `explore` | `Exploring` | the pace of explorer rotation |
//! | `adverts` | `Adverts` | adverts due, full adverts owed, budget |
//! | `asks` | `Asks` | requests waiting, sent (rate limits), batched |
//! | `resync` | `Resync` | peers to resync after lost messages |
//! | `hints` | `Hints` | far children introduced to each other |
//! | `rounds` | `Schedule` | timers, last serial bump, round count |
//! | `outputs` | `Outputs` | transmits, events, the outbox |
//! | `collectives` | `CollectiveBridge` | the engine, send cost |
//! | `discovery` | `Discovery` | cluster table, its own RNG, republish and recompute pacing, trees to ask for again |
//! | `bandwidth` | `Bandwidth` | inbound bandwidth estimates, trains asked, probe budget |
//!
//! The rest of the code is one concept per file, as [`Core`] methods:
//! - `inputs`: members coming and going, and the dispatch of received messages;
//! - `parents`: judging candidates, switching, detaching, and what follows a change;
//! - `shared`: which trees a node keeps when trees are shared, and asking again for those
//!   not settled;
//! - `stats`: the counters ([`CoreStats`]);
//! - `rootset`: the bitmap set of root indices the adverts due are kept in.
//!
//! This file holds the [`Core`] itself (the composition, and what every concern shares: id,
//! configuration, clock, the one RNG of the tree protocol, the member table, the counters),
//! its driver-facing API and its read-only accessors.

use super::collective::ReduceFn;
use super::config::Config;
use super::id::NodeId;
use super::membership::{MemberState, MemberTable};
use super::message::Message;
use super::rng::SplitMix64;
use super::time::Time;
use super::{Command, Event, Input, Transmit, TreeView};
use std::time::Duration;

mod adverts;
mod asks;
mod bandwidth;
mod collectives;
mod discovery;
mod entries;
mod explore;
mod guided;
mod hints;
mod inputs;
mod neighbours;
mod outputs;
mod parents;
mod probing;
mod resync;
mod rootset;
mod rounds;
mod shared;
mod stats;
mod striping;
mod trees;

use self::adverts::Adverts;
use self::asks::Asks;
use self::bandwidth::Bandwidth;
pub use self::bandwidth::BandwidthStats;
use self::collectives::CollectiveBridge;
use self::discovery::Discovery;
use self::entries::HeardTable;
use self::explore::Exploring;
use self::hints::Hints;
use self::neighbours::Neighbours;
use self::outputs::Outputs;
use self::probing::Probing;
use self::resync::Resync;
use self::rounds::Schedule;
pub use self::stats::CoreStats;
pub use self::striping::StripePlan;
use self::trees::Trees;

/// The protocol core of one node.
pub struct Core {
    id: NodeId,
    config: Config,
    /// The tree protocol's random choices (timer phases, probe order, random members).
    /// One generator for every concern: the order of its draws is part of the behaviour.
    rng: SplitMix64,
    now: Time,
    members: MemberTable,
    left: bool,
    stats: CoreStats,
    /// Our state in every tree.
    trees: Trees,
    /// What peers told us about their state in the trees.
    heard: HeardTable,
    /// RTT estimates and the candidate set.
    nbrs: Neighbours,
    /// The measuring sweep and the probes of the current round.
    probing: Probing,
    /// The pace of explorer rotation.
    exploring: Exploring,
    /// Adverts due, full adverts owed, and the advert budget.
    adverts: Adverts,
    /// Advert requests, parent queries and serial requests.
    asks: Asks,
    /// Peers the transport may have lost messages to.
    resync: Resync,
    /// Far children introduced to each other.
    hints: Hints,
    /// Timers and the rounds they drive.
    schedule: Schedule,
    /// Messages and events waiting to be drained.
    out: Outputs,
    /// Broadcast, scatter, gather and reduce along the trees.
    coll: CollectiveBridge,
    /// Clusters discovered from the measured latencies.
    discovery: Discovery,
    /// Bandwidth estimates, trains asked for, the probe budget.
    bw: Bandwidth,
}

impl Core {
    /// A core for node `id`, with its own RNG seeded by `seed`, started at `now`.
    pub fn new(id: NodeId, config: Config, seed: u64, now: Time) -> Self {
        let mut rng = SplitMix64::new(seed);
        let schedule = Schedule::new(&config, &mut rng, now);
        let discovery = Discovery::new(id, seed, now, config.cluster_sync);
        let adverts = Adverts::new(&config, now);
        let exploring = Exploring::new(&config);
        Core {
            id,
            config,
            rng,
            now,
            members: MemberTable::default(),
            left: false,
            stats: CoreStats::default(),
            trees: Trees::new(id, now),
            heard: HeardTable::default(),
            nbrs: Neighbours::default(),
            probing: Probing::default(),
            exploring,
            adverts,
            asks: Asks::default(),
            resync: Resync::default(),
            hints: Hints::default(),
            schedule,
            out: Outputs::default(),
            coll: CollectiveBridge::new(id),
            bw: Bandwidth::new(seed, now),
            discovery,
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
        self.coll.send_cost(self.config.send_cost)
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
            Input::MemberGroups { id, groups } => self.coll.set_groups(id, groups),
            Input::RttSample { peer, rtt } => {
                if self.members.is_alive(&peer) {
                    self.add_rtt_sample(peer, rtt.as_micros().min(u32::MAX as u128) as u32);
                }
            }
            Input::SendCost { per_send } => self.coll.sample_send_cost(per_send),
            Input::BulkTransfer { active } => self.probing.set_bulk(self.now, active),
            Input::LocalHealth { score } => self.probing.set_starved(score),
            Input::TrainArrived {
                from,
                id,
                received,
                size,
                spread,
                span,
            } => self.handle_train(from, id, (received, spread), size, span),
            Input::TransferRate { from, bytes, span } => {
                self.handle_transfer_rate(from, bytes, span)
            }
            Input::PathSaturated { to, bytes, span } => self.handle_path_saturated(to, bytes, span),
            Input::LinkLost { peer } => {
                if peer != self.id && self.members.is_alive(&peer) {
                    self.stats.links_lost += 1;
                    self.resync.lost(peer);
                }
            }
            Input::Command(Command::Leave) => return self.leave(),
            Input::Command(cmd) => self.handle_collective_command(cmd),
        }
        self.fire_due_timers();
        if self
            .coll
            .engine
            .poll_timeout()
            .is_some_and(|t| t <= self.now)
        {
            let now = self.now;
            self.with_collectives(|c, v| c.handle_timeout(now, v));
        }
        self.out.flush_outbox();
        self.arm_flush();
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
        self.out
            .pop_transmit()
            .or_else(|| self.coll.engine.poll_transmit())
    }

    /// Whether an operation's in-cluster part waits behind the transmits queued now.
    pub fn has_deferred(&self) -> bool {
        self.coll.engine.has_deferred()
    }

    fn run_deferred(&mut self) {
        if self.coll.engine.has_deferred() {
            self.with_collectives(|c, v| c.run_deferred(v));
        }
    }

    /// Next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self
            .out
            .pop_event()
            .or_else(|| self.coll.engine.poll_event())
        {
            return Some(e);
        }
        // Deferred work may have events too (a driver that drains events first).
        self.run_deferred();
        self.out
            .pop_event()
            .or_else(|| self.coll.engine.poll_event())
    }

    /// When to call `handle(now, Input::Timeout)` next (`None` after leaving).
    pub fn poll_timeout(&self) -> Option<Time> {
        if self.left {
            return None;
        }
        match (
            self.schedule.next_deadline(),
            self.coll.engine.poll_timeout(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Registers a user-defined reducer under `name` (it must be registered under the same
    /// name on every node that may relay a reduce using it).
    pub fn register_reducer(&mut self, name: impl Into<String>, f: ReduceFn) {
        self.coll.engine.register_reducer(name, f);
    }

    /// Collective operations remembered (as relay) and running (as root).
    pub fn collectives_in_flight(&self) -> (usize, usize) {
        self.coll.engine.in_flight()
    }

    /// This node's parent in `root`'s tree.
    pub fn parent(&self, root: NodeId) -> Option<NodeId> {
        self.trees.find(root).and_then(|t| t.parent)
    }

    /// Whether this node has a path to `root`.
    pub fn is_connected(&self, root: NodeId) -> bool {
        self.trees.find(root).is_some_and(|t| t.connected)
    }

    /// A snapshot of this node's state in `root`'s tree.
    pub fn tree(&self, root: NodeId) -> Option<TreeView> {
        self.trees.find(root).map(|t| TreeView {
            root,
            parent: t.parent,
            children: t.children.iter().copied().collect(),
            serial: t.serial,
            dist: Duration::from_micros(t.dist_us as u64),
            fd: Duration::from_micros(t.fd_us as u64),
            connected: t.connected,
        })
    }

    /// Every root whose tree this node tracks (itself included).
    pub fn roots(&self) -> Vec<NodeId> {
        self.trees.iter().map(|t| t.root).collect()
    }

    /// The local health score this core was last told of ([`Input::LocalHealth`]): 0
    /// when the node keeps up.
    pub fn local_health(&self) -> u32 {
        self.probing.starved()
    }

    /// Filtered RTT estimate to `peer`.
    pub fn rtt(&self, peer: NodeId) -> Option<Duration> {
        self.nbrs
            .rtt_us(&peer)
            .map(|us| Duration::from_micros(us as u64))
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
        self.nbrs.cands.watched().collect()
    }

    /// The farthest a peer may be and count as a cluster neighbour, µs: a tenth of the
    /// shortcut threshold, the bound the oscillation guard uses (see [`crate::proto::tree`]).
    fn near_us(&self) -> u32 {
        self.config.shortcut_threshold.as_micros() as u32 / 10
    }

    /// Queues `msg` to `to`.
    fn send(&mut self, to: NodeId, msg: Message) {
        self.out.send(to, msg);
    }

    /// Leaves gracefully: detaches from every parent and stops.
    fn leave(&mut self) {
        let detaches: Vec<(NodeId, NodeId)> = self
            .trees
            .iter()
            .filter_map(|t| t.parent.map(|p| (p, t.root)))
            .collect();
        for (p, root) in detaches {
            self.send(p, Message::Detach { root });
        }
        self.left = true;
        self.out.event(Event::Left);
    }
}

#[cfg(test)]
mod tests;
