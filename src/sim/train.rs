//! Packet trains in virtual time: the trains in flight and what the asker's driver reports
//! of each, computed as the QUIC driver computes it from its arrival stamps (the `net`
//! module's `train` file; the simulator may not import it, so its two constants are
//! repeated here).
//!
//! A train's datagrams go through the same pipes as messages ([`super::bandwidth`]); each
//! one either arrives (at the nanosecond it left its last pipe, plus the latency) or is
//! lost. Once every datagram of a train is accounted for, [`Flight::measure`] says what
//! the receiver would report: the datagrams that came, and the spread of the train's tail
//! (the head, a third of the train, is left out, as the driver leaves it out).

use std::time::Duration;

/// Header bytes of a train datagram: the driver never sends a smaller one.
pub(crate) const HEADER: u16 = 9;

/// How long the receiving driver waits for more datagrams of a train whose last datagram
/// has not come before it reports what came.
pub(crate) const TRAIN_IDLE: Duration = Duration::from_millis(500);

/// Datagrams at the head of a train of `count` left out of the measured spread.
fn head(count: u16) -> u16 {
    count / 3
}

/// One train on its way: who sent it to whom, and its datagrams so far.
#[derive(Clone, Debug)]
pub(crate) struct Flight {
    /// The node that sends it (was asked for it).
    pub(crate) from: usize,
    /// The node that asked for it, and receives it.
    pub(crate) to: usize,
    /// The id the asker's core gave it.
    pub(crate) id: u32,
    /// Datagrams sent (the count every datagram's header carries).
    pub(crate) count: u16,
    /// Bytes per datagram.
    pub(crate) size: u16,
    /// Datagrams neither arrived nor lost yet.
    pending: u16,
    /// Arrivals: (when, index in the train).
    arrivals: Vec<(Duration, u16)>,
}

/// What the asker's driver reports of a train, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Measured {
    /// Datagrams that came.
    pub(crate) received: u16,
    /// Datagrams the span covers: the train's tail (all of it if too few came).
    pub(crate) spread: u16,
    /// From the first arrival of the tail to the last arrival.
    pub(crate) span: Duration,
    /// When the driver reports it: at the last datagram, or [`TRAIN_IDLE`] after the last
    /// arrival if the last datagram was lost.
    pub(crate) at: Duration,
}

impl Flight {
    /// A train of `count` datagrams of `size` bytes from node `from` to node `to`.
    pub(crate) fn new(from: usize, to: usize, id: u32, count: u16, size: u16) -> Self {
        Flight {
            from,
            to,
            id,
            count,
            size,
            pending: count,
            arrivals: Vec::with_capacity(count as usize),
        }
    }

    /// Datagram `seq` arrived at `at`, or (`at` is `None`) was lost. Returns whether every
    /// datagram is now accounted for.
    pub(crate) fn resolve(&mut self, seq: u16, at: Option<Duration>) -> bool {
        if let Some(at) = at {
            self.arrivals.push((at, seq));
        }
        self.pending = self.pending.saturating_sub(1);
        self.pending == 0
    }

    /// What the receiver reports once every datagram is accounted for; `None` if none
    /// came (the receiver never knew of the train).
    ///
    /// Mirrors the driver's receive loop: the datagrams are stamped in arrival order; the
    /// tail starts at the first arrival after `head(count)` (at least one) had come, and
    /// covers it and every later one; with too few arrivals the whole train is the tail.
    pub(crate) fn measure(&self) -> Option<Measured> {
        let mut got = self.arrivals.clone();
        got.sort_unstable();
        let (first, _) = *got.first()?;
        let (last, _) = *got.last()?;
        let received = u16::try_from(got.len()).unwrap_or(u16::MAX);
        let h = head(self.count).max(1);
        let (from, before) = got.get(h as usize).map_or((first, 0), |&(t, _)| (t, h));
        let last_came = got.iter().any(|&(_, seq)| seq + 1 >= self.count);
        Some(Measured {
            received,
            spread: received - before,
            span: last - from,
            at: if last_came { last } else { last + TRAIN_IDLE },
        })
    }
}

/// The trains in flight, by slot (slots are reused once a train is reported).
#[derive(Clone, Debug, Default)]
pub(crate) struct Flights {
    slots: Vec<Option<Flight>>,
    free: Vec<usize>,
}

impl Flights {
    /// Adds a train; returns its slot.
    pub(crate) fn open(&mut self, f: Flight) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(f);
                i
            }
            None => {
                self.slots.push(Some(f));
                self.slots.len() - 1
            }
        }
    }

    /// The train in `slot`, if any.
    pub(crate) fn get_mut(&mut self, slot: usize) -> Option<&mut Flight> {
        self.slots.get_mut(slot)?.as_mut()
    }

    /// Removes and returns the train in `slot`.
    pub(crate) fn close(&mut self, slot: usize) -> Option<Flight> {
        let f = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        Some(f)
    }
}
