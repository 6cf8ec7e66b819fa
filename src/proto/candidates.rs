//! The bounded candidate set (docs/DESIGN.md §4): the peers a node measures and trades tree state
//! with. It holds the lowest-RTT peers found so far ("near"), a few random "explorers"
//! rotated to discover better ones, and a few "hinted" peers learnt from parent queries.
//! Peers that probe us ("inbound") receive our adverts too, so the relation is symmetric.

use super::id::IdMap as HashMap;
use super::id::NodeId;
use super::time::Time;
use std::collections::BTreeMap;

/// Why a peer is watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Among the lowest-RTT peers found so far.
    Near,
    /// A random peer under trial; `seq` orders explorers by age for rotation.
    Explorer { seq: u64 },
    /// Learnt from a parent hint; dropped at `expires` unless it became a parent.
    Hinted { expires: Time },
}

/// How many of a prober's own gaps between two watching probes we wait before it stops
/// getting our adverts: a round is jittered by a quarter either way (a gap of n rounds
/// spans 0.75n to 1.25n periods) and a steady peer's backoff doubles, so the next gap can
/// be up to 2 x 1.25 / 0.75 = 3.3 times the last.
const INBOUND_GAPS: u32 = 4;

/// A peer that probes us with `watch` set.
#[derive(Clone, Copy, Debug)]
struct Inbound {
    /// Its last watching probe.
    seen: Time,
    /// The gap between its last two watching probes, once it sent two.
    gap: Option<std::time::Duration>,
}

/// The watched set plus the inbound probers.
#[derive(Clone, Debug, Default)]
pub struct CandidateSet {
    watched: BTreeMap<NodeId, Role>,
    inbound: HashMap<NodeId, Inbound>,
    seq: u64,
}

impl CandidateSet {
    /// The peers we probe and trade adverts with (near, explorers, hinted).
    pub fn watched(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.watched.keys().copied()
    }

    /// How many peers are watched.
    pub fn watched_len(&self) -> usize {
        self.watched.len()
    }

    /// The role of a watched peer.
    pub fn role(&self, id: &NodeId) -> Option<Role> {
        self.watched.get(id).copied()
    }

    /// Whether `id` probed us within the expiry window.
    pub fn is_inbound(&self, id: &NodeId) -> bool {
        self.inbound.contains_key(id)
    }

    /// Whether `peer` gets our adverts (see [`CandidateSet::advert_targets`]).
    pub fn is_advert_target(&self, peer: &NodeId) -> bool {
        self.watched
            .get(peer)
            .is_some_and(|r| !matches!(r, Role::Hinted { .. }))
            || self.inbound.contains_key(peer)
    }

    /// Everyone who gets our adverts: near peers, explorers and inbound peers, sorted, no
    /// duplicates. Hinted peers are only measured: they did not ask for our adverts.
    pub fn advert_targets(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .watched
            .iter()
            .filter(|(_, r)| !matches!(r, Role::Hinted { .. }))
            .map(|(k, _)| *k)
            .chain(self.inbound.keys().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The largest RTT among near peers, if `max_near` of them are known (a peer measured
    /// below it deserves a place).
    pub fn near_cutoff(
        &self,
        rtt_us: impl Fn(&NodeId) -> Option<u32>,
        max_near: usize,
    ) -> Option<u32> {
        let near: Vec<u32> = self
            .watched
            .iter()
            .filter(|(_, r)| **r == Role::Near)
            .filter_map(|(k, _)| rtt_us(k))
            .collect();
        if near.len() < max_near {
            None
        } else {
            near.into_iter().max()
        }
    }

    /// Starts watching `id` as an explorer; false if already watched.
    pub fn add_explorer(&mut self, id: NodeId) -> bool {
        if self.watched.contains_key(&id) {
            return false;
        }
        self.seq += 1;
        self.watched.insert(id, Role::Explorer { seq: self.seq });
        true
    }

    /// Starts watching `id` as a hinted peer until `expires` (extends it if already hinted).
    /// At most `max_hinted` hinted peers: the one expiring first makes room. Returns true if
    /// `id` is newly watched.
    pub fn add_hinted(&mut self, id: NodeId, expires: Time, max_hinted: usize) -> bool {
        match self.watched.get_mut(&id) {
            Some(Role::Hinted { expires: e }) => {
                *e = (*e).max(expires);
                return false;
            }
            Some(_) => return false,
            None => {}
        }
        if max_hinted == 0 {
            return false;
        }
        let hinted: Vec<(Time, NodeId)> = self
            .watched
            .iter()
            .filter_map(|(k, r)| match r {
                Role::Hinted { expires } => Some((*expires, *k)),
                _ => None,
            })
            .collect();
        if hinted.len() >= max_hinted
            && let Some((_, oldest)) = hinted.iter().min()
        {
            self.watched.remove(oldest);
        }
        self.watched.insert(id, Role::Hinted { expires });
        true
    }

    /// Forgets `id` entirely (it left or died).
    pub fn remove(&mut self, id: &NodeId) {
        self.watched.remove(id);
        self.inbound.remove(id);
    }

    /// Records a probe from `id`; true if it was not inbound before.
    pub fn note_inbound(&mut self, id: NodeId, now: Time) -> bool {
        match self.inbound.get_mut(&id) {
            Some(i) => {
                i.gap = Some(now.saturating_since(i.seen));
                i.seen = now;
                false
            }
            None => {
                self.inbound.insert(
                    id,
                    Inbound {
                        seen: now,
                        gap: None,
                    },
                );
                true
            }
        }
    }

    /// Re-sorts near and explorers by RTT: the `max_near` lowest measured RTTs are near,
    /// the rest explorers; explorers beyond `explorers` are dropped, oldest first.
    /// Returns the peers no longer watched.
    pub fn rebalance(
        &mut self,
        rtt_us: impl Fn(&NodeId) -> Option<u32>,
        max_near: usize,
        explorers: usize,
    ) -> Vec<NodeId> {
        let mut measured: Vec<(u32, NodeId)> = self
            .watched
            .iter()
            .filter(|(_, r)| matches!(r, Role::Near | Role::Explorer { .. }))
            .filter_map(|(k, _)| rtt_us(k).map(|r| (r, *k)))
            .collect();
        measured.sort_unstable();
        for (i, (_, id)) in measured.iter().enumerate() {
            let role = self.watched.get_mut(id).expect("watched");
            if i < max_near {
                *role = Role::Near;
            } else if *role == Role::Near {
                self.seq += 1;
                *role = Role::Explorer { seq: self.seq };
            }
        }
        let mut exp: Vec<(u64, NodeId)> = self
            .watched
            .iter()
            .filter_map(|(k, r)| match r {
                Role::Explorer { seq } => Some((*seq, *k)),
                _ => None,
            })
            .collect();
        exp.sort_unstable();
        let extra = exp.len().saturating_sub(explorers);
        let dropped: Vec<NodeId> = exp.into_iter().take(extra).map(|(_, k)| k).collect();
        for k in &dropped {
            self.watched.remove(k);
        }
        dropped
    }

    /// Drops inbound peers gone quiet and hinted peers past their expiry unless `keep`
    /// says they are still needed (e.g. they are a parent).
    ///
    /// An inbound peer is quiet after [`INBOUND_GAPS`] times its own last gap between two
    /// watching probes, at least `floor` and at most `inbound_expiry` (which it gets until
    /// it has sent two): an explorer that rotated away, probed every round on its trial,
    /// stops getting our adverts within seconds, while a settled peer probing us every
    /// dozen rounds keeps them. With one expiry for all, sized for the slowest prober,
    /// every explorer of the past `inbound_expiry` got our adverts.
    pub fn expire(
        &mut self,
        now: Time,
        inbound_expiry: std::time::Duration,
        floor: std::time::Duration,
        keep: impl Fn(&NodeId) -> bool,
    ) -> Vec<NodeId> {
        self.inbound.retain(|_, i| {
            let quiet = i.gap.map_or(inbound_expiry, |g| {
                (g * INBOUND_GAPS).clamp(floor.min(inbound_expiry), inbound_expiry)
            });
            now.saturating_since(i.seen) < quiet
        });
        let gone: Vec<NodeId> = self
            .watched
            .iter()
            .filter_map(|(k, r)| match r {
                Role::Hinted { expires } if *expires <= now && !keep(k) => Some(*k),
                _ => None,
            })
            .collect();
        for k in &gone {
            self.watched.remove(k);
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn id(n: u64) -> NodeId {
        NodeId::from_seed(3, n)
    }

    #[test]
    fn rebalance_keeps_the_nearest_and_rotates_explorers_out_oldest_first() {
        let mut c = CandidateSet::default();
        for n in 0..6 {
            c.add_explorer(id(n));
        }
        // RTT: node n has RTT 100 * (6 - n); node 5 is unmeasured.
        let rtt = |k: &NodeId| (0..5).find(|n| id(*n) == *k).map(|n| 100 * (6 - n as u32));
        let dropped = c.rebalance(rtt, 2, 2);
        assert_eq!(c.role(&id(4)), Some(Role::Near));
        assert_eq!(c.role(&id(3)), Some(Role::Near));
        // Four explorers left (0, 1, 2, 5): the two oldest go.
        assert_eq!(dropped, vec![id(0), id(1)]);
        assert_eq!(c.watched_len(), 4);
    }

    #[test]
    fn hinted_peers_are_bounded_and_expire_unless_kept() {
        let mut c = CandidateSet::default();
        assert!(c.add_hinted(id(1), Time(10), 2));
        assert!(c.add_hinted(id(2), Time(20), 2));
        assert!(c.add_hinted(id(3), Time(30), 2));
        assert_eq!(c.role(&id(1)), None, "the first to expire made room");
        let gone = c.expire(Time(25), Duration::from_secs(1), Duration::ZERO, |_| false);
        assert_eq!(gone, vec![id(2)]);
        let gone = c.expire(Time(35), Duration::from_secs(1), Duration::ZERO, |k| {
            *k == id(3)
        });
        assert!(gone.is_empty(), "a hinted peer that is a parent stays");
    }

    #[test]
    fn inbound_probers_get_adverts_until_they_go_quiet() {
        let mut c = CandidateSet::default();
        c.add_explorer(id(1));
        assert!(c.note_inbound(id(2), Time(0)));
        assert!(!c.note_inbound(id(2), Time(5)));
        assert_eq!(c.advert_targets().len(), 2);
        c.expire(
            Time(2_000_000),
            Duration::from_secs(1),
            Duration::ZERO,
            |_| false,
        );
        assert_eq!(c.advert_targets(), vec![id(1)]);
    }

    /// The advert targets, as a set.
    fn targets(c: &CandidateSet) -> std::collections::BTreeSet<NodeId> {
        c.advert_targets().into_iter().collect()
    }

    fn ids(ns: &[u64]) -> std::collections::BTreeSet<NodeId> {
        ns.iter().map(|&n| id(n)).collect()
    }

    /// Seconds (from an origin 100 s in) as `Time`.
    fn secs(s: f64) -> Time {
        Time(((100.0 + s) * 1e6) as u64)
    }

    #[test]
    fn an_inbound_prober_goes_quiet_after_four_of_its_own_gaps() {
        let expiry = Duration::from_secs(20);
        let floor = Duration::from_secs(3);
        let mut c = CandidateSet::default();
        // An explorer on trial, probing every second, then rotated away.
        c.note_inbound(id(1), secs(0.0));
        c.note_inbound(id(1), secs(1.0));
        // A settled peer probing every 12 s.
        c.note_inbound(id(2), secs(-11.0));
        c.note_inbound(id(2), secs(1.0));
        // A peer heard once: the full expiry.
        c.note_inbound(id(3), secs(1.0));
        c.expire(secs(4.5), expiry, floor, |_| false);
        assert_eq!(targets(&c), ids(&[1, 2, 3]), "within 4 gaps of 1 s");
        c.expire(secs(5.5), expiry, floor, |_| false);
        assert_eq!(targets(&c), ids(&[2, 3]), "the explorer is quiet after 4 s");
        c.expire(secs(20.5), expiry, floor, |_| false);
        assert_eq!(
            targets(&c),
            ids(&[2, 3]),
            "4 x 12 s is capped at 20 s, not yet"
        );
        c.expire(secs(21.5), expiry, floor, |_| false);
        assert!(c.advert_targets().is_empty());
        // A burst of two probes close together does not drop a peer below the floor.
        c.note_inbound(id(4), secs(30.0));
        c.note_inbound(id(4), secs(30.1));
        c.expire(secs(32.5), expiry, floor, |_| false);
        assert_eq!(c.advert_targets(), vec![id(4)]);
        c.expire(secs(33.5), expiry, floor, |_| false);
        assert!(c.advert_targets().is_empty());
    }
}
