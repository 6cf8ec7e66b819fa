//! Adverts: our changed tree state, sent to the candidate set in batches at the advert
//! flush, within a byte budget.
//!
//! Owns what the next flush sends and what it may spend ([`Adverts`]): the roots whose
//! advertised state is due, the peers owed a full advert, and the advert budget's tokens.
//! The flush also sends the requests batched in `asks` and the cluster news of
//! `discovery`: every batch goes out on the same timer.

use super::Core;
use super::rootset::RootSet;
use super::trees::{RootIdx, entry_of};
use crate::proto::id::NodeId;
use crate::proto::message::{AdvertEntry, Message};
use crate::proto::time::Time;
use crate::proto::timers::Timer;
use std::collections::BTreeSet;
use std::time::Duration;

/// What the next advert flush sends, and the budget it spends.
pub(super) struct Adverts {
    /// Roots whose advertised state is due to go out with the next flush.
    dirty: RootSet,
    /// Roots whose advertised state drifted only: they go out with the next flush of
    /// `dirty` or once `Config::advert_drift_interval` has passed since `drift_sent`.
    drifting: RootSet,
    /// When drift last went out.
    drift_sent: Time,
    /// Whether the armed flush waits for drift alone (a real change may bring it forward).
    flush_for_drift: bool,
    /// Peers owed a full advert (new candidates, resyncs, periodic refresh).
    owed_full: BTreeSet<NodeId>,
    /// Peers owed our state in the trees of the roots nearest us (new inbound probers:
    /// explorers on trial), see `Config::explorer_sample`.
    owed_sample: BTreeSet<NodeId>,
    /// The gap between flushes of changes while they keep coming (see
    /// `Config::advert_max_interval`); zero: `advert_interval`.
    gap: Duration,
    /// When changes were last flushed.
    changes_sent: Time,
    /// Advert bytes that may still be sent (negative: spent ahead).
    tokens: f64,
    /// When the tokens were last topped up.
    tokens_at: Time,
}

impl Adverts {
    /// A full budget of `budget` bytes at `now`.
    pub(super) fn new(budget: f64, now: Time) -> Self {
        Adverts {
            dirty: RootSet::default(),
            drifting: RootSet::default(),
            drift_sent: now,
            flush_for_drift: false,
            owed_full: BTreeSet::new(),
            owed_sample: BTreeSet::new(),
            gap: Duration::ZERO,
            changes_sent: now,
            tokens: budget,
            tokens_at: now,
        }
    }

    /// Our state in tree `ri` is due to be advertised: with the next flush, or, if it
    /// only `drift`ed, within the drift interval.
    pub(super) fn mark(&mut self, ri: RootIdx, drift: bool) {
        if drift && !self.dirty.contains(ri) {
            self.drifting.insert(ri);
        } else {
            self.drifting.remove(ri);
            self.dirty.insert(ri);
        }
    }

    /// When the next flush is due for drift alone, if any is waiting.
    pub(super) fn drift_due(&self, interval: Duration) -> Option<Time> {
        (!self.drifting.is_empty()).then(|| self.drift_sent + interval)
    }

    /// `peer` is owed our full state with the next flush.
    pub(super) fn owe_full(&mut self, peer: NodeId) {
        self.owed_full.insert(peer);
    }

    /// `peer` is owed our state in the trees of the roots nearest us with the next flush.
    pub(super) fn owe_sample(&mut self, peer: NodeId) {
        self.owed_sample.insert(peer);
    }

    /// Whether the next flush has adverts to send at once (drift aside).
    pub(super) fn pending(&self) -> bool {
        !self.dirty.is_empty() || !self.owed_full.is_empty() || !self.owed_sample.is_empty()
    }

    /// Forgets `peer` (it went away).
    pub(super) fn forget_peer(&mut self, peer: &NodeId) {
        self.owed_full.remove(peer);
        self.owed_sample.remove(peer);
    }

    /// Forgets tree `ri` (its root went away).
    pub(super) fn forget_root(&mut self, ri: RootIdx) {
        self.dirty.remove(ri);
        self.drifting.remove(ri);
    }

    /// Tops the budget up at `rate` bytes per second (at most one second's worth): how long
    /// to wait while it is spent ahead, else `None`.
    fn top_up(&mut self, now: Time, rate: f64) -> Option<Duration> {
        let dt = now.saturating_since(self.tokens_at).as_secs_f64();
        self.tokens = (self.tokens + rate * dt).min(rate);
        self.tokens_at = now;
        (self.tokens < 0.0).then(|| Duration::from_secs_f64(-self.tokens / rate))
    }
}

impl Core {
    /// The gap to the next flush of changes: `advert_interval`, or longer while changes
    /// keep coming (the last flush of changes within two gaps).
    fn flush_gap(&self) -> Duration {
        let base = self.config.advert_interval * self.probing.stretch();
        let gap = self.adverts.gap.max(base);
        if self.now.saturating_since(self.adverts.changes_sent) > gap * 2 {
            base
        } else {
            gap
        }
    }

    /// After a flush that sent changes: the gap doubles if changes keep coming, up to
    /// `advert_max_interval`, else starts again from `advert_interval`.
    fn changes_flushed(&mut self) {
        let stretch = self.probing.stretch();
        let base = self.config.advert_interval * stretch;
        let recent =
            self.now.saturating_since(self.adverts.changes_sent) <= self.adverts.gap.max(base) * 2;
        let max = (self.config.advert_max_interval * stretch).max(base);
        self.adverts.gap = if recent {
            (self.adverts.gap.max(base) * 2).min(max)
        } else {
            base
        };
        self.adverts.changes_sent = self.now;
    }

    /// Arms the flush after an input: a flush gap ([`Core::flush_gap`]) from now when
    /// batches wait
    /// (sooner than a flush armed for drift alone, not sooner than one armed to wait for
    /// the advert budget), else when drift alone is due.
    pub(super) fn arm_flush(&mut self) {
        let soon = self.now + self.flush_gap();
        if self.adverts.pending() || self.asks.has_batched() || self.discovery.table.has_news() {
            if std::mem::take(&mut self.adverts.flush_for_drift) {
                self.schedule.set(Timer::AdvertFlush, soon);
            } else {
                self.schedule.set_if_idle(Timer::AdvertFlush, soon);
            }
        } else if let Some(at) = self.adverts.drift_due(self.config.advert_drift_interval)
            && !self.schedule.is_armed(Timer::AdvertFlush)
        {
            self.schedule.set(Timer::AdvertFlush, at.max(soon));
            self.adverts.flush_for_drift = true;
        }
    }

    /// Sends the batched requests and queries, and the adverts of changed trees (full adverts where owed), within the advert budget.
    pub(super) fn on_flush(&mut self) {
        self.adverts.flush_for_drift = false;
        let (asks, queries) = self.asks.take_batched();
        for (peer, roots) in asks {
            self.send(peer, Message::AdvertRequest { roots });
        }
        for (peer, roots) in queries {
            self.send(peer, Message::ParentQuery { roots });
        }
        // The advert budget: spent ahead, the adverts wait (and coalesce) until it is
        // paid back.
        let rate = self.config.advert_budget as f64;
        if rate > 0.0
            && let Some(wait) = self.adverts.top_up(self.now, rate)
        {
            self.schedule.set(
                Timer::AdvertFlush,
                self.now + wait.max(self.config.advert_interval),
            );
            return;
        }
        let mut spent = 0usize;
        let mut entries = Vec::with_capacity(self.adverts.dirty.len());
        let mut due = self.adverts.dirty.take();
        // Drift rides along with real changes, or goes out on its own once per interval.
        let drift_at = self.adverts.drift_due(self.config.advert_drift_interval);
        if drift_at.is_some_and(|at| !due.is_empty() || at <= self.now) {
            due.extend(self.adverts.drifting.take());
            due.sort_unstable();
            self.adverts.drift_sent = self.now;
        }
        for ri in due {
            if let Some(t) = self.trees.get_mut(ri) {
                t.advertised = (t.dist_us, t.connected);
                entries.push(entry_of(t));
            }
        }
        if !entries.is_empty() {
            self.changes_flushed();
        }
        let targets = self.nbrs.cands.advert_targets();
        let owed = std::mem::take(&mut self.adverts.owed_full);
        let owed_sample = std::mem::take(&mut self.adverts.owed_sample);
        // Our full state, and the sample, built at the first peer owed it (the trees do
        // not change here).
        let mut full: Option<Vec<AdvertEntry>> = None;
        let mut sample: Option<Vec<AdvertEntry>> = None;
        for peer in targets {
            if !owed.contains(&peer) && owed_sample.contains(&peer) {
                let mut some = sample
                    .get_or_insert_with(|| self.nearest_entries(self.config.explorer_sample))
                    .clone();
                // The changes of this flush go out to it as to every target.
                for e in &entries {
                    if !some.iter().any(|s| s.root == e.root) {
                        some.push(*e);
                    }
                }
                self.stats.sampled_adverts += 1;
                let msg = Message::Advert { entries: some };
                spent += msg.encoded_len();
                self.send(peer, msg);
            } else if owed.contains(&peer) {
                // Only trees we are connected to: an unknown entry already means "no path".
                let all = full
                    .get_or_insert_with(|| {
                        self.trees
                            .iter()
                            .filter(|t| t.connected)
                            .map(entry_of)
                            .collect()
                    })
                    .clone();
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
        self.adverts.tokens -= spent as f64;
    }

    /// Our state in the (at most) `max` connected trees whose roots are nearest us, by
    /// dist (ties by root), our own first.
    fn nearest_entries(&self, max: usize) -> Vec<AdvertEntry> {
        let mut near: Vec<(u32, NodeId, RootIdx)> = (0..self.trees.len())
            .filter_map(|ri| {
                let t = self.trees.get(ri)?;
                t.connected.then_some((t.dist_us, t.root, ri))
            })
            .collect();
        if near.len() > max {
            near.select_nth_unstable(max);
            near.truncate(max);
        }
        near.sort_unstable();
        near.into_iter()
            .filter_map(|(.., ri)| self.trees.get(ri).map(entry_of))
            .collect()
    }
}
