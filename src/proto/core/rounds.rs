//! Timer-driven work: serial ticks, the advert flush, and housekeeping rounds.

use super::*;

impl Core {
    /// Runs every timer due by now.
    pub(super) fn fire_due_timers(&mut self) {
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

    /// As a root: increments our serial and pushes it down our tree.
    pub(super) fn on_serial_tick(&mut self) {
        let t = self.trees[OWN_ROOT].as_mut().expect("own tree");
        t.serial += 1;
        t.refreshed_at = self.now;
        self.last_bump = self.now;
        self.after_change(OWN_ROOT, true);
        self.timers
            .set(Timer::SerialTick, self.now + self.config.serial_period);
    }

    /// Sends the batched requests and queries, and the adverts of changed trees (full adverts where owed), within the advert budget.
    pub(super) fn on_flush(&mut self) {
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
        for ri in self.dirty.take() {
            if let Some(t) = self.trees[ri].as_mut() {
                t.advertised = (t.dist_us, t.connected);
                entries.push(entry_of(t));
            }
        }
        let targets = self.cands.advert_targets();
        let owed = std::mem::take(&mut self.owed_full);
        // Our full state, built at the first peer owed it (the trees do not change here).
        let mut full: Option<Vec<AdvertEntry>> = None;
        for peer in targets {
            if owed.contains(&peer) {
                // Only trees we are connected to: an unknown entry already means "no path".
                let all = full
                    .get_or_insert_with(|| {
                        self.trees
                            .iter()
                            .flatten()
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
        self.advert_tokens -= spent as f64;
    }

    /// Once per serial period: expires stale state, schedules rolling full adverts, detaches from quiet parents, re-judges a share of the trees and re-introduces far children.
    pub(super) fn on_housekeeping(&mut self) {
        let now = self.now;
        let period = self.config.serial_period;
        self.housekeeping_rounds += 1;
        let parents = self.tree_parents();
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
        self.resynced_at
            .retain(|_, at| now.saturating_since(*at) < period);
        // Rolling anti-entropy: each target gets a full advert every `full_advert_every` rounds
        // (more in a large overlay, see `Config::refresh_entries_per_s`).
        let trees = self.trees.iter().flatten().count() as u64;
        let every = (self.config.full_advert_every.max(1) as u64)
            .max(trees.div_ceil(self.config.refresh_entries_per_s.max(1) as u64));
        for (i, peer) in targets.into_iter().enumerate() {
            if (i as u64 + self.housekeeping_rounds).is_multiple_of(every) {
                self.owed_full.insert(peer);
            }
        }
        // Trees: re-attach where the parent went quiet, retry repair, and re-judge a rolling
        // share of the connected ones (a candidate may have improved without a change of
        // its own to advertise). What was heard does not change in this loop, so it is
        // gathered per tree up front, for every tree that can come up for judging.
        let rounds = self.housekeeping_rounds;
        let due: Vec<bool> = (0..self.trees.len())
            .map(|ri| {
                self.trees[ri].as_ref().is_some_and(|t| {
                    ri != OWN_ROOT
                        && (!t.connected
                            || (ri as u64 + rounds).is_multiple_of(4)
                            || (t.parent.is_some()
                                && now.saturating_since(t.refreshed_at) > period * 6))
                })
            })
            .collect();
        let (start, heard) = self.heard_by_root(&due);
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
            if !t.connected || (ri as u64 + self.housekeeping_rounds).is_multiple_of(4) {
                if due[ri] {
                    self.evaluate_heard(ri, &heard[start[ri]..start[ri + 1]]);
                } else {
                    self.evaluate_all(ri);
                }
            }
        }
        // Far children that may share a cluster: introduce them again now and then (an
        // introduction at attach time is skipped while a tree is still forming).
        for ri in 0..self.trees.len() {
            if self.trees[ri].is_some() && (ri as u64 + self.housekeeping_rounds).is_multiple_of(8)
            {
                self.introduce_far_children(ri);
            }
        }
        self.refill();
        self.cluster_round();
        self.timers.set(Timer::Housekeeping, now + period);
    }
}
