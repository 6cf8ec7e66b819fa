//! Explorers: random members on trial, rotated to find nearer candidates and better
//! routes than the candidate set knows.
//!
//! Owns the pace of exploring ([`Exploring`]). While this node's trees or membership
//! change, one explorer is replaced every `Config::explore_rotate` and `Config::explorers`
//! are on trial. Once they hold still, each rotation doubles the gap, up to
//! [`MAX_SLOWDOWN`] times, and fewer explorers are kept, so each stays on trial about as
//! long as before. Any parent switch, lost parent or change of the members brings the
//! first pace back. Why: in a settled overlay a new explorer every two seconds was most of
//! what a node sent and, past a few dozen nodes, a new QUIC handshake each time (its probes,
//! its answers to other nodes' explorers, the sample of our state it is sent), while it
//! hardly ever found anything.

use super::Core;
use crate::proto::config::Config;
use crate::proto::id::NodeId;
use crate::proto::timers::Timer;
use std::time::Duration;

/// How many times `Config::explore_rotate` the gap between rotations grows to while
/// nothing changes.
pub(super) const MAX_SLOWDOWN: u32 = 8;

/// Members looked at per probe round for one this node never measured.
const UNMEASURED_SCAN: usize = 16;

/// This node's parent events so far (switches and losses) and its alive members: apart,
/// since a lost parent and a member gone would cancel out in one sum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ChangeMark {
    parents: u64,
    alive: usize,
}

/// The pace of exploring.
pub(super) struct Exploring {
    /// How many times `Config::explore_rotate` the next rotation waits: 1 while things
    /// change, doubled by each rotation after which nothing had.
    slowdown: u32,
    /// How many explorers are kept: `Config::explorers` divided by the slowdown (at least
    /// one). After a change it grows back by one per rotation, with the explorer each
    /// rotation adds, not at once: topping the set up takes full adverts both ways.
    kept: usize,
    /// [`Core::change_mark`] at the last rotation.
    mark: ChangeMark,
    /// Where [`Core::unmeasured_member`] looks next in the alive members.
    scan_at: usize,
}

impl Exploring {
    /// The first pace, with `Config::explorers` kept.
    pub(super) fn new(config: &Config) -> Self {
        Exploring {
            slowdown: 1,
            kept: config.explorers,
            mark: ChangeMark::default(),
            scan_at: 0,
        }
    }

    /// The gap to the next rotation.
    pub(super) fn gap(&self, config: &Config) -> Duration {
        config.explore_rotate * self.slowdown
    }

    /// How many explorers are kept.
    pub(super) fn explorers(&self) -> usize {
        self.kept
    }

    /// Whether the pace is slower than the first.
    fn slowed(&self) -> bool {
        self.slowdown > 1
    }

    /// A rotation at change mark `mark`: the pace of the next one.
    fn rotated(&mut self, config: &Config, mark: ChangeMark) {
        if mark == self.mark {
            self.slowdown = (self.slowdown * 2).min(MAX_SLOWDOWN);
            let share = config.explorers / self.slowdown as usize;
            self.kept = self.kept.min(share.max(1));
        } else {
            self.slowdown = 1;
            self.kept = (self.kept + 1).min(config.explorers);
        }
        self.mark = mark;
    }
}

impl Core {
    /// What moves whenever this node switches or loses a parent, or its alive members
    /// change.
    fn change_mark(&self) -> ChangeMark {
        let s = &self.stats;
        let parents = s.switches_rules
            + s.switches_shortcut
            + s.switches_repair
            + s.switches_flatten
            + s.parents_lost
            + s.parents_quiet;
        ChangeMark {
            parents,
            alive: self.members.alive().len(),
        }
    }

    /// Replaces one explorer by a random member (on trial: it is probed and asked for its
    /// state), and arms the next rotation at the pace [`Exploring`] says.
    pub(super) fn on_explore_rotate(&mut self) {
        let mark = self.change_mark();
        self.exploring.rotated(&self.config, mark);
        let mut keep = self.exploring.explorers();
        if let Some(peer) = self.random_unwatched()
            && self.nbrs.cands.add_explorer(peer)
        {
            // On trial: our watching probe makes it send us its state in the trees of
            // the roots nearest it (where it could be our entry into its part of the
            // network), then its changes. Neither side sends its whole state: at a
            // thousand trees, a full advert each way every rotation would cost more than
            // all the rest of a settled node's traffic.
            self.stats.watches += 1;
            self.ping(peer, true);
            keep += 1; // The new one stays; the oldest goes at the next re-ranking.
        }
        self.nbrs.rebalance(self.config.max_near, keep);
        let next = self.now + self.exploring.gap(&self.config);
        self.schedule.set(Timer::ExploreRotate, next);
    }

    /// Once per serial period: after a change at a slow pace, the next rotation comes at
    /// the first pace from now, not after the slow gap armed before.
    pub(super) fn keep_exploring_pace(&mut self) {
        if !self.exploring.slowed() || self.change_mark() == self.exploring.mark {
            return;
        }
        let soon = self.now + self.config.explore_rotate;
        if self
            .schedule
            .deadline(Timer::ExploreRotate)
            .is_none_or(|at| at > soon)
        {
            self.schedule.set(Timer::ExploreRotate, soon);
        }
    }

    /// Tops the candidate set up to its size with random members.
    pub(super) fn refill(&mut self) {
        let want = self.config.max_near + self.exploring.explorers();
        let mut tries = 0;
        while self.nbrs.cands.watched_len() < want && tries < want * 2 {
            tries += 1;
            match self.random_unwatched() {
                Some(p) => self.watch(p),
                None => break,
            }
        }
    }

    /// A member this node holds no RTT sample of, found among the next
    /// [`UNMEASURED_SCAN`] alive members (round robin), for the probe round to measure
    /// once the sweep is over. The sweep measures every member once, but its probe is
    /// lost when its dial fails or waits too long, and nothing else is sure to measure
    /// that member: in the join storm of 120 processes, 167 pairs were still unmeasured
    /// minutes after every tree was optimal, the latest nodes up missing most.
    pub(super) fn unmeasured_member(&mut self) -> Option<NodeId> {
        let alive = self.members.alive();
        for _ in 0..alive.len().min(UNMEASURED_SCAN) {
            let p = alive[self.exploring.scan_at % alive.len()];
            self.exploring.scan_at = self.exploring.scan_at.wrapping_add(1);
            if !self.nbrs.measured(&p) {
                return Some(p);
            }
        }
        None
    }

    /// A random live member not in the candidate set (a few tries; `None` if none found).
    pub(super) fn random_unwatched(&mut self) -> Option<NodeId> {
        let alive = self.members.alive();
        if alive.is_empty() {
            return None;
        }
        for _ in 0..8 {
            let p = alive[self.rng.below(alive.len() as u64) as usize];
            if self.nbrs.cands.role(&p).is_none() {
                return Some(p);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(parents: u64) -> ChangeMark {
        ChangeMark { parents, alive: 0 }
    }

    #[test]
    fn a_member_the_sweep_missed_is_measured_by_a_later_round() {
        use crate::proto::{Input, Message, Time};
        let peers: Vec<NodeId> = (1..=40).map(|i| NodeId::from_seed(7, i)).collect();
        let lost = peers[39];
        // No explorers: nothing else would ever probe a member with no estimate.
        let config = Config {
            explorers: 0,
            ..Config::test()
        };
        let mut core = Core::new(NodeId::from_seed(7, 0), config, 1, Time::ZERO);
        for &p in &peers {
            core.handle(Time::ZERO, Input::MemberUp { id: p });
        }
        // The sweep is over, and its probe of `lost` went nowhere.
        core.probing.finish_sweep();
        let rtt = Duration::from_millis(2);
        for &peer in &peers[..39] {
            core.handle(Time::ZERO, Input::RttSample { peer, rtt });
        }
        let mut pinged = 0;
        let mut now = Time::ZERO;
        while now < Time::ZERO + Duration::from_secs(10) {
            while let Some(t) = core.poll_transmit() {
                pinged += usize::from(t.to == lost && matches!(t.msg, Message::Ping { .. }));
            }
            now = core.poll_timeout().expect("running");
            core.handle(now, Input::Timeout);
        }
        assert!(pinged >= 1, "the member the sweep missed is probed");
        // Rounds of 375-625 ms: at most 26 in 10 s, and a pass over the 40 members, 16 a
        // round, takes two and a half.
        assert!(
            pinged <= 11,
            "once per pass over the members, not each round: {pinged}"
        );
    }

    #[test]
    fn exploring_slows_while_nothing_changes_and_keeps_pace_on_a_change() {
        let c = Config::wan();
        let mut e = Exploring::new(&c);
        assert_eq!((e.gap(&c), e.explorers()), (c.explore_rotate, c.explorers));
        e.rotated(&c, mark(0));
        assert_eq!(
            e.gap(&c),
            c.explore_rotate * 2,
            "nothing changed since the start"
        );
        assert_eq!(e.explorers(), c.explorers / 2);
        for _ in 0..10 {
            e.rotated(&c, mark(0));
        }
        assert_eq!(e.gap(&c), c.explore_rotate * MAX_SLOWDOWN);
        assert_eq!(e.explorers(), 1, "never fewer than one");
        e.rotated(&c, mark(1));
        assert_eq!(
            e.gap(&c),
            c.explore_rotate,
            "a change: the first pace at once"
        );
        assert_eq!(e.explorers(), 2, "one more explorer per rotation");
        e.rotated(&c, mark(2));
        e.rotated(&c, mark(3));
        e.rotated(&c, mark(4));
        assert_eq!(e.explorers(), c.explorers);
        let none = Config {
            explorers: 0,
            ..Config::wan()
        };
        let mut e = Exploring::new(&none);
        e.rotated(&none, mark(0));
        e.rotated(&none, mark(1));
        assert_eq!(e.explorers(), 0);
    }
}
