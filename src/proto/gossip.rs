//! Membership over the network, SWIM style: who is in the overlay, where they listen, and
//! whether they are alive. A pure state machine like [`crate::proto::Core`]: inputs through
//! `handle_*`, outputs drained with [`Gossip::poll_transmit`] and [`Gossip::poll_event`],
//! deadline from [`Gossip::poll_timeout`]; the drain rule of [`crate::proto`] applies.
//!
//! - Join: a new node sends [`GossipMessage::Join`] to any member, which admits it and
//!   answers with every record it knows ([`GossipMessage::Sync`]); past the rate it can
//!   serve, with a few, and the joiner pulls the rest from another member ([`admission`]).
//! - Failure detection: every probe period one member (round robin over a shuffled list)
//!   gets a probe; if no ack arrives within the probe timeout, a few others are asked to
//!   probe it; if the period ends without an ack the member becomes *suspect*, and only
//!   dead when the suspicion times out without a refutation (a suspect member refutes by
//!   bumping its incarnation). One slow probe therefore never kills a member.
//! - Dissemination: news is pushed at once to a few random members, who forward what is
//!   news to them ([`GossipMessage::Rumor`]; with [`GossipConfig::rumor_gap`] set, news
//!   coming within the gap of the last push waits and goes out in one rumor); updates also ride on probes and acks, each
//!   sent a bounded number of times; a periodic push-pull [`GossipMessage::Sync`] with a
//!   random member repairs anything both missed (anti-entropy), more often while news
//!   keeps coming.
//! - Leave: the leaving member tells every member directly.
//! - Restart: a restarted node starts with a higher incarnation (the driver passes one
//!   derived from the wall clock), which overrides its old `Dead` record.
//! - Only the owner of a record vouches for it ([`auth`]): records carry its signature,
//!   so nobody else can issue its incarnations, move it or make it leave.

use super::id::{IdMap, NodeId};
use super::message::{GossipMessage, Liveness, MemberRecord};
use super::rng::SplitMix64;
use super::time::Time;
use admission::JoinBudget;
pub use config::GossipConfig;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub mod admission;
pub mod auth;
mod config;
mod digest;
mod disseminate;
mod health;
mod piggyback;
mod probe;

pub use auth::{RecordAuth, TrustAll};
pub use health::MAX_LOCAL_HEALTH;

/// What the driver learns from gossip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GossipEvent {
    /// A member is alive (new, back after a restart, or its record changed).
    Up(Arc<MemberRecord>),
    /// A member is suspected; it is still a member.
    Suspect(NodeId),
    /// A member is gone: `state` is [`Liveness::Dead`] or [`Liveness::Left`].
    Down { id: NodeId, state: Liveness },
    /// A join was answered: this node is part of the overlay.
    Joined { via: NodeId },
}

/// A membership message to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GossipTransmit {
    /// Destination.
    pub to: NodeId,
    /// What to send.
    pub msg: GossipMessage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// Start the next probe period.
    ProbeTick,
    /// The direct probe `seq` got no ack in time: go indirect.
    ProbeTimeout(u64),
    /// The period of probe `seq` ended: suspect its target if still no ack.
    ProbeDeadline(u64),
    /// Declare `id` dead unless it refuted (its incarnation is still the given one).
    Suspicion(NodeId, u64),
    /// Push-pull with a random member.
    AntiEntropy,
    /// Send the join again.
    JoinRetry,
    /// Drop old tombstones.
    Prune,
    /// Push the news held back since the last rumor push (see `GossipConfig::rumor_gap`).
    RumorFlush,
}

/// One member as this node tracks it.
#[derive(Clone, Debug)]
struct Entry {
    record: Arc<MemberRecord>,
    /// When the record last changed (tombstone expiry).
    changed: Time,
}

/// An outstanding probe of ours.
#[derive(Clone, Copy, Debug)]
struct Probe {
    seq: u64,
    target: NodeId,
    acked: bool,
}

/// A probe we relay for another member.
#[derive(Clone, Copy, Debug)]
struct Relay {
    our_seq: u64,
    requester: NodeId,
    their_seq: u64,
    target: NodeId,
}

/// The membership state machine of one node.
pub struct Gossip {
    config: GossipConfig,
    me: Arc<MemberRecord>,
    members: IdMap<NodeId, Entry>,
    /// The keys of `members` in the order they came (rebuilt when tombstones are pruned):
    /// random members are drawn from it without a scan of the table.
    member_ids: Vec<NodeId>,
    /// The sum of the hashes of the live records in `members` and their count: the
    /// digest without a pass over the table (see `digest`).
    live_sum: (u64, u32),
    /// News held back for the next rumor push (see [`GossipConfig::rumor_gap`]).
    rumors: disseminate::HeldRumors,
    rng: SplitMix64,
    /// Members whose records ride on probes and acks, with how many times each went.
    outbox: piggyback::PiggybackQueue,
    probe_order: Vec<NodeId>,
    probe: Option<Probe>,
    relays: Vec<Relay>,
    next_seq: u64,
    timers: BinaryHeap<Reverse<(Time, Timer)>>,
    /// The member we sent our join to, until it answers.
    joining: Option<NodeId>,
    left: bool,
    /// Local health score (see `health`): 0 healthy, up to [`MAX_LOCAL_HEALTH`].
    health: u32,
    /// How late the node's event loop ran at worst in the current probe period.
    late_max: Duration,
    transmits: VecDeque<GossipTransmit>,
    events: VecDeque<GossipEvent>,
    /// Signs our record, checks everyone else's.
    auth: Box<dyn RecordAuth>,
    /// Records refused because their proof did not verify.
    forged: u64,
    /// Full answers to joins left to give (see `admission`), and light ones given.
    join_budget: JoinBudget,
    light_joins: u64,
    /// Whether a record was news to us since the last push-pull we started: the next one
    /// then comes after the fast period.
    news_since_sync: bool,
}

impl Gossip {
    /// A node that knows only itself. `incarnation` must grow across restarts of the same
    /// node (e.g. milliseconds since the Unix epoch at start); it also serves as the
    /// record's `boot` value. Records are not signed nor checked ([`TrustAll`]) until
    /// [`Gossip::with_auth`] gives a scheme: the network driver always does.
    pub fn new(
        id: NodeId,
        name: String,
        addr: SocketAddr,
        incarnation: u64,
        config: GossipConfig,
        seed: u64,
        now: Time,
    ) -> Self {
        let join_budget = JoinBudget::new(config.join_burst, now);
        let mut g = Gossip {
            config,
            me: Arc::new(MemberRecord {
                id,
                name,
                addr,
                incarnation,
                boot: incarnation,
                state: Liveness::Alive,
                groups: Vec::new(),
                proof: Vec::new(),
            }),
            members: IdMap::default(),
            member_ids: Vec::new(),
            live_sum: (0, 0),
            rumors: Default::default(),
            rng: SplitMix64::new(seed),
            outbox: Default::default(),
            probe_order: Vec::new(),
            probe: None,
            relays: Vec::new(),
            next_seq: 1,
            timers: BinaryHeap::new(),
            joining: None,
            left: false,
            health: 0,
            late_max: Duration::ZERO,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            auth: Box::new(TrustAll),
            forged: 0,
            join_budget,
            light_joins: 0,
            news_since_sync: false,
        };
        let first = now + g.jitter(g.config.probe_interval);
        g.arm(first, Timer::ProbeTick);
        g.arm(
            now + g.config.anti_entropy_fast_interval,
            Timer::AntiEntropy,
        );
        g.arm(now + g.config.tombstone_ttl, Timer::Prune);
        g
    }

    /// The same node, signing its record with `auth` and refusing every record whose
    /// proof `auth` does not accept (see [`auth`]).
    pub fn with_auth(mut self, auth: Box<dyn RecordAuth>) -> Self {
        self.auth = auth;
        self.sign_me();
        self
    }

    /// How many records were refused because their proof did not verify (forged, or
    /// altered on the way).
    pub fn forged_records(&self) -> u64 {
        self.forged
    }

    /// The settings it runs with.
    pub fn config(&self) -> &GossipConfig {
        &self.config
    }

    /// This node's own record.
    pub fn me(&self) -> &MemberRecord {
        &self.me
    }

    /// Signs our record after a change of its fields or incarnation.
    fn sign_me(&mut self) {
        Arc::make_mut(&mut self.me).proof = self.auth.sign(&auth::statement(&self.me));
    }

    /// Every member this node knows, itself included, dead and departed ones too (until
    /// their tombstones expire), sorted by id.
    pub fn records(&self) -> Vec<Arc<MemberRecord>> {
        let mut all: Vec<Arc<MemberRecord>> =
            self.members.values().map(|e| e.record.clone()).collect();
        all.push(self.me.clone());
        all.sort_by_key(|r| r.id);
        all
    }

    /// The record of `id`, if known.
    pub fn record(&self, id: &NodeId) -> Option<&MemberRecord> {
        if *id == self.me.id {
            return Some(&self.me);
        }
        self.members.get(id).map(|e| &*e.record)
    }

    /// Members currently alive or suspect (not this node).
    pub fn live_members(&self) -> impl Iterator<Item = &MemberRecord> {
        self.members
            .values()
            .map(|e| &*e.record)
            .filter(|r| matches!(r.state, Liveness::Alive | Liveness::Suspect))
    }

    /// Asks `via`, a member reached through its address, to admit this node. Repeated
    /// every [`GossipConfig::join_retry`] until answered.
    pub fn join(&mut self, now: Time, via: NodeId) {
        if via == self.me.id {
            return;
        }
        self.joining = Some(via);
        self.send(
            via,
            GossipMessage::Join {
                me: MemberRecord::clone(&self.me),
            },
        );
        self.arm(now + self.config.join_retry, Timer::JoinRetry);
    }

    /// Whether a join is still waiting for its answer.
    pub fn is_joining(&self) -> bool {
        self.joining.is_some()
    }

    /// The member a join waits on, until a member admits this node.
    pub fn joining(&self) -> Option<NodeId> {
        self.joining
    }

    /// Announces this node's departure to every live member; afterwards it does nothing.
    pub fn leave(&mut self, _now: Time) {
        if self.left {
            return;
        }
        let me = Arc::make_mut(&mut self.me);
        me.incarnation = me.incarnation.saturating_add(1);
        me.state = Liveness::Left;
        self.sign_me();
        let targets: Vec<NodeId> = self.live_members().map(|r| r.id).collect();
        for to in targets {
            self.send(
                to,
                GossipMessage::Sync {
                    members: vec![self.me.clone()],
                    reply: false,
                },
            );
        }
        self.left = true;
        self.timers.clear();
    }

    /// The driver could not reach `peer` (connection failed or was lost with an error):
    /// treated like an unanswered probe period, so it becomes suspect, not dead. Not
    /// while this node is starved (local health above 0): its own handshakes then time
    /// out, and the probes, whose timeouts it stretches, decide.
    pub fn handle_unreachable(&mut self, now: Time, peer: NodeId) {
        if self.health == 0 {
            self.suspect(now, peer);
        }
    }

    /// A membership message arrived from the authenticated member `from`.
    pub fn handle_message(&mut self, now: Time, from: NodeId, msg: GossipMessage) {
        if self.left {
            return;
        }
        match msg {
            GossipMessage::Join { me } => {
                if me.id != from {
                    return; // a node can only join as itself
                }
                self.answer_join(now, me);
            }
            GossipMessage::Sync { members, reply } => {
                // The answer to our join: every record is news to us alone, and is not
                // piggybacked (at a thousand members that was minutes of full probes).
                let piggyback = self.joining != Some(from);
                for r in members {
                    let _ = self.apply_with(now, r, piggyback);
                }
                if self.joining == Some(from) {
                    self.joining = None;
                    self.events.push_back(GossipEvent::Joined { via: from });
                    if reply {
                        // A light answer: the rest comes from another member.
                        return self.pull_rest_of_table(from);
                    }
                }
                if reply {
                    self.send_sync(from, false);
                }
            }
            GossipMessage::Rumor { updates } => self.spread(now, updates, Some(from)),
            GossipMessage::Digest { hash, live } => {
                if (GossipMessage::Digest { hash, live }) != self.digest() {
                    self.send_sync(from, true);
                }
            }
            GossipMessage::Probe { seq, updates } => {
                self.apply_all(now, updates);
                let updates = self.piggyback();
                self.send(
                    from,
                    GossipMessage::Ack {
                        seq,
                        target: self.me.id,
                        updates,
                    },
                );
            }
            GossipMessage::Ack {
                seq,
                target,
                updates,
            } => {
                self.apply_all(now, updates);
                self.handle_ack(seq, target);
            }
            GossipMessage::ProbeRequest {
                seq,
                target,
                updates,
            } => {
                self.apply_all(now, updates);
                if target == self.me.id {
                    return;
                }
                let our_seq = self.next_seq();
                self.relays.push(Relay {
                    our_seq,
                    requester: from,
                    their_seq: seq,
                    target,
                });
                if self.relays.len() > 64 {
                    self.relays.remove(0);
                }
                let updates = self.piggyback();
                self.send(
                    target,
                    GossipMessage::Probe {
                        seq: our_seq,
                        updates,
                    },
                );
            }
        }
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        while let Some(Reverse((at, timer))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            self.on_timer(now, timer);
        }
    }

    /// The next membership message to send.
    pub fn poll_transmit(&mut self) -> Option<GossipTransmit> {
        crate::proto::drain::pop_front(&mut self.transmits)
    }

    /// The next membership event.
    pub fn poll_event(&mut self) -> Option<GossipEvent> {
        crate::proto::drain::pop_front(&mut self.events)
    }

    /// When [`Gossip::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.peek().map(|Reverse((at, _))| *at)
    }

    fn send(&mut self, to: NodeId, msg: GossipMessage) {
        self.transmits.push_back(GossipTransmit { to, msg });
    }

    fn arm(&mut self, at: Time, timer: Timer) {
        self.timers.push(Reverse((at, timer)));
    }

    fn next_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// `base` scaled by a random factor in [0.75, 1.25), so nodes started together drift apart.
    fn jitter(&mut self, base: Duration) -> Duration {
        base.mul_f64(0.75 + self.rng.below(500) as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests;
