//! Scenario actions: scheduling, churn, joins, leaves, crashes, partitions.

use super::handling::NodeClock;
use super::{Repair, Sim};
use crate::proto::rng::SplitMix64;
use crate::proto::{Command, DownReason, Input, NodeId, Time};
use crate::sim::node::{SimNode, Spawn};
use crate::sim::queue::Pending;
use crate::sim::scenario::{self, Action};
use std::ops::Range;
use std::time::Duration;

/// How long a node waits for a member to admit it before it asks another (the library
/// waits as long for each join address).
pub(super) const JOIN_WAIT: Duration = Duration::from_secs(10);

impl<N: SimNode> Sim<N> {
    /// A scenario action breaks the current stable and optimal periods.
    fn unsettle(&mut self) {
        self.good_since = None;
        self.optimal_since = None;
    }

    /// Schedules `action` at `at` (not before now).
    pub fn schedule(&mut self, at: Time, action: Action) {
        if let Action::Leave { node } | Action::Crash { node } = action
            && let Some(d) = self.doomed.get_mut(node)
        {
            *d = true;
        }
        self.queue.push(at.max(self.now), Pending::Action(action));
    }

    /// Schedules random churn: joins, leaves and crashes (roughly a third each) totalling
    /// `percent` % of the initial node count, at random times in `window`. Never removes the
    /// same node twice (nor one already scheduled to go) and always leaves at least one of
    /// the current live nodes. Returns what was scheduled.
    pub fn schedule_churn(
        &mut self,
        percent: f64,
        window: Range<Time>,
        rng: &mut SplitMix64,
    ) -> Vec<(Time, Action)> {
        let initial = self.net.initial_clusters();
        let count = (percent.max(0.0) / 100.0 * initial.len() as f64).round() as usize;
        let candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.alive[i] && !self.doomed[i])
            .collect();
        let doomed_live = (0..self.nodes.len())
            .filter(|&i| self.alive[i] && self.doomed[i])
            .count();
        let keep = if doomed_live < self.live {
            1
        } else {
            candidates.len()
        };
        let join_clusters = initial.to_vec();
        let plan = scenario::plan_churn(count, &candidates, keep, &join_clusters, window, rng);
        for (at, a) in &plan {
            self.schedule(*at, a.clone());
        }
        plan
    }

    /// Applies `action` now. Returns the new node's index for a join.
    pub fn apply(&mut self, action: Action) -> Option<usize> {
        match action {
            Action::Join { cluster } => return Some(self.join(cluster)),
            Action::Leave { node } => self.leave(node),
            Action::Crash { node } => self.crash(node),
            Action::Partition { a, b } => {
                self.net.partition(a, b);
                self.unsettle();
            }
            Action::Heal { a, b } => {
                self.net.heal(a, b);
                self.unsettle();
                self.repairs.push(Repair {
                    kind: "heal",
                    at: self.now,
                    done: None,
                });
            }
        }
        None
    }

    pub(super) fn join(&mut self, cluster: usize) -> usize {
        assert!(
            cluster < self.net.clusters(),
            "join into unknown cluster {cluster}"
        );
        self.unsettle();
        let idx = self.spawn(cluster);
        let live: Vec<usize> = (0..idx).filter(|&i| self.alive[i]).collect();
        if N::OWN_MEMBERSHIP {
            if let Some(&via) = live.first() {
                self.join_through(idx, via);
            }
            return self.joined(idx);
        }
        for &b in &live {
            let id = self.ids[b];
            self.feed(idx, Input::MemberUp { id }, false);
        }
        let at = self.now + self.cfg.membership_delay;
        for &b in &live {
            self.queue.push(
                at,
                Pending::Member {
                    to: b,
                    subject: idx,
                    down: None,
                },
            );
        }
        self.joined(idx)
    }

    /// Node `idx` asks node `via` to admit it, when it is free to, and checks back after
    /// [`JOIN_WAIT`] (nodes with their own membership).
    pub(super) fn join_through(&mut self, idx: usize, via: usize) {
        let at = self.now.max(self.clocks[idx].busy_until);
        let via = self.ids[via];
        self.nodes[idx].join_via(at, via);
        let end = self.drain(idx, at);
        self.clocks[idx].busy_until = end;
        self.rearm(idx);
        self.queue
            .push(self.now + JOIN_WAIT, Pending::JoinCheck { node: idx });
    }

    /// A join not answered in [`JOIN_WAIT`] is sent to the next live member, as a node given
    /// several join addresses does: its first contact may have crashed before answering.
    pub(super) fn check_join(&mut self, idx: usize) {
        if !self.alive[idx] {
            return;
        }
        let Some(waiting_on) = self.nodes[idx].joining() else {
            return;
        };
        let after = self.index.get(&waiting_on).copied().unwrap_or(0);
        let n = self.nodes.len();
        let next = (1..n)
            .map(|k| (after + k) % n)
            .find(|&i| i != idx && self.alive[i] && self.nodes[i].joining().is_none());
        match next {
            Some(via) => {
                self.join_through(idx, via);
            }
            // Nobody else to ask: the node keeps asking its contact, and is checked again.
            None => self
                .queue
                .push(self.now + JOIN_WAIT, Pending::JoinCheck { node: idx }),
        }
    }

    fn joined(&mut self, idx: usize) -> usize {
        self.stats.joins += 1;
        self.repairs.push(Repair {
            kind: "join",
            at: self.now,
            done: None,
        });
        idx
    }

    pub(super) fn leave(&mut self, node: usize) {
        if !self.is_alive(node) {
            self.stats.ignored_actions += 1;
            return;
        }
        self.unsettle();
        self.feed(node, Input::Command(Command::Leave), false);
        self.remove(node);
        self.notify_down(node, DownReason::Left, self.cfg.membership_delay);
        self.stats.leaves += 1;
        self.repairs.push(Repair {
            kind: "leave",
            at: self.now,
            done: None,
        });
    }

    pub(super) fn crash(&mut self, node: usize) {
        if !self.is_alive(node) {
            self.stats.ignored_actions += 1;
            return;
        }
        self.unsettle();
        self.remove(node);
        self.notify_down(node, DownReason::Dead, self.cfg.failure_detection);
        self.stats.crashes += 1;
        self.repairs.push(Repair {
            kind: "crash",
            at: self.now,
            done: None,
        });
    }

    /// Tells the live nodes, after `delay`, that `node` went away (unless the nodes run
    /// their own membership, which finds out by itself).
    pub(super) fn notify_down(&mut self, node: usize, reason: DownReason, delay: Duration) {
        if N::OWN_MEMBERSHIP {
            return;
        }
        let at = self.now + delay;
        for b in 0..self.nodes.len() {
            if self.alive[b] {
                self.queue.push(
                    at,
                    Pending::Member {
                        to: b,
                        subject: node,
                        down: Some(reason),
                    },
                );
            }
        }
    }

    pub(super) fn spawn(&mut self, cluster: usize) -> usize {
        let index = self.nodes.len();
        let id = NodeId::from_seed(self.cfg.seed, index as u64);
        assert!(
            !self.index.contains_key(&id),
            "node id collision at index {index}"
        );
        let seed =
            SplitMix64::new(self.cfg.seed ^ (index as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03))
                .next_u64();
        let node = (self.factory)(Spawn {
            id,
            index,
            cluster,
            seed,
            now: self.now,
        });
        self.integrate();
        self.pipes.add_node(&self.net, cluster);
        self.nodes.push(node);
        self.ids.push(id);
        self.index.insert(id, index);
        self.cluster_of.push(cluster);
        self.alive.push(true);
        self.doomed.push(false);
        self.clocks.push(NodeClock::new(self.now));
        self.timer_queued.push(None);
        self.view.add_node();
        self.tree_cache.push(None);
        self.dirty.push(true);
        self.dirty_all = true;
        self.live += 1;
        self.live_per_cluster[cluster] += 1;
        self.live_per_site[self.net.site_of(cluster)] += 1;
        let end = self.drain(index, self.now);
        self.clocks[index].busy_until = end;
        self.rearm(index);
        index
    }

    pub(super) fn remove(&mut self, node: usize) {
        self.integrate();
        self.alive[node] = false;
        self.clocks[node].timer = None;
        self.live -= 1;
        let c = self.cluster_of[node];
        self.live_per_cluster[c] -= 1;
        self.live_per_site[self.net.site_of(c)] -= 1;
        self.dirty_all = true;
    }

    /// Adds live-node time up to now (for bytes per node per second).
    pub(super) fn integrate(&mut self) {
        let dt = (self.now - self.node_us_at).as_micros();
        self.node_us += self.live as u128 * dt;
        self.node_us_at = self.now;
    }

    pub(super) fn node_us_now(&self) -> u128 {
        self.node_us + self.live as u128 * (self.now - self.node_us_at).as_micros()
    }
}
