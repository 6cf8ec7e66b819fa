//! Timer-driven work: serial ticks, the advert flush, and housekeeping rounds.
//!
//! Owns the timers and what the rounds they drive count ([`Schedule`]): when our serial
//! was last bumped (a serial request brings the next tick forward: at once after a quiet
//! spell, never closer than `serial_request_gap` to the last bump, and no more than four
//! times per serial period while requests keep coming) and how many housekeeping rounds
//! have run (the rolling shares of trees and peers each round takes). Unrequested serials
//! come every [`Core::refresh_period`]. The flush itself is in `adverts`, the probe rounds
//! in `probing`.

use super::Core;
use super::trees::OWN_ROOT;
use crate::proto::config::Config;
use crate::proto::id::{IdSet as HashSet, NodeId};
use crate::proto::rng::SplitMix64;
use crate::proto::time::Time;
use crate::proto::timers::{Timer, TimerQueue};
use std::time::Duration;

/// The timers, and the rounds they drive.
pub(super) struct Schedule {
    timers: TimerQueue,
    /// When our serial was last incremented.
    last_bump: Time,
    /// The highest serial of our tree a member asked for: the next tick goes at least
    /// that far. A restarted root counts again from 1, and members that remember a higher
    /// serial of its earlier life take nothing older.
    pub(super) serial_asked: u32,
    /// Housekeeping rounds run so far.
    housekeeping_rounds: u64,
}

impl Schedule {
    /// The first deadlines of a core started at `now`: the periodic timers start at a
    /// random phase (drawn from the core's `rng`) so that nodes started together do not
    /// run their rounds in step.
    pub(super) fn new(config: &Config, rng: &mut SplitMix64, now: Time) -> Self {
        let mut timers = TimerQueue::default();
        let phase = |rng: &mut SplitMix64, d: Duration| now + d.mul_f64(rng.unit());
        timers.set(Timer::SerialTick, phase(rng, config.serial_period));
        timers.set(Timer::ProbeRound, phase(rng, config.advert_interval));
        timers.set(Timer::ExploreRotate, now + config.explore_rotate);
        timers.set(
            Timer::Housekeeping,
            phase(rng, config.serial_period) + config.serial_period,
        );
        Schedule {
            timers,
            last_bump: now,
            serial_asked: 0,
            housekeeping_rounds: 0,
        }
    }

    /// Sets `timer` to `at` (replacing its deadline if armed).
    pub(super) fn set(&mut self, timer: Timer, at: Time) {
        self.timers.set(timer, at);
    }

    /// Sets `timer` to `at` unless it is armed already.
    pub(super) fn set_if_idle(&mut self, timer: Timer, at: Time) {
        self.timers.set_if_idle(timer, at);
    }

    /// When `timer` is due, if it is armed.
    pub(super) fn deadline(&self, timer: Timer) -> Option<Time> {
        self.timers.deadline(timer)
    }

    /// Whether `timer` is armed.
    pub(super) fn is_armed(&self, timer: Timer) -> bool {
        self.timers.is_armed(timer)
    }

    /// The earliest deadline.
    pub(super) fn next_deadline(&self) -> Option<Time> {
        self.timers.next_deadline()
    }

    /// A serial request: the next serial tick comes now, or `gap` after the last one if
    /// that is later; `busy_gap` after it instead if the last one came less than
    /// `period` ago (requests still arriving after a bump: a root of a forming tree would
    /// otherwise push a new serial down its whole tree every `gap`). Never later than
    /// the tick already due.
    pub(super) fn tick_soon(
        &mut self,
        now: Time,
        gap: Duration,
        busy_gap: Duration,
        period: Duration,
    ) {
        let since = now.saturating_since(self.last_bump);
        let gap = if since < period {
            busy_gap.max(gap)
        } else {
            gap
        };
        let at = now.max(self.last_bump + gap);
        if self
            .timers
            .deadline(Timer::SerialTick)
            .is_none_or(|due| at < due)
        {
            self.timers.set(Timer::SerialTick, at);
        }
    }
}

impl Core {
    /// Runs every timer due by now.
    pub(super) fn fire_due_timers(&mut self) {
        while let Some(timer) = self.schedule.timers.pop_due(self.now) {
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

    /// As a root: increments our serial and pushes it down our tree (asked for, or the
    /// long refresh).
    pub(super) fn on_serial_tick(&mut self) {
        let t = self.trees.own_mut();
        t.serial = t.serial.saturating_add(1).max(self.schedule.serial_asked);
        t.refreshed_at = self.now;
        self.schedule.last_bump = self.now;
        self.after_change(OWN_ROOT, true);
        let next = self.now + self.refresh_period();
        self.schedule.set(Timer::SerialTick, next);
    }

    /// How often a root refreshes its serial unasked, and how long a parent may stay
    /// silent: `serial_refresh`, stretched so that with every root refreshing, a node
    /// passes on at most `refresh_entries_per_s` entries per second on average (each
    /// refresh of a tree costs a node one entry per child it has there, one on average).
    pub(super) fn refresh_period(&self) -> Duration {
        let trees = self.members.alive().len() as u64 + 1;
        let rate = self.config.refresh_entries_per_s.max(1) as u64;
        self.config
            .serial_refresh
            .max(self.config.serial_period * trees.div_ceil(rate).min(u32::MAX as u64) as u32)
    }

    /// Once per serial period: expires stale state, schedules rolling full adverts, detaches from quiet parents, re-judges a share of the trees and re-introduces far children.
    pub(super) fn on_housekeeping(&mut self) {
        let now = self.now;
        let period = self.config.serial_period;
        self.schedule.housekeeping_rounds += 1;
        let parents = self.trees.parents();
        // An inbound prober is quiet after a few of its own gaps, never under three rounds.
        let floor = self.config.probe_interval * 3;
        (self.nbrs.cands).expire(now, self.config.inbound_expiry, floor, |k| {
            parents.contains(k)
        });
        // Forget what we heard from peers we no longer trade with.
        let targets = self.nbrs.cands.advert_targets();
        let mut keep: HashSet<NodeId> = targets.iter().copied().collect();
        keep.extend(parents.iter().copied());
        keep.extend(self.nbrs.cands.watched());
        keep.extend(self.trees.iter().flat_map(|t| t.children.iter().copied()));
        // And from cluster neighbours: outside the candidate set they tell us only their
        // state where they enter the cluster (`notify_entries`), which the rolling
        // re-judging must still see once a sample taken in a rush has left our window.
        let mates = self.nbrs.measured_within(self.near_us());
        keep.extend(mates.iter().copied());
        self.heard.keep_only(&keep);
        self.asks.expire(now, period);
        self.hints.expire(now);
        self.resync.expire(now, period);
        self.keep_exploring_pace();
        // Rolling anti-entropy: each target gets a full advert every `full_advert_every` rounds
        // (more in a large overlay, see `Config::refresh_entries_per_s`).
        let trees = self.trees.iter().count() as u64;
        let every = (self.config.full_advert_every.max(1) as u64)
            .max(trees.div_ceil(self.config.refresh_entries_per_s.max(1) as u64));
        for (i, peer) in targets.into_iter().enumerate() {
            if (i as u64 + self.schedule.housekeeping_rounds).is_multiple_of(every) {
                self.adverts.owe_full(peer);
            }
        }
        // Trees: re-attach where the parent went quiet, retry repair, and re-judge a rolling
        // share of the connected ones (a candidate may have improved without a change of
        // its own to advertise). What was heard does not change in this loop, so it is
        // gathered per tree up front, for every tree that can come up for judging.
        let rounds = self.schedule.housekeeping_rounds;
        // A parent that went quiet for three refresh periods is sent its attach again
        // (it may have lost us), and after six we detach and repair: with triggered
        // updates and serials on demand, silence is normal; a parent that is gone is
        // found by the membership protocol and the transport long before.
        let quiet_limit = self.refresh_period() * 3;
        let due: Vec<bool> = (0..self.trees.len())
            .map(|ri| {
                self.trees.get(ri).is_some_and(|t| {
                    ri != OWN_ROOT
                        && (!t.connected
                            || (ri as u64 + rounds).is_multiple_of(4)
                            || (t.parent.is_some()
                                && now.saturating_since(t.refreshed_at) > quiet_limit * 2))
                })
            })
            .collect();
        let (start, heard) = self.heard.by_root(&due, self.id);
        for ri in 1..self.trees.len() {
            let Some(t) = self.trees.get(ri) else {
                continue;
            };
            let quiet = now.saturating_since(t.refreshed_at);
            if let Some(p) = t.parent {
                if quiet > quiet_limit * 2 {
                    self.stats.parents_quiet += 1;
                    self.detach(ri);
                } else if quiet > quiet_limit && (ri as u64 + rounds).is_multiple_of(8) {
                    let root = t.root;
                    self.out.attach(p, root);
                }
            }
            self.ask_root_if_far(ri);
            let t = self.trees.live(ri);
            if !t.connected || (ri as u64 + rounds).is_multiple_of(4) {
                if due[ri] {
                    self.evaluate_heard(ri, &heard[start[ri]..start[ri + 1]]);
                } else {
                    self.evaluate_all(ri);
                }
            }
        }
        // Far children that may share a cluster: introduce them again now and then (an
        // introduction at attach time is skipped while a tree is still forming), in every
        // tree at once when the sweep has just met everyone.
        let all = self.hints.first_after_sweep(self.probing.met_everyone());
        self.notify_entries(all, &mates);
        self.remeasure_cluster_members();
        for ri in 0..self.trees.len() {
            if self.trees.is_live(ri) && (all || (ri as u64 + rounds).is_multiple_of(8)) {
                self.introduce_far_children(ri);
            }
        }
        self.refill();
        self.cluster_round();
        self.bandwidth_round();
        self.schedule.set(Timer::Housekeeping, now + period);
    }
}
