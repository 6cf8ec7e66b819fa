//! The peers this node measures and watches: RTT estimates and the candidate set.
//!
//! Owns the filtered RTT estimate of every peer measured and the candidate set
//! ([`Neighbours`]). They are one part because the candidate set is ranked by the
//! estimates (near peers are the nearest measured), and a peer that goes away leaves both.
//! The probing that feeds the estimates is in `probing`.

use crate::proto::candidates::{CandidateSet, Role};
use crate::proto::id::{IdMap as HashMap, NodeId};
use crate::proto::rtt::RttEstimator;

/// RTT estimates and the candidate set.
#[derive(Default)]
pub(super) struct Neighbours {
    rtt: HashMap<NodeId, RttEstimator>,
    /// The peers watched (near peers, explorers, hinted peers) and the inbound probers.
    pub(super) cands: CandidateSet,
}

impl Neighbours {
    /// The RTT estimate of `peer`, if it was measured or hinted.
    pub(super) fn get(&self, peer: &NodeId) -> Option<&RttEstimator> {
        self.rtt.get(peer)
    }

    /// Filtered RTT to `peer`, µs.
    pub(super) fn rtt_us(&self, peer: &NodeId) -> Option<u32> {
        self.rtt.get(peer).and_then(|e| e.rtt_us())
    }

    /// Our one-way latency estimate to `peer` (half the filtered RTT), µs.
    pub(super) fn lat_us(&self, peer: &NodeId) -> Option<u32> {
        self.rtt.get(peer).and_then(|e| e.lat_us())
    }

    /// The peers measured by our own samples at most `lat_us` away (one way), sorted.
    pub(super) fn measured_within(&self, lat_us: u32) -> Vec<NodeId> {
        let mut near: Vec<NodeId> = (self.rtt.iter())
            .filter(|(_, e)| e.measured() && e.lat_us().is_some_and(|l| l <= lat_us))
            .map(|(p, _)| *p)
            .collect();
        near.sort_unstable();
        near
    }

    /// Every peer measured by our own samples, with its filtered RTT (µs), in no order.
    pub(super) fn measured_rtts(&self) -> impl Iterator<Item = (NodeId, u32)> + '_ {
        (self.rtt.iter())
            .filter(|(_, e)| e.measured())
            .filter_map(|(p, e)| e.rtt_us().map(|r| (*p, r)))
    }

    /// Whether `peer`'s estimate comes from our own samples (not only from a hint).
    pub(super) fn measured(&self, peer: &NodeId) -> bool {
        self.rtt.get(peer).is_some_and(|e| e.measured())
    }

    /// Adds one RTT sample of `peer` (filter window `window`; `loaded`: taken while this
    /// node moved bulk data, see [`RttEstimator::push_loaded`]): whether the estimate
    /// changed, and the sample count now.
    pub(super) fn push_sample(
        &mut self,
        peer: NodeId,
        rtt_us: u32,
        window: usize,
        loaded: bool,
        hold: bool,
    ) -> (bool, usize) {
        let e = self.rtt.entry(peer).or_default();
        e.set_hold(hold);
        let before = e.rtt_us();
        if loaded {
            e.push_loaded(rtt_us, window);
        } else {
            e.push(rtt_us, window);
        }
        (before != e.rtt_us(), e.samples())
    }

    /// Takes `peer`'s own figure for our RTT (`rtt_us`) while we have no sample of ours:
    /// whether the estimate changed.
    pub(super) fn take_hint(&mut self, peer: NodeId, rtt_us: u32) -> bool {
        let e = self.rtt.entry(peer).or_default();
        if e.measured() {
            return false;
        }
        let before = e.rtt_us();
        e.set_hint(rtt_us);
        before != e.rtt_us()
    }

    /// Forgets `peer` (it went away).
    pub(super) fn forget(&mut self, peer: &NodeId) {
        self.cands.remove(peer);
        self.rtt.remove(peer);
    }

    /// The largest RTT among near peers, once `max_near` of them are measured.
    pub(super) fn near_cutoff(&self, max_near: usize) -> Option<u32> {
        let rtt = &self.rtt;
        self.cands
            .near_cutoff(|k| rtt.get(k).and_then(|e| e.rtt_us()), max_near)
    }

    /// Ranks the watched peers by their estimates (see [`CandidateSet::rebalance`]).
    pub(super) fn rebalance(&mut self, max_near: usize, explorers: usize) {
        let rtt = &self.rtt;
        self.cands
            .rebalance(|k| rtt.get(k).and_then(|e| e.rtt_us()), max_near, explorers);
    }

    /// Whether `peer` is watched only because of a hint.
    pub(super) fn is_hinted(&self, peer: &NodeId) -> bool {
        matches!(self.cands.role(peer), Some(Role::Hinted { .. }))
    }

    /// Those of `peers` with an RTT estimate, with it (µs), in the order of `peers`.
    pub(super) fn row(&self, peers: &[NodeId]) -> Vec<(NodeId, u32)> {
        peers
            .iter()
            .filter_map(|p| Some((*p, self.rtt.get(p)?.rtt_us()?)))
            .collect()
    }
}
