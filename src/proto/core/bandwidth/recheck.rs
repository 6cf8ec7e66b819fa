//! Rechecking a cluster after a surprising train (see the parent module's documentation):
//! the held-back train, the confirmation, and which members are measured again.

use super::{Bandwidth, QUICK_PERIOD, SURPRISE};
use crate::proto::id::NodeId;
use crate::proto::time::Time;
use std::time::Duration;

/// A cluster being measured again after a surprising train.
#[derive(Clone, Debug)]
pub(super) struct Recheck {
    /// The surprising train, held back until a second one confirms it: the peer, the
    /// rate, and whether it was low.
    pub(super) first: (NodeId, f64, bool),
    /// The estimate the first train was judged against: a second train from a member
    /// this node holds no estimate of yet is judged against it.
    pub(super) reference: f64,
    /// Whether `first` is a train (held back); otherwise it is a report that a peer's
    /// connection ran the path full ([`Bandwidth::suspect_by_path`]), which is never
    /// recorded as a sample: a saturated window may have been short of data as much as of
    /// path, so only trains replace what was known, two of them as after any surprise.
    pub(super) held_back: bool,
    /// Whether a second train from the cluster surprised the same way.
    pub(super) confirmed: bool,
    /// Members measured since it was confirmed.
    pub(super) measured: Vec<NodeId>,
    pub(super) rounds: u32,
}

impl Recheck {
    /// The member to ask next: the one whose train surprised, until a train confirms or
    /// cancels it (its own estimate is what the surprise was judged against, so only a
    /// train of its own can say whether it was a passing burst); then each member not
    /// measured since.
    pub(super) fn target(
        &self,
        group: &[NodeId],
        alive: impl Fn(&NodeId) -> bool,
    ) -> Option<NodeId> {
        let first = self.first.0;
        if !self.confirmed && group.contains(&first) && alive(&first) {
            return Some(first);
        }
        group
            .iter()
            .copied()
            .find(|m| !self.measured.contains(m) && alive(m))
    }
}

impl Bandwidth {
    /// What a train from `from` (of the cluster named `name`) at `bps` records: the
    /// (peer, rate, replace) samples to keep. A train outside [`SURPRISE`] of the peer's
    /// estimate is held back and its cluster rechecked. While it waits, a train surprising
    /// the same way confirms the change (both replace their peers' histories, and so does
    /// the first train from every other member); an unsurprising train from the same
    /// member cancels it (the first is dropped: a train taken while a queue drained, or a
    /// burst of someone else's traffic). An unsurprising train from another member is
    /// only recorded: that member may already be known at the new rate (a change
    /// confirmed earlier replaced its history, and not yet this one's), and once
    /// cancelling there left a cluster half re-measured for good.
    pub(super) fn judge(
        &mut self,
        now: Time,
        name: Option<NodeId>,
        from: NodeId,
        bps: f64,
        interval: Duration,
    ) -> Vec<(NodeId, f64, bool)> {
        let low = |e: f64| bps * SURPRISE < e;
        let judged = |e: f64| (bps > e * SURPRISE || low(e)).then(|| low(e));
        let own = self.estimate(&from);
        let Some(name) = name else {
            return vec![(from, bps, false)];
        };
        let reference = self.suspect.get(&name).map(|r| r.reference);
        let surprise = own.or(reference).and_then(judged);
        match (self.suspect.get_mut(&name), surprise) {
            (Some(r), _) if r.confirmed => {
                let replace = !r.measured.contains(&from);
                r.measured.push(from);
                vec![(from, bps, replace)]
            }
            (Some(r), Some(low)) if low == r.first.2 && !r.held_back => {
                // The report agrees with a train, but a train taken as the transfer's
                // queues drained would too: held back like any first surprise.
                r.first = (from, bps, low);
                r.held_back = true;
                Vec::new()
            }
            (Some(r), Some(low)) if low == r.first.2 => {
                r.confirmed = true;
                let (peer, first, _) = r.first;
                r.measured = vec![peer, from];
                vec![(peer, first, true), (from, bps, true)]
            }
            (Some(r), _) if r.first.0 == from => {
                // A false alarm from a saturated window must not keep a real change from
                // being rechecked for a whole interval.
                if !r.held_back {
                    self.suspected_at.remove(&name);
                }
                self.suspect.remove(&name);
                vec![(from, bps, false)]
            }
            (Some(_), _) => vec![(from, bps, false)],
            (None, Some(low)) => {
                // At most one recheck per cluster per probe interval.
                let recent = (self.suspected_at.get(&name))
                    .is_some_and(|t| now.saturating_since(*t) < interval);
                if recent {
                    return vec![(from, bps, false)];
                }
                self.suspect.insert(
                    name,
                    Recheck {
                        first: (from, bps, low),
                        reference: own.unwrap_or(bps),
                        held_back: true,
                        confirmed: false,
                        measured: Vec::new(),
                        rounds: 0,
                    },
                );
                self.suspected_at.insert(name, now);
                self.next_recheck = Some(now + QUICK_PERIOD);
                Vec::new()
            }
            (None, None) => vec![(from, bps, false)],
        }
    }
}

impl Bandwidth {
    /// `from` (of the cluster named `name`) says its connection here ran full while it
    /// delivered `bps`, far below the `held` estimate: the cluster is rechecked as after
    /// a surprising train, starting with a train from `from`, but nothing is recorded
    /// until a train says so. False if the cluster is being rechecked already, or was
    /// within `interval`.
    pub(super) fn suspect_by_path(
        &mut self,
        now: Time,
        name: NodeId,
        (from, bps): (NodeId, f64),
        held: f64,
        interval: Duration,
    ) -> bool {
        let recent =
            (self.suspected_at.get(&name)).is_some_and(|t| now.saturating_since(*t) < interval);
        if recent || self.suspect.contains_key(&name) {
            return false;
        }
        self.suspect.insert(
            name,
            Recheck {
                first: (from, bps, true),
                reference: held,
                held_back: false,
                confirmed: false,
                measured: Vec::new(),
                rounds: 0,
            },
        );
        self.suspected_at.insert(name, now);
        self.next_recheck = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::core::bandwidth::KEEP_SAMPLES;

    fn known(peers: &[NodeId], bps: f64) -> Bandwidth {
        let t0 = Time::from_micros(0);
        let mut bw = Bandwidth::new(1, t0);
        for p in peers {
            for _ in 0..KEEP_SAMPLES {
                bw.train(t0, *p, bps, false);
            }
        }
        bw
    }

    #[test]
    fn a_surprising_train_counts_only_once_a_second_confirms_it() {
        let (a, b, name) = (NodeId([1; 16]), NodeId([2; 16]), NodeId([1; 16]));
        let now = Time::from_micros(60_000_000);
        let every = Duration::from_secs(30);
        let mut bw = known(&[a, b], 26e6);
        // Held back, and the cluster rechecked soon.
        assert!(bw.judge(now, Some(name), a, 3e6, every).is_empty());
        assert_eq!(bw.estimate(&a), Some(26e6));
        assert!(bw.next_recheck.is_some());
        // Another member's train agrees: both replace what was known.
        let got = bw.judge(now, Some(name), b, 3.1e6, every);
        assert_eq!(got, vec![(a, 3e6, true), (b, 3.1e6, true)]);
        for (p, r, replace) in got {
            bw.train(now, p, r, replace);
        }
        assert_eq!(bw.estimate(&a), Some(3e6));
        assert_eq!(bw.estimate(&b), Some(3.1e6));

        // A member not measured before is judged against what the first was: it confirms.
        let mut bw = known(&[a], 26e6);
        assert!(bw.judge(now, Some(name), a, 3e6, every).is_empty());
        let got = bw.judge(now, Some(name), b, 3.1e6, every);
        assert_eq!(got, vec![(a, 3e6, true), (b, 3.1e6, true)]);

        // A train right after a transfer that the same member's next one contradicts:
        // dropped. Another member's ordinary train in between is recorded and decides
        // nothing.
        let mut bw = known(&[a, b], 7e6);
        assert!(bw.judge(now, Some(name), a, 2e6, every).is_empty());
        assert_eq!(
            bw.judge(now, Some(name), b, 6.8e6, every),
            vec![(b, 6.8e6, false)]
        );
        assert!(!bw.suspect.is_empty());
        assert_eq!(
            bw.judge(now, Some(name), a, 6.9e6, every),
            vec![(a, 6.9e6, false)]
        );
        assert!(bw.suspect.is_empty());
        assert_eq!(bw.estimate(&a), Some(7e6));
        // And the cluster is not suspected again within the interval.
        let soon = now + Duration::from_secs(5);
        assert_eq!(
            bw.judge(soon, Some(name), a, 2e6, every),
            vec![(a, 2e6, false)]
        );
    }

    /// A cluster re-measured for one member only (the other refused its trains while the
    /// recheck lasted): the other's next surprising train is rechecked from that same
    /// member, and the member already known at the new rate neither confirms nor cancels
    /// it. Before, its ordinary train cancelled the recheck every time, and the root of a
    /// real-QUIC test held the old rate of a slowed link for over four minutes.
    #[test]
    fn a_half_re_measured_cluster_finishes_from_the_member_left_behind() {
        let (a, b, name) = (NodeId([1; 16]), NodeId([2; 16]), NodeId([1; 16]));
        let now = Time::from_micros(60_000_000);
        let every = Duration::from_secs(30);
        let mut bw = known(&[a, b], 26e6);
        for _ in 0..KEEP_SAMPLES {
            bw.train(now, a, 3e6, true);
        }
        assert!(bw.judge(now, Some(name), b, 3e6, every).is_empty());
        let r = bw
            .suspect
            .get(&name)
            .expect("b's train made the cluster suspect");
        assert_eq!(r.target(&[a, b], |_| true), Some(b));
        assert_eq!(
            bw.judge(now, Some(name), a, 3.1e6, every),
            vec![(a, 3.1e6, false)]
        );
        assert_eq!(
            bw.judge(now, Some(name), b, 3.2e6, every),
            vec![(b, 3e6, true), (b, 3.2e6, true)]
        );
        let r = bw.suspect.get(&name).expect("confirmed");
        assert_eq!(r.target(&[a, b], |_| true), Some(a));
        // The member that surprised is gone: the others are asked.
        let mut bw = known(&[a, b], 26e6);
        assert!(bw.judge(now, Some(name), b, 3e6, every).is_empty());
        let r = bw.suspect.get(&name).expect("suspect");
        assert_eq!(r.target(&[a, b], |m| *m != b), Some(a));
    }

    /// A report that a member's connection ran the path full far below what is held: the
    /// cluster is rechecked, the report itself is never recorded, a train that agrees
    /// replaces the history at once, and one that does not cancels it without holding
    /// the cluster off for the interval.
    #[test]
    fn a_saturated_path_is_rechecked_and_only_a_train_replaces_the_estimate() {
        let (a, b, name) = (NodeId([1; 16]), NodeId([2; 16]), NodeId([1; 16]));
        let now = Time::from_micros(60_000_000);
        let every = Duration::from_secs(30);
        let mut bw = known(&[a, b], 26e6);
        assert!(bw.suspect_by_path(now, name, (a, 1.5e6), 26e6, every));
        assert_eq!(bw.estimate(&a), Some(26e6), "the report is no sample");
        assert!(!bw.suspect_by_path(now, name, (a, 1.5e6), 26e6, every));
        let r = bw.suspect.get(&name).expect("suspect");
        assert_eq!(
            r.target(&[a, b], |_| true),
            Some(a),
            "the reporter is asked first"
        );
        // Its train agrees: held back as a first surprise, and a second confirms it; only
        // the trains replace what was known, then b is measured.
        assert!(bw.judge(now, Some(name), a, 3.1e6, every).is_empty());
        let got = bw.judge(now, Some(name), a, 3.2e6, every);
        assert_eq!(got, vec![(a, 3.1e6, true), (a, 3.2e6, true)]);
        for (p, r, replace) in got {
            bw.train(now, p, r, replace);
        }
        assert_eq!(bw.estimate(&a), Some(3.2e6));
        let r = bw.suspect.get(&name).expect("confirmed");
        assert_eq!(r.target(&[a, b], |_| true), Some(b));
        assert_eq!(
            bw.judge(now, Some(name), b, 3.0e6, every),
            vec![(b, 3.0e6, true)]
        );
        assert_eq!(
            bw.estimate(&b),
            Some(26e6),
            "judge only says what to record"
        );

        // A window short of data, not of path: the train says so, nothing changes, and a
        // real change noticed soon after is still rechecked.
        let mut bw = known(&[a, b], 26e6);
        assert!(bw.suspect_by_path(now, name, (a, 1.5e6), 26e6, every));
        assert_eq!(
            bw.judge(now, Some(name), a, 25e6, every),
            vec![(a, 25e6, false)]
        );
        assert!(bw.suspect.is_empty());
        let soon = now + Duration::from_secs(5);
        assert!(bw.judge(soon, Some(name), b, 3e6, every).is_empty());
        assert!(bw.suspect.contains_key(&name));
    }
}
