//! A large broadcast striped over several trees, on the driver's side: numbering the
//! parts, handing them to the trees as they complete (`schedule`), putting the payload
//! together again at every receiver, and merging the parts' reports into one at the root.
//!
//! The root cuts the payload into equal consecutive parts (at most [`MAX_STRIPES`]) and
//! broadcasts each as a streamed operation of its own that follows one tree of the plan
//! (`crate::proto::Core::stripe_plan`, `StartKind::Stream::route`); which tree carries
//! which part is decided as earlier parts report, from the rates the trees are measured to
//! reach. Every part is checked against its own SHA-256 as it arrives, like any streamed
//! payload. The parts' operation numbers say what they are part of: the whole's number in
//! the low 48 bits, the part count in bits 48-54 and the part's index plus one in bits
//! 55-61 (plain operations leave bits 48-62 clear, see `super::ops`). So a receiver needs
//! no other message to know when it has every part, and delivers the whole, once, under
//! the whole's number.

mod schedule;

pub use schedule::{MIN_CUT, MIN_PART, PartStart, Schedule, WINDOW, part_sizes};

use crate::proto::{NodeId, OpId, OpReport};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};
use tracing::debug;

/// How the large broadcasts a node starts spread.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Spread {
    /// As the node's measurements say (the default): striped over several trees packed
    /// over the measured cluster bandwidths when that is predicted faster, else the widest
    /// single tree; the latency tree until every cluster pair is measured.
    #[default]
    Auto,
    /// Always the overlay's latency tree, pipelined (what every broadcast did before
    /// bandwidth was measured; for comparison).
    LatencyTree,
    /// Striped over the packed trees whenever every cluster pair is measured, whatever
    /// the model predicts, from [`MIN_CUT`] up (for comparison: where the default's choice
    /// of one tree pays).
    Striped,
}

impl Spread {
    /// A short name for tables: `auto` or `latency-tree`.
    pub fn name(self) -> &'static str {
        match self {
            Spread::Auto => "auto",
            Spread::LatencyTree => "latency-tree",
            Spread::Striped => "striped",
        }
    }
}

/// Most parts one broadcast is cut into.
pub const MAX_STRIPES: usize = 127;
/// Parts of a whole that never completed are dropped after this long.
const KEEP: Duration = Duration::from_secs(300);
const LOW: u64 = (1 << 48) - 1;

/// The number of part `index` of `count` of the broadcast numbered `whole`.
pub fn stripe_nonce(whole: u64, index: usize, count: usize) -> u64 {
    (whole & LOW) | ((count as u64 & 127) << 48) | (((index as u64 + 1) & 127) << 55)
}

/// (whole, index, count) if `nonce` numbers a part.
pub fn parse(nonce: u64) -> Option<(u64, usize, usize)> {
    if nonce & (1 << 63) != 0 {
        return None;
    }
    let count = ((nonce >> 48) & 127) as usize;
    let index = ((nonce >> 55) & 127) as usize;
    // Lazily: `index - 1` of a plain number (index 0) must not be computed.
    (index >= 1 && count >= 1 && index <= count).then(|| (nonce & LOW, index - 1, count))
}

struct Assembly {
    count: usize,
    parts: BTreeMap<usize, Bytes>,
    started: Instant,
}

struct Merge {
    schedule: Schedule,
    reports: Vec<OpReport>,
}

/// Parts waiting for their siblings, and reports of parts waiting for theirs.
#[derive(Default)]
pub struct Stripes {
    assemblies: HashMap<(NodeId, u64), Assembly>,
    delivered: HashMap<(NodeId, u64), Instant>,
    merges: HashMap<u64, Merge>,
}

impl Stripes {
    /// A part arrived: the whole, once every part is in (exactly once per whole).
    pub fn part(&mut self, op: OpId, payload: Bytes) -> Option<(u64, Bytes)> {
        let (whole, index, count) = parse(op.nonce)?;
        let key = (op.root, whole);
        if self.delivered.contains_key(&key) {
            return None;
        }
        let a = self.assemblies.entry(key).or_insert_with(|| Assembly {
            count,
            parts: BTreeMap::new(),
            started: Instant::now(),
        });
        if a.count != count {
            return None;
        }
        a.parts.insert(index, payload);
        if a.parts.len() < a.count {
            return None;
        }
        let a = self.assemblies.remove(&key)?;
        self.delivered.insert(key, Instant::now());
        let mut whole_bytes = BytesMut::with_capacity(a.parts.values().map(Bytes::len).sum());
        for p in a.parts.values() {
            whole_bytes.extend_from_slice(p);
        }
        Some((whole, whole_bytes.freeze()))
    }

    /// Starts the striped broadcast numbered `whole`: the parts to start now.
    pub fn start(&mut self, whole: u64, mut schedule: Schedule, now: Instant) -> Vec<PartStart> {
        let starts = schedule.start(now);
        self.merges.insert(
            whole,
            Merge {
                schedule,
                reports: Vec::new(),
            },
        );
        starts
    }

    /// A part's report: the parts to start now, and the whole's report once every part
    /// reported. Reached: the members every part reached; missing: the others expected.
    pub fn report(&mut self, r: &OpReport, now: Instant) -> (Vec<PartStart>, Option<OpReport>) {
        let Some((whole, index, _)) = r.op.and_then(|op| parse(op.nonce)) else {
            return (Vec::new(), None);
        };
        let Some(m) = self.merges.get_mut(&whole) else {
            return (Vec::new(), None);
        };
        m.reports.push(r.clone());
        let starts = m.schedule.done(index, now);
        if m.reports.len() < m.schedule.count() {
            return (starts, None);
        }
        let Some(m) = self.merges.remove(&whole) else {
            return (starts, None);
        };
        let mut merged = merge(whole, m.reports);
        merged.elapsed = now.saturating_duration_since(m.schedule.started());
        debug!(
            whole,
            parts_per_tree = ?m.schedule.carried(),
            planned_and_measured_mbit = ?m.schedule.rates_mbit(),
            "striped broadcast reported"
        );
        (starts, Some(merged))
    }

    /// Drops what is too old to complete.
    pub fn prune(&mut self) {
        self.assemblies.retain(|_, a| a.started.elapsed() < KEEP);
        self.delivered.retain(|_, t| t.elapsed() < KEEP * 2);
    }
}

fn merge(whole: u64, reports: Vec<OpReport>) -> OpReport {
    let first = reports[0].clone();
    let expected: BTreeSet<NodeId> = reports.iter().flat_map(|r| r.expected.clone()).collect();
    let reached: BTreeSet<NodeId> = expected
        .iter()
        .copied()
        .filter(|n| reports.iter().all(|r| r.reached.contains(n)))
        .collect();
    OpReport {
        op: first.op.map(|o| OpId {
            root: o.root,
            nonce: whole,
        }),
        missing: expected.difference(&reached).copied().collect(),
        reached: reached.into_iter().collect(),
        expected: expected.into_iter().collect(),
        elapsed: reports.iter().map(|r| r.elapsed).max().unwrap_or_default(),
        error: reports.iter().find_map(|r| r.error.clone()),
        ..first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_numbers_round_trip_and_plain_numbers_are_not_parts() {
        let n = stripe_nonce(0x1234_5678_9abc, 2, 5);
        assert_eq!(parse(n), Some((0x1234_5678_9abc, 2, 5)));
        assert_eq!(parse(0x0000_7fff_0000_0001), None);
        assert_eq!(parse(1 << 63 | n), None);
    }

    #[test]
    fn the_whole_is_delivered_once_all_parts_are_in_in_order() {
        let root = NodeId([1; 16]);
        let mut s = Stripes::default();
        let op = |i| OpId {
            root,
            nonce: stripe_nonce(9, i, 3),
        };
        assert!(s.part(op(2), Bytes::from_static(b"C")).is_none());
        assert!(s.part(op(0), Bytes::from_static(b"A")).is_none());
        let (whole, b) = s.part(op(1), Bytes::from_static(b"B")).unwrap();
        assert_eq!((whole, &b[..]), (9, &b"ABC"[..]));
        assert!(s.part(op(1), Bytes::from_static(b"B")).is_none(), "once");
    }

    #[test]
    fn reports_merge_into_one_naming_who_missed_any_part() {
        let (a, b) = (NodeId([1; 16]), NodeId([2; 16]));
        let mut s = Stripes::default();
        let now = Instant::now();
        let payload = Bytes::from(vec![0u8; 2 * MIN_CUT as usize]);
        let routes = vec![vec![(a, b)]];
        let schedule = Schedule::new(
            payload,
            routes,
            &[1e6],
            2,
            false,
            now,
            Duration::from_secs(9),
        );
        let starts = s.start(9, schedule, now);
        assert_eq!(starts.len(), 2, "two parts, both in the window");
        let r = |i, reached: Vec<NodeId>| OpReport {
            op: Some(OpId {
                root: a,
                nonce: stripe_nonce(9, i, 2),
            }),
            expected: vec![a, b],
            reached,
            ..OpReport::default()
        };
        assert!(s.report(&r(0, vec![a, b]), now).1.is_none());
        let later = now + Duration::from_secs(3);
        let m = s.report(&r(1, vec![a]), later).1.unwrap();
        assert_eq!(m.elapsed, Duration::from_secs(3), "from the whole's start");
        assert_eq!(m.op.unwrap().nonce, 9);
        assert_eq!((m.reached, m.missing), (vec![a], vec![b]));
    }
}
