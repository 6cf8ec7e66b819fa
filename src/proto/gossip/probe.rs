//! The timers and failure detection: probe periods, indirect probes, suspicion,
//! anti-entropy, join retries and tombstone pruning.

use super::{Gossip, Probe, Timer};
use crate::proto::id::NodeId;
use crate::proto::message::{GossipMessage, Liveness, MemberRecord};
use crate::proto::time::Time;
use std::sync::Arc;

impl Gossip {
    pub(super) fn on_timer(&mut self, now: Time, timer: Timer) {
        match timer {
            Timer::ProbeTick => {
                self.start_probe(now);
                let next = now + self.stretched(self.config.probe_interval);
                self.arm(next, Timer::ProbeTick);
            }
            Timer::ProbeTimeout(seq) => {
                let Some(p) = self.probe.filter(|p| p.seq == seq && !p.acked) else {
                    return;
                };
                let helpers = self.pick_random(self.config.indirect_probes, &[p.target]);
                for h in helpers {
                    let updates = self.piggyback();
                    self.send(
                        h,
                        GossipMessage::ProbeRequest {
                            seq,
                            target: p.target,
                            updates,
                        },
                    );
                }
            }
            Timer::ProbeDeadline(seq) => {
                let Some(p) = self.probe.filter(|p| p.seq == seq) else {
                    return;
                };
                self.probe = None;
                if self.take_ran_late() {
                    self.health_worse();
                } else if p.acked {
                    self.health_better();
                }
                if !p.acked {
                    // Not evidence against us either: the member may be dead or cut off (a side
                    // of a partition misses every probe across it). Lifeguard tells the
                    // two apart by nacks from the helpers, which this protocol lacks.
                    self.suspect(now, p.target);
                }
            }
            Timer::Suspicion(id, incarnation) => {
                if let Some(e) = self.members.get(&id)
                    && e.record.state == Liveness::Suspect
                    && e.record.incarnation == incarnation
                {
                    // Stretched by our health now, not when we heard it: a node that grew
                    // starved meanwhile gives the suspect the longer time.
                    let due = e.changed + self.suspicion_timeout();
                    if due > now {
                        self.arm(due, Timer::Suspicion(id, incarnation));
                        return;
                    }
                    let mut r = MemberRecord::clone(&e.record);
                    r.state = Liveness::Dead;
                    self.spread(now, vec![Arc::new(r)], None);
                }
            }
            Timer::AntiEntropy => {
                // A digest first: the records travel only where the tables differ.
                let digest = self.digest();
                if let Some(peer) = self.pick_random(1, &[]).pop() {
                    self.send(peer, digest.clone());
                }
                // A member declared dead may only have been cut off (a partition): try one
                // of them too, so two sides that each declared the other dead merge again
                // once the network heals (its live records differ from ours: it starts the
                // push-pull; it refutes on seeing itself dead, and so do we).
                if let Some(peer) = self.pick_random_dead() {
                    self.send(peer, digest);
                }
                let period = if std::mem::take(&mut self.news_since_sync) {
                    self.config.anti_entropy_fast_interval
                } else {
                    self.config.anti_entropy_interval
                };
                let next = now + self.jitter(period);
                self.arm(next, Timer::AntiEntropy);
            }
            Timer::JoinRetry => {
                if let Some(via) = self.joining {
                    self.join(now, via);
                }
            }
            Timer::RumorFlush => self.push_rumors(now),
            Timer::Prune => {
                let ttl = self.config.tombstone_ttl;
                self.members.retain(|_, e| {
                    matches!(e.record.state, Liveness::Alive | Liveness::Suspect)
                        || now.saturating_since(e.changed) < ttl
                });
                let members = &self.members;
                self.member_ids.retain(|id| members.contains_key(id));
                self.arm(now + ttl, Timer::Prune);
            }
        }
    }

    /// How long a suspect is given to refute: the configured minimum, growing with the
    /// logarithm of the member count, stretched by our local health (the missing ack may
    /// be ours).
    pub(super) fn suspicion_timeout(&self) -> std::time::Duration {
        let n = self.members.len() as f64 + 1.0;
        let factor = (n.log10()).max(1.0);
        self.stretched(self.config.suspicion_timeout.mul_f64(factor))
    }

    /// `peer` did not answer a probe period (or could not be reached): suspect, if alive.
    pub(super) fn suspect(&mut self, now: Time, peer: NodeId) {
        if self.left {
            return;
        }
        if let Some(e) = self.members.get(&peer)
            && e.record.state == Liveness::Alive
        {
            let mut r = MemberRecord::clone(&e.record);
            r.state = Liveness::Suspect;
            self.spread(now, vec![Arc::new(r)], None);
        }
    }

    fn start_probe(&mut self, now: Time) {
        if self.probe_order.is_empty() {
            self.probe_order = self.live_members().map(|r| r.id).collect();
            self.probe_order.sort();
            // Fisher-Yates with the injected RNG: every member is probed once per round.
            for i in (1..self.probe_order.len()).rev() {
                let j = self.rng.below(i as u64 + 1) as usize;
                self.probe_order.swap(i, j);
            }
        }
        while let Some(target) = self.probe_order.pop() {
            let live = self
                .members
                .get(&target)
                .is_some_and(|e| matches!(e.record.state, Liveness::Alive | Liveness::Suspect));
            if !live {
                continue;
            }
            let seq = self.next_seq();
            self.probe = Some(Probe {
                seq,
                target,
                acked: false,
            });
            let updates = self.piggyback();
            self.send(target, GossipMessage::Probe { seq, updates });
            let timeout = self.stretched(self.config.probe_timeout);
            self.arm(now + timeout, Timer::ProbeTimeout(seq));
            // Just short of the next tick, so a period's verdict precedes the next probe.
            let deadline = now + self.stretched(self.config.probe_interval).mul_f64(0.95);
            self.arm(deadline, Timer::ProbeDeadline(seq));
            return;
        }
    }

    pub(super) fn handle_ack(&mut self, seq: u64, target: NodeId) {
        if let Some(p) = self.probe.as_mut()
            && p.seq == seq
            && p.target == target
        {
            p.acked = true;
        }
        // An ack for a probe we relayed goes back to whoever asked.
        if let Some(i) = self
            .relays
            .iter()
            .position(|r| r.our_seq == seq && r.target == target)
        {
            let relay = self.relays.swap_remove(i);
            let updates = self.piggyback();
            self.send(
                relay.requester,
                GossipMessage::Ack {
                    seq: relay.their_seq,
                    target,
                    updates,
                },
            );
        }
    }
}
