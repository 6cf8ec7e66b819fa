//! Dissemination: merging records, pushing news as rumors, piggybacking updates on
//! probes and acks, and picking random members to talk to.

use super::{Entry, Gossip, GossipEvent, Timer};
use crate::proto::id::NodeId;
use crate::proto::message::{GossipMessage, Liveness, MemberRecord};
use crate::proto::time::Time;
use std::sync::Arc;

/// News held back for the next rumor push ([`crate::proto::GossipConfig::rumor_gap`]).
#[derive(Debug, Default)]
pub(super) struct HeldRumors {
    /// Each record with the member it came from.
    news: Vec<(Arc<MemberRecord>, Option<NodeId>)>,
    /// When news was last pushed.
    last: Option<Time>,
    /// Whether a flush is armed.
    armed: bool,
}

impl Gossip {
    /// Applies `updates` and forwards what was news to a few random members (a member
    /// gets no record about itself nor one it sent us): at once after a quiet spell, else
    /// with the rest of the news at the end of the gap (`GossipConfig::rumor_gap`).
    pub(super) fn spread(
        &mut self,
        now: Time,
        updates: Vec<Arc<MemberRecord>>,
        from: Option<NodeId>,
    ) {
        let news: Vec<Arc<MemberRecord>> = updates
            .into_iter()
            .filter(|r| self.apply(now, r.clone()))
            .collect();
        if news.is_empty() {
            return;
        }
        let held = &mut self.rumors;
        held.news.extend(news.into_iter().map(|r| (r, from)));
        let due = held.last.map(|t| t + self.config.rumor_gap);
        match due {
            Some(due) if due > now => {
                if !held.armed {
                    held.armed = true;
                    self.arm(due, super::Timer::RumorFlush);
                }
            }
            _ => self.push_rumors(now),
        }
    }

    /// Pushes the news held back to a few random members; none gets a record about
    /// itself or one it sent us.
    pub(super) fn push_rumors(&mut self, now: Time) {
        self.rumors.armed = false;
        if self.rumors.news.is_empty() {
            return;
        }
        let mut news = std::mem::take(&mut self.rumors.news);
        self.rumors.last = Some(now);
        if news.len() > 1 {
            // One record per member, as the table holds it now: news held a while may
            // have been overtaken (a suspicion by a death, or a record come by a sync).
            let mut seen = crate::proto::id::IdSet::default();
            news.reverse();
            news.retain(|(r, _)| seen.insert(r.id));
            news.reverse();
            for (r, _) in news.iter_mut() {
                if let Some(e) = self.members.get(&r.id) {
                    *r = e.record.clone();
                }
            }
        }
        // One piece of news (the quiet case) skips the members it concerns when picking;
        // a batch concerns too many for that, so each member picked gets what it lacks.
        let exclude: Vec<NodeId> = match &news[..] {
            [(r, from)] => std::iter::once(r.id).chain(*from).collect(),
            _ => Vec::new(),
        };
        for to in self.pick_random(self.config.rumor_fanout, &exclude) {
            let updates: Vec<Arc<MemberRecord>> = (news.iter())
                .filter(|(r, from)| r.id != to && *from != Some(to))
                .map(|(r, _)| r.clone())
                .collect();
            if !updates.is_empty() {
                self.send(to, GossipMessage::Rumor { updates });
            }
        }
    }

    pub(super) fn apply_all(&mut self, now: Time, updates: Vec<Arc<MemberRecord>>) {
        for r in updates {
            let _ = self.apply(now, r);
        }
    }

    /// Merges one record: a higher incarnation wins; at equal incarnation the later state
    /// wins (`Alive < Suspect < Dead < Left`). Returns whether it was news. News is queued
    /// to ride on our probes and acks.
    pub(super) fn apply(&mut self, now: Time, r: Arc<MemberRecord>) -> bool {
        self.apply_with(now, r, true)
    }

    /// [`Gossip::apply`]; with `piggyback` off, news is not queued for probes and acks
    /// (the records a joining node receives: news to it alone).
    pub(super) fn apply_with(&mut self, now: Time, r: Arc<MemberRecord>, piggyback: bool) -> bool {
        if !crate::proto::message::groups_valid(&r.groups) {
            return false; // only a buggy or hostile member sends these
        }
        if r.incarnation == u64::MAX {
            // No honest node gets there (incarnations start from the boot time and grow
            // by one per refutation), and nobody could refute it: a record that would
            // outlive every refutation is refused.
            return false;
        }
        if r.id == self.me.id {
            // Gossip says we are suspect or dead: refute with a higher incarnation.
            if r.state != Liveness::Alive && r.incarnation >= self.me.incarnation && !self.left {
                if !self.vouched(&r) {
                    return false; // we never issued that incarnation: nothing to refute
                }
                // Others could not hear from us in time: we may be the slow one.
                self.health_worse();
                Arc::make_mut(&mut self.me).incarnation = r.incarnation + 1; // below u64::MAX: checked above
                self.sign_me();
                self.announce_me();
            }
            return false;
        }
        let newer = match self.members.get(&r.id) {
            None => true,
            Some(e) => {
                (r.incarnation, r.state) > (e.record.incarnation, e.record.state)
                    || (r.incarnation == e.record.incarnation
                        && r.state == e.record.state
                        && (r.addr != e.record.addr
                            || r.name != e.record.name
                            || r.boot != e.record.boot)
                        && r.state == Liveness::Alive)
            }
        };
        if !newer || !self.vouched(&r) {
            return false;
        }
        let before = self.members.get(&r.id).map(|e| e.record.state);
        if before.is_none() {
            self.member_ids.push(r.id);
        }
        self.news_since_sync = true;
        let old = self.members.insert(
            r.id,
            Entry {
                record: r.clone(),
                changed: now,
            },
        );
        self.digest_replace(old.as_ref().map(|e| &*e.record), Some(&r));
        if piggyback {
            self.outbox.push(r.id);
        }
        match r.state {
            Liveness::Alive => self.events.push_back(GossipEvent::Up(r)),
            Liveness::Suspect => {
                if before != Some(Liveness::Alive) {
                    // First heard of it as suspect: it is a member all the same.
                    let mut alive = MemberRecord::clone(&r);
                    alive.state = Liveness::Alive;
                    self.events.push_back(GossipEvent::Up(Arc::new(alive)));
                }
                self.events.push_back(GossipEvent::Suspect(r.id));
                let timeout = self.suspicion_timeout();
                self.arm(now + timeout, Timer::Suspicion(r.id, r.incarnation));
            }
            Liveness::Dead | Liveness::Left => {
                if matches!(before, Some(Liveness::Alive | Liveness::Suspect)) {
                    self.events.push_back(GossipEvent::Down {
                        id: r.id,
                        state: r.state,
                    });
                }
            }
        }
        true
    }

    /// Sets the groups this node is a member of (see [`MemberRecord::groups`]): a new
    /// incarnation of its record, spread like a refutation. False (nothing changed) if
    /// the list is not valid ([`crate::proto::message::groups_valid`]).
    pub fn set_groups(&mut self, _now: Time, groups: Vec<String>) -> bool {
        if self.left || !crate::proto::message::groups_valid(&groups) {
            return false;
        }
        if groups == self.me.groups {
            return true;
        }
        let Some(next) = self.me.incarnation.checked_add(1).filter(|i| *i < u64::MAX) else {
            return false;
        };
        let me = Arc::make_mut(&mut self.me);
        me.incarnation = next;
        me.groups = groups;
        self.sign_me();
        self.announce_me();
        true
    }

    /// Spreads this node's own record after a change (a refutation, new groups): queued
    /// for piggybacking and pushed at once to a few members.
    pub(super) fn announce_me(&mut self) {
        self.outbox.push(self.me.id);
        let news = self.me.clone();
        for to in self.pick_random(self.config.rumor_fanout, &[]) {
            self.send(
                to,
                GossipMessage::Rumor {
                    updates: vec![news.clone()],
                },
            );
        }
    }

    /// Whether `r` carries its owner's proof; counts those that do not. Checked only for
    /// records that would change our table, so each costs one verification at most.
    fn vouched(&mut self, r: &MemberRecord) -> bool {
        let ok = super::auth::vouched(&*self.auth, r);
        if !ok {
            self.forged += 1;
        }
        ok
    }

    /// Takes the least-sent updates for one message, as the table holds them now; drops
    /// those sent often enough.
    pub(super) fn piggyback(&mut self) -> Vec<Arc<MemberRecord>> {
        let n = self.members.len() + 1;
        let limit = self.config.retransmit_factor * log10_ceil(n + 1);
        let ids = self.outbox.take(self.config.max_piggyback, limit);
        let me = &self.me;
        let members = &self.members;
        (ids.iter())
            .filter_map(|id| {
                if *id == me.id {
                    Some(me.clone())
                } else {
                    members.get(id).map(|e| e.record.clone())
                }
            })
            .collect()
    }

    /// Up to `count` distinct random alive members, none of them in `exclude`.
    pub(super) fn pick_random(&mut self, count: usize, exclude: &[NodeId]) -> Vec<NodeId> {
        let wanted = |g: &Gossip, id: &NodeId, out: &[NodeId]| {
            g.members
                .get(id)
                .is_some_and(|e| e.record.state == Liveness::Alive)
                && !exclude.contains(id)
                && !out.contains(id)
        };
        // Random draws first: a scan of every member per rumor made spreading the news of
        // n joins cost n^2 per node.
        let mut out = Vec::new();
        if !self.member_ids.is_empty() {
            for _ in 0..(4 * count + 8) {
                if out.len() >= count {
                    break;
                }
                let i = self.rng.below(self.member_ids.len() as u64) as usize;
                let id = self.member_ids[i];
                if wanted(self, &id, &out) {
                    out.push(id);
                }
            }
        }
        if out.len() >= count {
            return out;
        }
        // Few alive, or unlucky draws: the rest from a scan.
        let mut pool: Vec<NodeId> = self
            .member_ids
            .iter()
            .filter(|id| wanted(self, id, &out))
            .copied()
            .collect();
        pool.sort();
        while out.len() < count && !pool.is_empty() {
            let i = self.rng.below(pool.len() as u64) as usize;
            out.push(pool.swap_remove(i));
        }
        out
    }

    /// A random member declared dead (not one that left) whose tombstone is still kept.
    pub(super) fn pick_random_dead(&mut self) -> Option<NodeId> {
        let mut pool: Vec<NodeId> = self
            .members
            .values()
            .filter(|e| e.record.state == Liveness::Dead)
            .map(|e| e.record.id)
            .collect();
        if pool.is_empty() {
            return None;
        }
        pool.sort();
        Some(pool[self.rng.below(pool.len() as u64) as usize])
    }
}

/// `ceil(log10(n))` for `n >= 1`, at least 1: the number of decimal digits of `n - 1`.
fn log10_ceil(n: usize) -> usize {
    let (mut digits, mut p) = (0, 1usize);
    while p < n {
        p = p.saturating_mul(10);
        digits += 1;
    }
    digits.max(1)
}
