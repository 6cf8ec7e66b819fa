//! Adverts: our changed tree state, sent to the candidate set in batches at the advert
//! flush, within a byte budget.
//!
//! Owns what the next flush sends and what it may spend ([`Adverts`]): the roots whose
//! advertised state is due, the peers owed a full advert, and the advert budgets' tokens.
//!
//! Two budgets ([`Lane`]): adverts to cluster neighbours cross only the local network and
//! have a larger one (`Config::advert_budget_near`) than adverts to everyone else
//! (`Config::advert_budget`). A lane spent ahead skips the flush; the roots that changed
//! meanwhile wait in its `behind` set and go out, at their state then, with its next one.
//! The flush also sends the requests batched in `asks` and the cluster news of
//! `discovery`: every batch goes out on the same timer.

use super::Core;
use super::rootset::RootSet;
use super::shared::Sharing;
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
    /// The budget of adverts to cluster neighbours, and that of adverts to the others.
    near: Lane,
    far: Lane,
}

/// One advert budget and the changes its peers have not been sent yet.
struct Lane {
    /// Bytes per second.
    rate: f64,
    /// Advert bytes that may still be sent (negative: spent ahead).
    tokens: f64,
    /// When the tokens were last topped up.
    tokens_at: Time,
    /// Roots that changed while this lane was spent ahead.
    behind: RootSet,
}

impl Lane {
    /// A full budget of `rate` bytes a second at `now`.
    fn new(rate: u32, now: Time) -> Self {
        let rate = f64::from(rate);
        Lane {
            rate,
            tokens: rate,
            tokens_at: now,
            behind: RootSet::default(),
        }
    }

    /// Tops the budget up (at most one second's worth): how long to wait while it is
    /// spent ahead, else `None`. A rate of zero never waits.
    fn top_up(&mut self, now: Time) -> Option<Duration> {
        if self.rate <= 0.0 {
            return None;
        }
        let dt = now.saturating_since(self.tokens_at).as_secs_f64();
        self.tokens = (self.tokens + self.rate * dt).min(self.rate);
        self.tokens_at = now;
        (self.tokens < 0.0).then(|| Duration::from_secs_f64(-self.tokens / self.rate))
    }
}

/// Index of the lane of adverts to cluster neighbours, and of the other lane.
const NEAR: usize = 0;
const FAR: usize = 1;

impl Adverts {
    /// Lane `i` ([`NEAR`] or [`FAR`]).
    fn lane(&mut self, i: usize) -> &mut Lane {
        if i == NEAR {
            &mut self.near
        } else {
            &mut self.far
        }
    }

    /// Full budgets at `now`.
    pub(super) fn new(config: &crate::proto::Config, now: Time) -> Self {
        Adverts {
            dirty: RootSet::default(),
            drifting: RootSet::default(),
            drift_sent: now,
            flush_for_drift: false,
            owed_full: BTreeSet::new(),
            owed_sample: BTreeSet::new(),
            gap: Duration::ZERO,
            changes_sent: now,
            near: Lane::new(config.advert_budget_near, now),
            far: Lane::new(config.advert_budget, now),
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
        !self.dirty.is_empty()
            || !self.owed_full.is_empty()
            || !self.owed_sample.is_empty()
            || !self.near.behind.is_empty()
            || !self.far.behind.is_empty()
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
        self.near.behind.remove(ri);
        self.far.behind.remove(ri);
    }
}

/// The peers a flush owes our full state, and those it owes a sample of it.
struct Owed {
    full: BTreeSet<NodeId>,
    sample: BTreeSet<NodeId>,
}

impl Owed {
    fn contains(&self, peer: &NodeId) -> bool {
        self.full.contains(peer) || self.sample.contains(peer)
    }
}

/// Our full state and our sample, built at the first peer owed each (the trees do not
/// change during a flush).
#[derive(Default)]
struct Built {
    full: Option<Vec<AdvertEntry>>,
    sample: Option<Vec<AdvertEntry>>,
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

    /// Sends the batched requests and queries, and the adverts of changed trees (full
    /// adverts where owed), each lane within its budget.
    pub(super) fn on_flush(&mut self) {
        self.adverts.flush_for_drift = false;
        let (asks, queries) = self.asks.take_batched();
        for (peer, roots) in asks {
            self.send(peer, Message::AdvertRequest { roots });
        }
        for (peer, roots) in queries {
            self.send(peer, Message::ParentQuery { roots });
        }
        // A lane spent ahead skips this flush; with both, the adverts wait (and coalesce)
        // until one is paid back.
        let now = self.now;
        let waits = [self.adverts.near.top_up(now), self.adverts.far.top_up(now)];
        if let [Some(a), Some(b)] = waits {
            let at = now + a.min(b).max(self.config.advert_interval);
            self.schedule.set(Timer::AdvertFlush, at);
            return;
        }
        let mut due = self.adverts.dirty.take();
        // Drift rides along with real changes, or goes out on its own once per interval.
        let drift_at = self.adverts.drift_due(self.config.advert_drift_interval);
        if drift_at.is_some_and(|at| !due.is_empty() || at <= now) {
            due.extend(self.adverts.drifting.take());
            due.sort_unstable();
            self.adverts.drift_sent = now;
        }
        due.retain(|&ri| match self.trees.get_mut(ri) {
            Some(t) => {
                t.advertised = (t.dist_us, t.connected);
                true
            }
            None => false,
        });
        if !due.is_empty() {
            self.changes_flushed();
        }
        let near_us = self.near_us();
        let owed = Owed {
            full: std::mem::take(&mut self.adverts.owed_full),
            sample: std::mem::take(&mut self.adverts.owed_sample),
        };
        // Each lane's changes: the roots due now and those it fell behind on. A lane spent
        // ahead gets `None` and falls behind on the roots due now.
        let mut next: Option<Duration> = None;
        let mut lane_entries: [Option<Vec<AdvertEntry>>; 2] = [None, None];
        for (i, wait) in waits.into_iter().enumerate() {
            let lane = self.adverts.lane(i);
            if let Some(wait) = wait {
                for &ri in &due {
                    lane.behind.insert(ri);
                }
                if !lane.behind.is_empty() {
                    next = Some(next.map_or(wait, |n| n.min(wait)));
                }
                continue;
            }
            let mut roots = lane.behind.take();
            roots.extend(due.iter().copied());
            roots.sort_unstable();
            roots.dedup();
            let entries = (roots.iter())
                .filter_map(|&ri| self.trees.get(ri).map(entry_of))
                .collect();
            lane_entries[i] = Some(entries);
        }
        // In the peers' order, whatever their lane: with neither budget spent, a flush
        // sends what it sent with one budget, in the same order.
        let mut built = Built::default();
        let mut spent = [0usize; 2];
        for peer in self.nbrs.cands.advert_targets() {
            let near = self.nbrs.lat_us(&peer).is_some_and(|l| l <= near_us);
            let i = if near { NEAR } else { FAR };
            match &lane_entries[i] {
                Some(entries) => spent[i] += self.send_advert(peer, entries, &owed, &mut built),
                None => {
                    // Its lane is spent ahead: what it is owed waits for the next flush.
                    if owed.full.contains(&peer) {
                        self.adverts.owed_full.insert(peer);
                    } else if owed.sample.contains(&peer) {
                        self.adverts.owed_sample.insert(peer);
                    }
                    if owed.contains(&peer) {
                        let wait = waits[i].unwrap_or_default();
                        next = Some(next.map_or(wait, |n| n.min(wait)));
                    }
                }
            }
        }
        for (i, bytes) in spent.into_iter().enumerate() {
            self.adverts.lane(i).tokens -= bytes as f64;
        }
        if let Some(wait) = next {
            let at = now + wait.max(self.config.advert_interval);
            self.schedule.set_if_idle(Timer::AdvertFlush, at);
        }
        self.push_cluster_news();
    }

    /// Sends `peer` its advert: our full state if it is owed that, our state in the
    /// nearest trees (plus the changes) if it is owed a sample, else the changes in
    /// `entries` (nothing if there are none). Returns the bytes sent.
    fn send_advert(
        &mut self,
        peer: NodeId,
        entries: &[AdvertEntry],
        owed: &Owed,
        built: &mut Built,
    ) -> usize {
        // With shared trees, a peer is told only of the trees it keeps.
        let sharing = Sharing::of(self.discovery.shared_on, &self.discovery.table);
        let keeps = sharing.kept_by(peer);
        let kept = |mut list: Vec<AdvertEntry>| {
            if sharing.is_on() {
                list.retain(|e| keeps.keeps(e.root));
            }
            list
        };
        let msg = if owed.full.contains(&peer) {
            // Only trees we are connected to: an unknown entry already means "no path".
            let trees = &self.trees;
            let all = (built.full)
                .get_or_insert_with(|| trees.iter().filter(|t| t.connected).map(entry_of).collect())
                .clone();
            let all = kept(all);
            self.stats.full_adverts += 1;
            self.stats.full_advert_entries += all.len() as u64;
            Message::Advert { entries: all }
        } else if owed.sample.contains(&peer) {
            let max = self.config.explorer_sample;
            let mut some = if sharing.is_on() {
                // The nearest of the trees it keeps: ours nearest are mostly our
                // cluster's, which a peer of another cluster does not keep.
                self.nearest_entries(max, |root| keeps.keeps(root))
            } else {
                (built.sample)
                    .get_or_insert_with(|| self.nearest_entries(max, |_| true))
                    .clone()
            };
            // The changes of this flush go out to it as to every target.
            for e in entries {
                if !some.iter().any(|s| s.root == e.root) {
                    some.push(*e);
                }
            }
            self.stats.sampled_adverts += 1;
            Message::Advert {
                entries: kept(some),
            }
        } else {
            let changed = kept(entries.to_vec());
            if changed.is_empty() {
                return 0;
            }
            self.stats.delta_advert_entries += changed.len() as u64;
            Message::Advert { entries: changed }
        };
        let len = msg.encoded_len();
        self.send(peer, msg);
        len
    }

    /// Our state in the (at most) `max` connected trees of the roots `keep` admits that
    /// are nearest us, by dist (ties by root), our own first.
    fn nearest_entries(&self, max: usize, keep: impl Fn(NodeId) -> bool) -> Vec<AdvertEntry> {
        let mut near: Vec<(u32, NodeId, RootIdx)> = (0..self.trees.len())
            .filter_map(|ri| {
                let t = self.trees.get(ri)?;
                (t.connected && keep(t.root)).then_some((t.dist_us, t.root, ri))
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
