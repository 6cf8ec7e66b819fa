//! RTT probing and the candidate set: probe rounds, samples, hinted peers, explorers.

use super::*;

impl Core {
    /// Adds one RTT sample of `peer` and reacts if its estimate changed.
    pub(super) fn add_rtt_sample(&mut self, peer: NodeId, rtt_us: u32) {
        let window = self.config.rtt_window;
        let e = self.rtt.entry(peer).or_default();
        let before = e.rtt_us();
        e.push(rtt_us, window);
        // Enough samples to move to it is a change too (see `judge_sampled`).
        if before != e.rtt_us() || e.samples() == MIN_SAMPLES_TO_MOVE {
            self.on_rtt_changed(peer);
        }
    }

    /// `peer`'s RTT estimate changed: maybe watch it, rebalance the candidate set, and re-judge it (or re-apply its state where it is our parent) in every tree.
    pub(super) fn on_rtt_changed(&mut self, peer: NodeId) {
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
        // What `consider(ri, peer)` would look up about the peer in every tree, looked up
        // once: nothing done in the loop changes what we heard from the peer, whether it is
        // alive, or its latency and samples.
        let heard = self
            .heard
            .get(&peer)
            .map(HeardFrom::known)
            .unwrap_or_default();
        let mut heard = heard.into_iter().peekable();
        let lat = self.lat_us(&peer).filter(|_| self.members.is_alive(&peer));
        let samples = self.rtt.get(&peer).map_or(0, |e| e.samples());
        for ri in 0..self.trees.len() {
            // What was heard about this root, if anything (the list is in root order).
            while heard.next_if(|&(r, _)| r < ri).is_some() {}
            let h = heard.next_if(|&(r, _)| r == ri).map(|(_, h)| h);
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

    /// Watches `peer` for a while (as a hinted peer) so it gets probed; it stays watched
    /// if it becomes a parent. Only measured: probes to a hinted peer do not subscribe us
    /// to its adverts, and no full adverts are traded (what it costs at a thousand roots
    /// would dwarf the few entries a hint is about).
    pub(super) fn measure(&mut self, peer: NodeId) {
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

    /// Whether `peer` is watched only because of a hint.
    pub(super) fn is_hinted(&self, peer: &NodeId) -> bool {
        matches!(self.cands.role(peer), Some(Role::Hinted { .. }))
    }

    /// Plans a round of probes: every watched peer and parent, and a few members not
    /// measured yet. The probes are paced over most of the round, in random order: sent
    /// in one burst, the last of them would leave many per-message costs after its
    /// timestamp, and the peers late in a fixed order would always look farther away
    /// than they are (that bias alone kept parents inside a cluster changing).
    pub(super) fn on_probe_round(&mut self) {
        self.refill();
        let mut targets: HashSet<NodeId> = self.cands.watched().collect();
        let parents = self.tree_parents();
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
    pub(super) fn on_probe_next(&mut self) {
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

    /// Replaces one explorer by a random member (on trial: it is probed and asked for its state).
    pub(super) fn on_explore_rotate(&mut self) {
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

    /// Probes `peer`; `watch` subscribes us to its adverts (candidates and parents).
    pub(super) fn ping(&mut self, peer: NodeId, watch: bool) {
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
    pub(super) fn watch(&mut self, peer: NodeId) {
        if self.cands.add_explorer(peer) {
            self.start_watching(peer);
        }
    }

    /// A peer has just become watched: probe it, send it our state, and ask for its full
    /// state. It may count us as a subscriber already (it watches us, or we watched it a
    /// moment ago) and then sends only changes; what we heard from it before may be
    /// partial or forgotten, and a tree it never mentions again would stay unknown.
    pub(super) fn start_watching(&mut self, peer: NodeId) {
        self.stats.watches += 1;
        self.owed_full.insert(peer);
        self.ping(peer, true);
        self.send(peer, Message::Resync);
    }

    /// Tops the candidate set up to its size with random members.
    pub(super) fn refill(&mut self) {
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

    /// A random live member not in the candidate set (a few tries; `None` if none found).
    pub(super) fn random_unwatched(&mut self) -> Option<NodeId> {
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
}
