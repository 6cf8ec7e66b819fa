//! Which tree carries which part of a striped broadcast, decided as the parts complete.
//!
//! A split fixed up front in proportion to the planned rates leaves the whole waiting for
//! its slowest tree: trees that share a link get the shares QUIC's congestion control
//! gives them, not the ones the packing planned, and one tree running 30% late makes the
//! whole 30% late (measured on das-4: parts of one 16 MiB broadcast completed between 5.3
//! and 11.4 s). So the payload is cut into many parts, each tree ("lane") keeps at most
//! [`WINDOW`] of them in flight, and whenever a part's report comes back the lane's rate
//! is measured again and more parts are handed out:
//!
//! - a lane takes the next part if it would finish it no later than the projected end of
//!   the whole: the time at which every lane, working at its measured rate from when its
//!   parts in flight are done, would have carried all parts not yet handed out (water
//!   filling). Far from the end every lane stays busy; near it a slow lane is left idle
//!   rather than given a part it would deliver last;
//! - the lane that would finish the next part first always may take it, so the last part
//!   goes somewhere.
//!
//! Owns the payload (parts are slices of it) and the lanes; time comes in as arguments.

use crate::net::pace::{HEADROOM, Pace};
use crate::proto::NodeId;
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Parts a lane has in flight at most: two, so that a lane's link stays busy while the
/// report of its older part travels back to the root.
pub const WINDOW: usize = 2;
/// Most parts a lane may have in flight beyond [`WINDOW`] to cover its round trip.
const MAX_EXTRA_WINDOW: usize = 30;
/// The smallest part: below this, a part's fixed costs (a control message, a stream per
/// hop, a report) grow against its transfer time.
pub const MIN_PART: u64 = 32 * 1024;
/// Payloads below this are not cut: one part per tree at most would be smaller than
/// the data plane's chunk.
pub const MIN_CUT: u64 = 256 * 1024;
/// How long the planned rate counts as measured for, seconds: a lane's first reports move
/// its estimate only as much as that much time at the planned rate would.
const PRIOR_S: f64 = 0.25;
/// The shortest timeout a late part gets, even when the whole's deadline is closer.
const MIN_TIMEOUT: Duration = Duration::from_secs(1);

/// A part to start now: broadcast `bytes` as part `index` of `count` along `route`.
#[derive(Clone, Debug)]
pub struct PartStart {
    /// The part's place in the payload, and how many parts there are.
    pub index: usize,
    pub count: usize,
    /// The tree (the plan's route) that carries it.
    pub lane: usize,
    /// Its bytes (a slice of the payload).
    pub bytes: Bytes,
    /// The route: (sender, receiver) edges.
    pub route: Vec<(NodeId, NodeId)>,
    /// Until the whole's deadline, at least a second.
    pub timeout: Duration,
    /// The lane's pace at this node (see [`crate::net::pace`]).
    pub pace: Option<Arc<Pace>>,
}

struct InFlight {
    index: usize,
    started: Instant,
    /// Bits of it already counted as carried (estimated when a sibling completed).
    credited: f64,
}

/// One tree and what it carries.
struct Lane {
    route: Vec<(NodeId, NodeId)>,
    planned_bps: f64,
    pace: Option<Arc<Pace>>,
    /// Estimated rate, bits per second: bits carried over the time the lane had parts in
    /// flight, with the planned rate as a prior. Per-part samples would not do: parts in
    /// flight together share the tree, so one completes late and the next just after it;
    /// so when one completes, the others are credited with what they carried beside it
    /// (at its average rate over their common time).
    rate_bps: f64,
    in_flight: Vec<InFlight>,
    /// Since when it has had parts in flight, if it has.
    busy_from: Option<Instant>,
    /// Time it had parts in flight before `busy_from`, seconds, and the bits it completed.
    busy_s: f64,
    done_bits: f64,
    /// Parts completed on it.
    carried: usize,
    /// The round trip a part spends on top of its bytes, seconds: down the tree's depth
    /// and its report back ([`Schedule::with_delays`]). A part finishes that much after
    /// its bytes are sent, and a lane keeps that much of its rate in flight more.
    delay_s: f64,
}

/// The parts of one striped broadcast and the lanes they go down.
pub struct Schedule {
    payload: Bytes,
    /// Offset and length of every part, in order.
    parts: Vec<(u64, u64)>,
    next: usize,
    deadline: Instant,
    lanes: Vec<Lane>,
    started: Instant,
}

impl Schedule {
    /// The schedule for `payload` over `routes` with planned rates `rates_bps` (one per
    /// route), cut into at most `max_parts` parts ([`part_sizes`]); each route's streams
    /// paced at its rate if `paced`.
    pub fn new(
        payload: Bytes,
        routes: Vec<Vec<(NodeId, NodeId)>>,
        rates_bps: &[f64],
        max_parts: usize,
        paced: bool,
        now: Instant,
        timeout: Duration,
    ) -> Schedule {
        // No route at all: one lane down the overlay's own tree (an empty route).
        let routes = if routes.is_empty() {
            vec![Vec::new()]
        } else {
            routes
        };
        let sizes = part_sizes(payload.len() as u64, routes.len(), max_parts);
        let parts = sizes
            .iter()
            .scan(0u64, |at, &len| {
                let part = (*at, len);
                *at += len;
                Some(part)
            })
            .collect();
        let lanes = routes
            .into_iter()
            .zip(rates_bps.iter().chain(std::iter::repeat(&1e6)))
            .map(|(route, &rate)| {
                let rate = if rate.is_finite() && rate > 0.0 {
                    rate
                } else {
                    1e6
                };
                Lane {
                    route,
                    planned_bps: rate,
                    pace: paced
                        .then(|| Pace::new(rate * HEADROOM).map(Arc::new))
                        .flatten(),
                    rate_bps: rate,
                    in_flight: Vec::new(),
                    busy_from: None,
                    busy_s: 0.0,
                    done_bits: 0.0,
                    carried: 0,
                    delay_s: 0.0,
                }
            })
            .collect();
        Schedule {
            payload,
            parts,
            next: 0,
            deadline: now + timeout,
            lanes,
            started: now,
        }
    }

    /// Each lane's round trip on top of its bytes (`delays_s[i]` seconds for route i; 0
    /// where not given): on a deep, long tree (a 150 ms wide-area hop) two parts in
    /// flight would leave the link idle most of each round trip, and a part handed to it
    /// would finish that much later than its bytes say.
    pub fn with_delays(mut self, delays_s: &[f64]) -> Schedule {
        for (lane, &d) in self.lanes.iter_mut().zip(delays_s) {
            lane.delay_s = if d.is_finite() && d > 0.0 {
                d.min(10.0)
            } else {
                0.0
            };
        }
        self
    }

    /// Parts lane `i` may have in flight when the next is `bits` long: [`WINDOW`], and as
    /// many more as its rate carries over its round trip.
    fn window(&self, i: usize, bits: f64) -> usize {
        let lane = &self.lanes[i];
        let extra = (lane.rate_bps * lane.delay_s / bits.max(1.0)).floor();
        WINDOW + extra.clamp(0.0, MAX_EXTRA_WINDOW as f64) as usize
    }

    /// How many parts the payload is cut into.
    pub fn count(&self) -> usize {
        self.parts.len()
    }

    /// When the broadcast started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Parts completed per lane so far.
    pub fn carried(&self) -> Vec<usize> {
        self.lanes.iter().map(|l| l.carried).collect()
    }

    /// Planned and estimated rate per lane, Mbit/s.
    pub fn rates_mbit(&self) -> Vec<(f64, f64)> {
        self.lanes
            .iter()
            .map(|l| (l.planned_bps / 1e6, l.rate_bps / 1e6))
            .collect()
    }

    /// The parts to start at the beginning.
    pub fn start(&mut self, now: Instant) -> Vec<PartStart> {
        self.hand_out(now)
    }

    /// Part `index` reported (reached everyone or not): the parts to start now.
    pub fn done(&mut self, index: usize, now: Instant) -> Vec<PartStart> {
        let part_len = self.part_len(index);
        if let Some(lane) = self
            .lanes
            .iter_mut()
            .find(|l| l.in_flight.iter().any(|p| p.index == index))
        {
            let at = lane.in_flight.iter().position(|p| p.index == index);
            let part = lane.in_flight.remove(at.expect("found above"));
            let bits = part_len as f64 * 8.0;
            lane.done_bits += bits - part.credited;
            let life = now.saturating_duration_since(part.started).as_secs_f64();
            if life > 0.0 {
                for other in &mut lane.in_flight {
                    let len = self.parts.get(other.index).map_or(0, |p| p.1) as f64 * 8.0;
                    let common = now
                        .saturating_duration_since(other.started.max(part.started))
                        .as_secs_f64();
                    let carried = (common * bits / life).min(len).max(other.credited);
                    lane.done_bits += carried - other.credited;
                    other.credited = carried;
                }
            }
            let since = lane.busy_from.unwrap_or(now);
            let busy = lane.busy_s + now.saturating_duration_since(since).as_secs_f64();
            lane.rate_bps = (lane.done_bits + lane.planned_bps * PRIOR_S) / (busy + PRIOR_S);
            if lane.in_flight.is_empty() {
                lane.busy_s = busy;
                lane.busy_from = None;
            }
            lane.carried += 1;
        }
        self.hand_out(now)
    }

    fn part_len(&self, index: usize) -> u64 {
        self.parts.get(index).map_or(0, |p| p.1)
    }

    /// Seconds from `now` until lane `i` is done with what it has in flight: the older
    /// part's rest, and the newer ones' full length less what they got beside it.
    fn busy_s(&self, i: usize, now: Instant) -> f64 {
        let lane = &self.lanes[i];
        let bits: f64 = lane
            .in_flight
            .iter()
            .map(|p| {
                let len = self.part_len(p.index) as f64 * 8.0;
                let share = lane.rate_bps / lane.in_flight.len() as f64;
                let got = now.saturating_duration_since(p.started).as_secs_f64() * share;
                (len - got).max(0.0)
            })
            .sum();
        bits / lane.rate_bps
    }

    /// When every part not handed out would be done if the lanes carried them at their
    /// rates from when each is free (seconds from now).
    fn projected_end_s(&self, now: Instant) -> f64 {
        let work: f64 = (self.next..self.count())
            .map(|i| self.part_len(i) as f64 * 8.0)
            .sum();
        let mut free: Vec<(f64, f64)> = (0..self.lanes.len())
            .map(|i| {
                let lane = &self.lanes[i];
                (self.busy_s(i, now) + lane.delay_s, lane.rate_bps)
            })
            .collect();
        free.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Raise the water level lane by lane until the work fits under it.
        let (mut rate, mut left, mut level) = (0.0, work, 0.0);
        for (k, &(at, r)) in free.iter().enumerate() {
            let filled = rate * (at - level);
            if rate > 0.0 && filled >= left {
                return level + left / rate;
            }
            left -= filled.max(0.0);
            level = at;
            rate += r;
            if k + 1 == free.len() {
                return level + left / rate;
            }
        }
        level
    }

    fn hand_out(&mut self, now: Instant) -> Vec<PartStart> {
        let mut out = Vec::new();
        while self.next < self.count() {
            let len = self.part_len(self.next) as f64 * 8.0;
            let finish: Vec<f64> = (0..self.lanes.len())
                .map(|i| {
                    let lane = &self.lanes[i];
                    self.busy_s(i, now) + len / lane.rate_bps + lane.delay_s
                })
                .collect();
            let earliest = finish.iter().copied().fold(f64::INFINITY, f64::min);
            let end = self.projected_end_s(now).max(earliest);
            let taker = (0..self.lanes.len())
                .filter(|&i| {
                    self.lanes[i].in_flight.len() < self.window(i, len) && finish[i] <= end
                })
                .min_by(|&a, &b| finish[a].total_cmp(&finish[b]));
            let Some(lane) = taker else { break };
            out.push(self.assign(lane, now));
        }
        out
    }

    fn assign(&mut self, lane: usize, now: Instant) -> PartStart {
        let index = self.next;
        self.next += 1;
        let (from, len) = self.parts[index];
        let to = from + len;
        let l = &mut self.lanes[lane];
        l.busy_from.get_or_insert(now);
        l.in_flight.push(InFlight {
            index,
            started: now,
            credited: 0.0,
        });
        PartStart {
            index,
            count: self.count(),
            lane,
            bytes: self.payload.slice(from as usize..to as usize),
            route: self.lanes[lane].route.clone(),
            timeout: self
                .deadline
                .saturating_duration_since(now)
                .max(MIN_TIMEOUT),
            pace: self.lanes[lane].pace.clone(),
        }
    }
}

/// The sizes `len` bytes are cut into for `lanes` trees, at most `max_parts` of them:
/// equal parts of `len / 48` while much is left, then each a `2 * lanes`-th of what is
/// left (so the parts handed out in one round of the lanes' windows never hold more than
/// about half of it), down to [`MIN_PART`]; the floor is raised until the count fits.
/// Nothing below [`MIN_CUT`] is cut.
pub fn part_sizes(len: u64, lanes: usize, max_parts: usize) -> Vec<u64> {
    if len < MIN_CUT || max_parts <= 1 {
        return vec![len];
    }
    let share = 2 * lanes.max(1) as u64;
    let mut floor = MIN_PART;
    loop {
        let cap = (len / 48).max(floor);
        let mut sizes = Vec::new();
        let mut left = len;
        while left > 0 && sizes.len() <= max_parts {
            let size = (left / share).clamp(floor, cap).min(left);
            // A last sliver joins the part before it.
            let size = if left - size < floor / 2 { left } else { size };
            sizes.push(size);
            left -= size;
        }
        if sizes.len() <= max_parts {
            return sizes;
        }
        floor *= 2;
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
