//! Inputs from outside the trees' own messages: members coming and going, and the dispatch of every received message.

use super::*;

impl Core {
    /// A member joined (or is known at start): a tree is tracked for it, and it is queued for the measuring sweep.
    pub(super) fn handle_member_up(&mut self, id: NodeId) {
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
        // What our candidates told us about this root before we knew it was dropped
        // (`handle_entry` keeps entries of live roots only), and a candidate whose state in
        // the tree has settled advertises it again only in its periodic full advert (every
        // `full_advert_every` serial periods or more): until then this node would attach to
        // whatever entry it hears first, across the wide area if need be. So the nearest
        // few are asked now, answered at once by those that know the root. One settled
        // cluster mate is enough (the rules refine from there), and a member that has just
        // joined has no settled tree anywhere yet, so asking more would be wasted.
        let mut near: Vec<(u32, NodeId)> = (self.cands.watched())
            .filter(|p| *p != id && self.cands.role(p) == Some(Role::Near))
            .filter_map(|p| self.rtt.get(&p).and_then(|e| e.rtt_us()).map(|r| (r, p)))
            .collect();
        near.sort_unstable();
        for (_, peer) in near.into_iter().take(LATE_ROOT_ASKS) {
            self.stats.asks += 1;
            self.out_asks.entry(peer).or_default().push((id, 0));
        }
        // Measured by the sweep; the candidate set is topped up with random members at the
        // next probe round (taking the first members to arrive would make every node of a
        // fresh overlay watch the same few peers, and load them with everyone's traffic).
        self.sweep.push(id);
    }

    /// A member left or died: everything about it is forgotten, its tree dropped, and the trees it was our parent in detached and re-judged.
    pub(super) fn handle_member_down(&mut self, id: NodeId, reason: DownReason) {
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
        self.lost_to.remove(&id);
        self.resynced_at.remove(&id);
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
            self.dirty.remove(ri);
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

    /// Dispatches one message from a live member.
    pub(super) fn handle_message(&mut self, from: NodeId, msg: Message) {
        if from == self.id || !self.members.is_alive(&from) {
            return; // Only members take part; late messages of departed ones are dropped.
        }
        if self.lost_to.contains(&from) {
            let gap = self.config.serial_period / RESYNC_GAP_PER_SERIAL_PERIOD;
            let due = (self.resynced_at.get(&from))
                .is_none_or(|at| self.now.saturating_since(*at) >= gap);
            if due {
                self.lost_to.remove(&from);
                self.resync_after_loss(from);
            }
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

    /// Sends `peer` again what messages the transport lost may have carried: our full
    /// state if it takes our adverts, an attach in every tree it is our parent in (else
    /// it would stop refreshing us, and we would detach after six quiet serial periods),
    /// and our state in every tree it is our child in. Nothing for a peer we share none of
    /// these with (a closed connection that only carried measurements).
    pub(super) fn resync_after_loss(&mut self, peer: NodeId) {
        let mut resent = self.cands.is_advert_target(&peer);
        if resent {
            self.owed_full.insert(peer);
        }
        for t in self.trees.iter().flatten() {
            if t.parent == Some(peer) {
                self.outbox.attach(peer, t.root);
                resent = true;
            } else if t.children.contains(&peer) {
                self.outbox.update(peer, entry_of(t));
                resent = true;
            }
        }
        if resent {
            self.stats.resyncs_after_loss += 1;
            self.resynced_at.insert(peer, self.now);
        }
    }

    /// `from` attached to us (`true`) or detached from us in `root`'s tree.
    pub(super) fn handle_link(&mut self, from: NodeId, root: NodeId, attach: bool) {
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
}
