//! The probers' rounds (see the parent module's documentation): who asks, which clusters,
//! and how large a train.
//!
//! Bounded whatever the view says: a node asks nothing before its first sweep has met
//! every member (until then it cannot know the clusters, and it publishes no summary),
//! and at most [`MAX_CLUSTERS_PER_ROUND`] clusters per routine round, the least recently
//! asked first. A node that is no prober forgets its figures after [`FIGURE_LIFE`]
//! intervals: it measured them in a recheck or while it wrongly thought itself a prober,
//! nobody refreshes them, and published they would outvote the probers' fresh ones.

use super::LINK_SHARE;
use super::{
    CATCH_UP_ROUNDS, INTRA_TRAIN, MIN_TRAIN, QUICK_PERIOD, QUICK_ROUNDS, RECHECK_ROUNDS,
    TRAIN_DATAGRAM, TRAIN_SPREAD, TRAIN_WAIT, saturation,
};
use crate::proto::clusters::Group;
use crate::proto::core::Core;
use crate::proto::id::NodeId;
use crate::proto::message::{MAX_TRAIN_PACKETS, Message};
use std::sync::Arc;
use std::time::Duration;

/// Most other clusters a routine round asks. Before discovery has settled a node may see
/// every member as a cluster of its own: at 256 nodes every node once asked all 255
/// others for a train in each of its first rounds, and the trains that got through,
/// crossing each other on the wide-area links, read those links at a third of their
/// rate.
const MAX_CLUSTERS_PER_ROUND: usize = 8;

/// How many probe intervals a node that is no prober keeps a figure.
const FIGURE_LIFE: u32 = 4;

impl Core {
    /// Once per housekeeping round: forget trains that never came, and if this node is one
    /// of its cluster's probers and a round is due, ask one member of each other cluster
    /// (at most [`MAX_CLUSTERS_PER_ROUND`] of them) for a train.
    pub(in crate::proto::core) fn bandwidth_round(&mut self) {
        let now = self.now;
        self.bw
            .asked
            .retain(|(_, _, at)| now.saturating_since(*at) < TRAIN_WAIT);
        self.bw
            .told_saturated
            .retain(|_, t| now.saturating_since(*t) < saturation::TELL_EVERY);
        if self.config.bw_probers == 0 {
            return;
        }
        // The view's level-1 groups, sorted by their first member (which names each): the
        // view's shared values, not a copy of every member each round (the copy was
        // O(N) per node and round, 2 % of the simulator's time at 3000 nodes).
        let groups: Vec<Arc<Group>> = self.clusters().levels.first().cloned().unwrap_or_default();
        let holds = |g: &Group, id: &NodeId| g.members.binary_search(id).is_ok();
        if groups.len() < 2 {
            return;
        }
        let Some(mine) = groups.iter().position(|g| holds(g, &self.id)) else {
            return;
        };
        let own: &[NodeId] = &groups[mine].members;
        let prober = own
            .iter()
            .take(self.config.bw_probers)
            .any(|p| *p == self.id);
        let interval = self.config.bw_probe_interval;
        let life = interval * FIGURE_LIFE;
        if prober {
            self.forget_outdated_figures(&groups, life);
        } else {
            self.bw.peers.retain(|_, r| r.updated_within(now, life));
        }
        self.bw
            .suspected_at
            .retain(|_, t| now.saturating_since(*t) < interval);
        self.bw.suspect.retain(|name, r| {
            r.rounds < RECHECK_ROUNDS
                && groups
                    .iter()
                    .find(|g| holds(g, name))
                    .is_some_and(|g| g.members.iter().any(|m| !r.measured.contains(m)))
        });
        let known = |name: &NodeId| groups.iter().any(|g| holds(g, name));
        self.bw.last_asked.retain(|name, _| known(name));
        self.bw.longer.retain(|name, _| known(name));
        // Once the first sweep is done the groups mean something; a member who joins
        // later is met within a probe round and changes no one's cluster, so later
        // sweeps do not hold the trains back (under churn they might never end).
        self.bw.swept |= self.probing.met_everyone();
        // Only probers ask routinely; any member rechecks a cluster a peer's saturated
        // connection made suspect, since it holds the estimate in question.
        if (!prober && self.bw.suspect.is_empty()) || self.probing.loaded(now) || !self.bw.swept {
            return;
        }
        // Routine rounds ask every other cluster; rechecks only the suspect ones.
        let routine = prober && now >= *self.bw.next_round.get_or_insert(now);
        let recheck = !self.bw.suspect.is_empty() && self.bw.next_recheck.is_none_or(|t| now >= t);
        if !routine && !recheck {
            return;
        }
        let catch_up = routine && std::mem::take(&mut self.bw.catch_up);
        if routine {
            self.schedule_round(&groups, mine);
        }
        if recheck {
            self.bw.next_recheck = Some(now + QUICK_PERIOD);
        }
        // The clusters to ask, each sorted by id: suspect ones always, the others if
        // routine, spaced and (in a catch-up round) not measured yet.
        let mut due: Vec<(Option<_>, Arc<Group>)> = Vec::new();
        for (gi, g) in groups.iter().enumerate() {
            if gi == mine || g.members.is_empty() {
                continue;
            }
            let name = g.members[0];
            let suspect = recheck && self.bw.suspect.contains_key(&name);
            let measured = catch_up && self.bw.holds_any(&g.members);
            let spaced = self.bw.next_to_cluster.get(&name).is_some_and(|t| now < *t);
            if suspect || (routine && !spaced && !measured) {
                let last = (!suspect).then(|| self.bw.last_asked.get(&name).copied());
                due.push((last, Arc::clone(g)));
            }
        }
        // Suspect first (`None`), then never asked (`Some(None)`), then the least recent.
        due.sort_by_key(|(last, g)| (last.is_some(), last.flatten(), g.members[0]));
        let suspects = due.iter().filter(|(l, _)| l.is_none()).count();
        due.truncate(suspects + MAX_CLUSTERS_PER_ROUND);
        for (_, group) in due {
            let g: &[NodeId] = &group.members;
            let name = g[0];
            // A recheck after a low figure sizes its train for that figure: a train sized
            // for the old rate costs the sender's budget several times over, and once
            // left a recheck refused until its rounds ran out.
            let (target, slower) = match self.bw.suspect.get_mut(&name).filter(|_| recheck) {
                Some(r) => {
                    r.rounds += 1;
                    let members = &self.members;
                    let target = r
                        .target(g, |m| members.is_alive(m))
                        .unwrap_or(g[self.bw.rounds as usize % g.len()]);
                    (target, r.first.2.then_some(r.first.1))
                }
                None => (g[self.bw.rounds as usize % g.len()], None),
            };
            if !self.members.is_alive(&target) {
                continue;
            }
            self.bw.last_asked.insert(name, now);
            self.ask_train(name, target, g, (MAX_TRAIN_PACKETS, slower));
        }
        // Inside the cluster too (one member per routine round, rotating): how fast a
        // member forwards to another sets how many children it can feed in a stripe
        // (chain or wider tree, see `striping`). Capped smaller: a fast LAN needs no
        // long train to tell it is several times faster than the wide area.
        if routine && !catch_up && own.len() > 1 {
            let others: Vec<NodeId> = own.iter().copied().filter(|m| *m != self.id).collect();
            let target = others[self.bw.rounds as usize % others.len()];
            let spaced = self
                .bw
                .next_to_cluster
                .get(&own[0])
                .is_some_and(|t| now < *t);
            if !spaced && self.members.is_alive(&target) {
                self.ask_train(own[0], target, &others, (INTRA_TRAIN, None));
            }
        }
    }

    /// A prober forgets a figure older than `life` once a fresher one of the same
    /// cluster is held. It asks another member each round, so a figure is otherwise
    /// published until its peer's turn comes again (64 rounds at 64 members): at 256 nodes
    /// the trains of the cold start, when every node was its own prober and their trains
    /// crossed on the wide-area links, read Delft->Leiden at a third of its rate, and
    /// outvoted the probers' right figures for up to nine intervals. A cluster's only figures
    /// stay, old or not: an old figure is better than none.
    fn forget_outdated_figures(&mut self, groups: &[Arc<Group>], life: Duration) {
        let now = self.now;
        // Nothing to forget in most rounds: a figure turns old once per interval.
        if (self.bw.peers.values()).all(|r| r.updated_within(now, life)) {
            return;
        }
        let cluster_of =
            |p: &NodeId| (groups.iter()).position(|g| g.members.binary_search(p).is_ok());
        let fresh: Vec<usize> = (self.bw.peers.iter())
            .filter(|(_, r)| r.updated_within(now, life))
            .filter_map(|(p, _)| cluster_of(p))
            .collect();
        self.bw.peers.retain(|p, r| {
            r.updated_within(now, life) || cluster_of(p).is_none_or(|c| !fresh.contains(&c))
        });
    }

    /// Counts a routine round and sets the next one: quick while starting up or catching
    /// up on clusters still unmeasured, every (jittered) probe interval otherwise.
    fn schedule_round(&mut self, groups: &[Arc<Group>], mine: usize) {
        self.bw.rounds += 1;
        // Trains asked in the start-up rounds are often refused (every prober of every
        // cluster asks at once, and the senders' budgets start empty): a cluster still
        // unmeasured is asked again a quick period later, not a whole interval (a
        // real-QUIC das-4 run waited 30 s for its last pair in two runs out of three).
        let unmeasured = groups
            .iter()
            .enumerate()
            .any(|(gi, g)| gi != mine && !self.bw.holds_any(&g.members));
        let quick = self.bw.rounds <= QUICK_ROUNDS;
        self.bw.catch_up = !quick && unmeasured && self.bw.rounds <= QUICK_ROUNDS + CATCH_UP_ROUNDS;
        let period = if quick || self.bw.catch_up {
            QUICK_PERIOD
        } else {
            self.config.bw_probe_interval
        };
        let jitter = 0.75 + 0.5 * self.bw.rng.unit();
        self.bw.next_round = Some(self.now + period.mul_f64(jitter));
    }
    /// Asks `target` (of the cluster named `name`, whose members are `group`) for a train
    /// of at most `cap` datagrams, sized from the best figure held for the cluster, or
    /// from `slower` if that is lower (a recheck after a low figure).
    fn ask_train(
        &mut self,
        name: NodeId,
        target: NodeId,
        group: &[NodeId],
        (cap, slower): (u16, Option<f64>),
    ) {
        let now = self.now;
        let est = group
            .iter()
            .filter_map(|p| self.bw.estimate(p))
            .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))))
            .map(|e| slower.map_or(e, |s| e.min(s)));
        let bits = est.map_or(0.0, |e| e * TRAIN_SPREAD.as_secs_f64());
        let longer = self.bw.longer.get(&name).copied().unwrap_or(0);
        let packets = ((bits / (TRAIN_DATAGRAM as f64 * 8.0)).ceil() as u16 + 1)
            .max(longer)
            .clamp(MIN_TRAIN, cap.max(MIN_TRAIN));
        let bytes = packets as f64 * TRAIN_DATAGRAM as f64;
        // At most LINK_SHARE of the link on average, whatever the configured interval.
        if let Some(e) = est {
            let gap = Duration::from_secs_f64((bytes * 8.0 / (LINK_SHARE * e)).min(3600.0));
            self.bw.next_to_cluster.insert(name, now + gap);
        }
        let id = self.bw.next_id;
        self.bw.next_id = self.bw.next_id.wrapping_add(1);
        self.bw.asked.push((id, target, now));
        self.bw.stats.trains_asked += 1;
        self.send(
            target,
            Message::TrainRequest {
                id,
                packets,
                size: TRAIN_DATAGRAM,
            },
        );
    }
}
