//! RTT probing and the candidate set: probe rounds, samples, hinted peers, explorers.
//!
//! Owns the measuring sweep and the pacing of the current probe round ([`Probing`]). The
//! estimates and the candidate set the probes feed are in `neighbours`; reacting to a
//! changed estimate is here, as it re-judges the peer in every tree.

use super::Core;
use super::parents::MIN_SAMPLES_TO_MOVE;
use super::trees::OWN_ROOT;
use crate::proto::candidates::Role;
use crate::proto::id::{IdMap, IdSet as HashSet, NodeId};
use crate::proto::message::{AdvertEntry, Message};
use crate::proto::timers::Timer;
use crate::proto::tree::CandidateView;
use crate::proto::{BULK_SETTLE, Time};
use std::collections::VecDeque;
use std::time::Duration;

/// Serial periods after which a peer's last sample is too old to judge it by when it is
/// asked to be measured (see [`Core::measure`]).
pub(super) const STALE_SAMPLES_PERIODS: u32 = 3;

/// Every how many rounds a peer whose estimate has held still for `steady` samples is
/// probed: every round until `Config::steady_samples`, then `Config::probe_backoff`,
/// doubled after each further `steady_samples` samples up to `Config::probe_backoff_max`.
pub(super) fn probe_backoff(config: &crate::proto::Config, steady: u32) -> u32 {
    let per = config.steady_samples.max(1);
    if steady < per {
        return 1;
    }
    let base = config.probe_backoff.max(1);
    let doublings = ((steady - per) / per).min(8);
    (base << doublings).min(config.longest_probe_backoff())
}

/// Every how many rounds `peer` is probed: [`probe_backoff`] of its steady samples, and
/// an explorer that has the samples to be judged by at least `Config::probe_backoff`
/// rounds. Explorers rotate every few seconds, so none ever reached a backoff of its own:
/// probed every round, they were most of a settled node's probes, and the answers to
/// other nodes' explorers as many again.
fn peer_backoff(
    config: &crate::proto::Config,
    nbrs: &super::neighbours::Neighbours,
    peer: &NodeId,
) -> u32 {
    let entry = nbrs.get(peer);
    let backoff = probe_backoff(config, entry.map_or(0, |e| e.steady()));
    let judged = entry.is_some_and(|e| e.samples() >= MIN_SAMPLES_TO_MOVE);
    if judged && matches!(nbrs.cands.role(peer), Some(Role::Explorer { .. })) {
        backoff.max(config.probe_backoff)
    } else {
        backoff
    }
}

/// The measuring sweep and the probes of the current round.
#[derive(Default)]
pub(super) struct Probing {
    /// Members not measured yet, probed a few per round.
    sweep: Vec<NodeId>,
    /// Members the sweep has probed (it stops at `Config::sweep_limit`).
    swept: usize,
    /// Where measuring past a limited sweep stands (see `guided`).
    pub(super) guide: super::guided::Guide,
    /// Probes of the current round still to send (peer, whether to watch it).
    queue: VecDeque<(NodeId, bool)>,
    /// The gap between two probes of the current round.
    gap: Duration,
    /// Probe rounds so far: a backed-off peer is probed in the rounds where this, plus a
    /// phase of its own, is a multiple of `Config::probe_backoff`.
    round: u64,
    /// Whether this node is moving bulk data, and until when samples still count as
    /// taken under load after it stopped (see [`crate::proto::Input::BulkTransfer`]).
    bulk: bool,
    settle_until: Time,
    /// The node's local health score (see [`crate::proto::Input::LocalHealth`]): 0 when
    /// it keeps up.
    starved: u32,
    /// When each peer was last sampled: our probe rides on an answer only when one is
    /// due, and a round skips a peer sampled within most of its period.
    pub(super) sampled_at: IdMap<NodeId, Time>,
}

impl Probing {
    /// Whether the sweep has met every member. Until then every tree is forming, and
    /// what would only refine a formed tree (parent queries, introductions) waits.
    pub(super) fn met_everyone(&self) -> bool {
        self.sweep.is_empty()
    }

    /// Ends the sweep as if every member had been met.
    #[cfg(test)]
    pub(super) fn finish_sweep(&mut self) {
        self.sweep.clear();
    }

    /// Queues a new member for the sweep, unless the sweep has taken its sample of
    /// `limit` members (`Config::sweep_limit`): members coming later are measured where
    /// discovery points, like the rest.
    pub(super) fn meet(&mut self, id: NodeId, limit: Option<usize>) {
        if limit.is_none_or(|m| self.swept < m) {
            self.sweep.push(id);
        }
    }

    /// This node started or stopped moving bulk data.
    pub(super) fn set_bulk(&mut self, now: Time, active: bool) {
        if self.bulk && !active {
            self.settle_until = now + BULK_SETTLE;
        }
        self.bulk = active;
    }

    /// Whether a sample taken now measures queues the node's own transfers filled.
    pub(super) fn loaded(&self, now: Time) -> bool {
        self.bulk || now < self.settle_until
    }

    /// The local health score changed.
    pub(super) fn set_starved(&mut self, score: u32) {
        self.starved = score;
    }

    /// The local health score the core was last told of.
    pub(super) fn starved(&self) -> u32 {
        self.starved
    }

    /// How many times the configured timings probe rounds and advert gaps take: `1 +` the
    /// local health score.
    pub(super) fn stretch(&self) -> u32 {
        1 + self.starved
    }

    /// Whether an RTT sample taken now may be inflated by this node: its own transfers
    /// filled the queues, or it is short of CPU and read the answer late.
    fn sample_loaded(&self, now: Time) -> bool {
        self.loaded(now) || self.starved > 0
    }

    /// Forgets when `peer` was sampled (it went away; the sweep and the round skip
    /// members not alive when their turn comes).
    pub(super) fn forget(&mut self, peer: &NodeId) {
        self.sampled_at.remove(peer);
    }

    /// Whether `peer` was sampled within `within` of `now`.
    pub(super) fn sampled_within(&self, peer: &NodeId, now: Time, within: Duration) -> bool {
        (self.sampled_at.get(peer)).is_some_and(|&at| now.saturating_since(at) < within)
    }
}

impl Core {
    /// A probe from `from`: answer it, with our own probe of it riding along when one is
    /// due about now (`may_merge`: unless the probe is itself the answer to ours).
    pub(super) fn on_ping(
        &mut self,
        from: NodeId,
        sent_us: u64,
        rtt_hint_us: Option<u32>,
        watch: bool,
        may_merge: bool,
    ) {
        if watch
            && self.nbrs.cands.note_inbound(from, self.now)
            && self.nbrs.cands.role(&from).is_none()
        {
            // An explorer's trial, most likely: a sample, not our full state (a
            // peer that wants it asks with a resync).
            self.adverts.owe_sample(from);
        }
        let merge = may_merge && self.config.merge_probes;
        let merged_watch = merge.then(|| self.merged_probe(from)).flatten();
        match merged_watch {
            Some(watch) => {
                self.stats.merged_probes += 1;
                let ping_sent_us = self.now.as_micros();
                self.send(
                    from,
                    Message::PongPing {
                        sent_us,
                        ping_sent_us,
                        watch,
                    },
                );
            }
            None => self.send(from, Message::Pong { sent_us }),
        }
        if let Some(h) = rtt_hint_us
            && self.nbrs.take_hint(from, h)
        {
            self.on_rtt_changed(from);
        }
    }

    /// Whether our own probe of `peer` should ride on our answer to its probe, and then
    /// its `watch` flag: `peer` is watched, and half its probe period has passed since
    /// we last sampled it. The probe it replaces leaves the round's queue. Never more
    /// frames than two separate probes: the answer is sent anyway, and the pong to our
    /// part replaces a probe of ours due soon.
    fn merged_probe(&mut self, peer: NodeId) -> Option<bool> {
        let role = self.nbrs.cands.role(&peer)?;
        let parent = self.trees.iter().any(|t| t.parent == Some(peer));
        let period = self.probe_period(&peer);
        if (self.probing).sampled_within(&peer, self.now, period.mul_f64(0.75)) {
            return None;
        }
        self.probing.queue.retain(|(p, _)| *p != peer);
        let hinted = matches!(role, crate::proto::candidates::Role::Hinted { .. });
        Some(!hinted || parent)
    }

    /// How often `peer` is probed: every round while its estimate still moves, else every
    /// `Config::probe_backoff` rounds, parents too: a node has a parent per root, so
    /// probing parents every round grew a settled node's traffic with the overlay, and a
    /// parent that goes is seen by its link and membership, not by a probe.
    fn probe_period(&self, peer: &NodeId) -> Duration {
        let backoff = peer_backoff(&self.config, &self.nbrs, peer);
        self.config.probe_interval * backoff * self.probing.stretch()
    }

    /// The answer to our probe of `from`, sent at `sent_us` on our clock.
    pub(super) fn on_pong(&mut self, from: NodeId, sent_us: u64) {
        if sent_us > self.now.as_micros() {
            return;
        }
        let rtt = (self.now.as_micros() - sent_us).min(u32::MAX as u64) as u32;
        self.probing.sampled_at.insert(from, self.now);
        self.add_rtt_sample(from, rtt);
        // A hinted peer is measured at once, a few times back to back, so the verdict
        // that made us measure it can be taken again soon.
        if self.nbrs.is_hinted(&from)
            && (self.nbrs.get(&from)).is_some_and(|e| e.samples() < MIN_SAMPLES_TO_MOVE)
        {
            self.ping(from, false);
        }
    }

    /// Adds one RTT sample of `peer` and reacts if its estimate changed.
    pub(super) fn add_rtt_sample(&mut self, peer: NodeId, rtt_us: u32) {
        let loaded = self.probing.sample_loaded(self.now);
        let (changed, samples) = self.nbrs.push_sample(
            peer,
            rtt_us,
            self.config.rtt_window,
            loaded,
            self.config.rtt_hold,
        );
        // Enough samples to move to it is a change too (see `judge_sampled`).
        if changed || samples == MIN_SAMPLES_TO_MOVE {
            self.on_rtt_changed(peer);
        }
    }

    /// `peer`'s RTT estimate changed: maybe watch it, rebalance the candidate set, and re-judge it (or re-apply its state where it is our parent) in every tree.
    pub(super) fn on_rtt_changed(&mut self, peer: NodeId) {
        if self.nbrs.cands.role(&peer).is_none() {
            // A swept or inbound peer: watch it if it is nearer than our farthest near peer.
            let cutoff = self.nbrs.near_cutoff(self.config.max_near);
            let mine = self.nbrs.rtt_us(&peer);
            match (mine, cutoff) {
                (Some(m), Some(c)) if m < c => self.watch(peer),
                (Some(_), None) => self.watch(peer),
                _ => {}
            }
        }
        self.nbrs
            .rebalance(self.config.max_near, self.exploring.explorers());
        if !self.heard.knows(&peer) {
            return; // Nothing heard from it yet: no tree to re-judge.
        }
        // What `consider(ri, peer)` would look up about the peer in every tree, looked up
        // once: nothing done in the loop changes what we heard from the peer, whether it is
        // alive, or its latency and samples.
        let heard = self.heard.known_from(&peer);
        let mut heard = heard.into_iter().peekable();
        let lat = (self.nbrs.lat_us(&peer)).filter(|_| self.members.is_alive(&peer));
        let samples = self.nbrs.get(&peer).map_or(0, |e| e.samples());
        for ri in 0..self.trees.len() {
            // What was heard about this root, if anything (the list is in root order).
            while heard.next_if(|&(r, _)| r < ri).is_some() {}
            let h = heard.next_if(|&(r, _)| r == ri).map(|(_, h)| h);
            let Some(t) = self.trees.get(ri) else {
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
            } else if ri != OWN_ROOT
                && let Some(lat_us) = lat
                && let Some(h) = h
            {
                let view = CandidateView {
                    id: peer,
                    serial: h.serial,
                    dist_us: h.dist_us,
                    connected: h.connected,
                    lat_us,
                };
                self.consider_view(ri, view, samples);
            }
        }
    }

    /// How old our latest sample of a peer may be before we count its samples stale
    /// (perhaps all from a cold start's rush): [`STALE_SAMPLES_PERIODS`] serial periods.
    pub(super) fn stale_after(&self) -> Duration {
        self.config.serial_period * STALE_SAMPLES_PERIODS
    }

    /// Watches `peer` for a while (as a hinted peer) so it gets probed; it stays watched
    /// if it becomes a parent. Only measured: probes to a hinted peer do not subscribe us
    /// to its adverts, and no full adverts are traded (what it costs at a thousand roots
    /// would dwarf the few entries a hint is about).
    pub(super) fn measure(&mut self, peer: NodeId) {
        // Measured enough already, and lately (an earlier candidate, or a peer measured
        // on an earlier hint): the entries traded with it can be judged at once, and the
        // hinted places stay free for the peers that still need their samples. Samples
        // from long ago are measured again: a few taken in a cold start's rush can all be
        // far off, and a peer not watched since is judged by them for good.
        let fresh = self.stale_after();
        if (self.nbrs.get(&peer)).is_some_and(|e| e.samples() >= MIN_SAMPLES_TO_MOVE)
            && self.probing.sampled_within(&peer, self.now, fresh)
        {
            return;
        }
        let expires = self.now + self.config.serial_period * 6;
        if self
            .nbrs
            .cands
            .add_hinted(peer, expires, self.config.max_hinted)
        {
            self.stats.hinted += 1;
            self.ping(peer, false);
        }
    }

    /// Plans a round of probes: every watched peer and parent, and a few members not
    /// measured yet. The probes are paced over most of the round, in random order: sent
    /// in one burst, the last of them would leave many per-message costs after its
    /// timestamp, and the peers late in a fixed order would always look farther away
    /// than they are (that bias alone kept parents inside a cluster changing).
    pub(super) fn on_probe_round(&mut self) {
        self.refill();
        self.probing.round += 1;
        let round = self.probing.round;
        let (config, nbrs) = (&self.config, &self.nbrs);
        // Watched peers and parents whose estimate has held still are probed every
        // `backoff` rounds, each in a phase of its own so the probes stay spread over the
        // rounds.
        let due = |p: &NodeId| {
            let phase = u64::from(p.0[15]);
            (round + phase).is_multiple_of(u64::from(peer_backoff(config, nbrs, p)))
        };
        let mut targets: HashSet<NodeId> = self.nbrs.cands.watched().collect();
        let parents = self.trees.parents();
        targets.extend(parents.iter().copied());
        // A peer sampled within most of its period (by a probe of ours that rode on the
        // answer to its own, or one of our round that went out late) waits.
        let mut targets: Vec<NodeId> = (targets.into_iter())
            .filter(|p| {
                let period = self.probe_period(p);
                due(p) && !(self.probing).sampled_within(p, self.now, period.mul_f64(0.75))
            })
            .collect();
        targets.sort_unstable();
        // Hinted peers are only measured: they need not send us their whole state.
        let mut round: Vec<(NodeId, bool)> = targets
            .into_iter()
            .map(|p| (p, !self.nbrs.is_hinted(&p) || parents.contains(&p)))
            .collect();
        // The sweep meets every member in about `sweep_rounds` rounds, or its sample of
        // `sweep_limit` of them.
        let alive = self.members.alive().len();
        let limit = self.config.sweep_limit;
        let sweep_len = limit.map_or(alive, |m| alive.min(m));
        let per_round =
            (self.config.sweep_per_round).max(sweep_len / self.config.sweep_rounds.max(1));
        let left = limit.map_or(usize::MAX, |m| m.saturating_sub(self.probing.swept));
        for _ in 0..per_round.min(left) {
            let sweep = &mut self.probing.sweep;
            if sweep.is_empty() {
                break;
            }
            let i = self.rng.below(sweep.len() as u64) as usize;
            let peer = sweep.swap_remove(i);
            if self.members.is_alive(&peer) && self.nbrs.cands.role(&peer).is_none() {
                round.push((peer, false));
                self.probing.swept += 1;
            }
        }
        if limit.is_some_and(|m| self.probing.swept >= m) {
            self.probing.sweep.clear();
        }
        if self.probing.met_everyone() {
            let more = match limit {
                Some(_) => self.guided_targets(per_round),
                None => self.unmeasured_member().into_iter().collect(),
            };
            for peer in more {
                if !round.iter().any(|(p, _)| *p == peer) {
                    round.push((peer, false));
                }
            }
        }
        for i in (1..round.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            round.swap(i, j);
        }
        let jitter = 0.75 + 0.5 * self.rng.unit();
        let interval = (self.config.probe_interval * self.probing.stretch()).mul_f64(jitter);
        self.probing.gap = interval.mul_f64(0.8) / (round.len() as u32 + 1);
        self.probing.queue = round.into();
        self.schedule.set(Timer::ProbeNext, self.now);
        self.schedule.set(Timer::ProbeRound, self.now + interval);
    }

    /// Sends the next probe of the round.
    pub(super) fn on_probe_next(&mut self) {
        while let Some((peer, watch)) = self.probing.queue.pop_front() {
            if !self.members.is_alive(&peer) {
                continue;
            }
            self.ping(peer, watch);
            break;
        }
        if !self.probing.queue.is_empty() {
            self.schedule
                .set(Timer::ProbeNext, self.now + self.probing.gap);
        }
    }

    /// Probes `peer`; `watch` subscribes us to its adverts (candidates and parents).
    pub(super) fn ping(&mut self, peer: NodeId, watch: bool) {
        let rtt_hint_us = (self.nbrs.get(&peer))
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
    pub(super) fn watch(&mut self, peer: NodeId) {
        if self.nbrs.cands.add_explorer(peer) {
            self.start_watching(peer);
        }
    }

    /// A peer has just become watched: probe it, send it our state, and ask for its full
    /// state. It may count us as a subscriber already (it watches us, or we watched it a
    /// moment ago) and then sends only changes; what we heard from it before may be
    /// partial or forgotten, and a tree it never mentions again would stay unknown.
    pub(super) fn start_watching(&mut self, peer: NodeId) {
        self.stats.watches += 1;
        self.adverts.owe_full(peer);
        self.ping(peer, true);
        self.send(peer, Message::Resync);
    }
}

#[cfg(test)]
mod tests {
    use super::probe_backoff;
    use crate::proto::Config;

    #[test]
    fn a_steady_peer_backs_off_doubling_up_to_the_max() {
        let c = Config::wan();
        let at = |steady| probe_backoff(&c, steady);
        assert_eq!((at(0), at(19)), (1, 1), "moving: every round");
        assert_eq!((at(20), at(39)), (3, 3));
        assert_eq!((at(40), at(60), at(1_000_000)), (6, 12, 12));
        let flat = Config {
            probe_backoff_max: 1,
            ..Config::wan()
        };
        assert_eq!(
            probe_backoff(&flat, 100),
            3,
            "a max below the base keeps the base"
        );
    }
}
