//! Packet trains: the datagrams the core asks a peer for to measure the bandwidth of the
//! path from it ([`crate::proto::Message::TrainRequest`]).
//!
//! The sender hands `packets` QUIC datagrams to its connection back to back; the narrowest
//! link on the way spreads them out, and the receiver, which stamps each one as it reads
//! it, reports the spread of the train's tail ([`Arrived`]) to the core, which turns it
//! into a rate. Only the tail: a token-bucket shaper on the way (a router's htb, a
//! provider's policer) lets the head of a burst through at line rate before it holds the
//! rest to its rate, so the first third of the train is skipped (measured on the netns
//! testbed's htb: the whole train read 15-19 % above the shaped rate). Datagrams are
//! unreliable: a lost one only shortens the train, and a train whose last datagram never
//! comes is reported once no datagram came for [`TRAIN_IDLE`].
//!
//! A stamp is taken when this task reads the datagram, never before it arrived, and late
//! when the task waited for a CPU: the datagrams that came meanwhile are read in one burst.
//! A late first stamp shortens the span and reads the link faster than it is (a clean CI
//! run once read UvA->VU at 47 Mbit/s where 28 were emulated), a late last one slower. So
//! the span runs between the stamps that were on time as far as the stamps can tell: from
//! a start in the first half of the tail to an end in the second, the end whose slowest
//! start reads fastest, leaving out an end whose slowest start was read together with the
//! next datagram: that start was late too ([`tail_span`]).
//!
//! Layout of one datagram: a magic byte, the train id (u32), this datagram's index and the
//! train's length (u16 each), all big-endian, then padding up to the size asked for.

use super::link::LinkInput;
use crate::proto::NodeId;
use bytes::{BufMut, Bytes, BytesMut};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::debug;

/// First byte of every train datagram (nothing else is sent as a datagram).
const MAGIC: u8 = 0x7B;
/// Header bytes before the padding.
const HEADER: usize = 9;
/// A train whose last datagram has not come after this long without any datagram is
/// reported as it is.
pub const TRAIN_IDLE: Duration = Duration::from_millis(500);

/// A train as it arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrived {
    /// The id the core gave it.
    pub id: u32,
    /// Datagrams that came.
    pub received: u16,
    /// Bytes per datagram.
    pub size: u16,
    /// Datagrams the span covers: the tail of the train (all of it if too few came).
    pub spread: u16,
    /// From the first arrival of the tail to the last arrival.
    pub span: Duration,
}

/// Datagrams at the head of a train of `count` left out of the measured spread.
pub fn head(count: u16) -> u16 {
    count / 3
}

/// Sends a train of `packets` datagrams of `size` bytes (at most what the path carries)
/// to the peer of `conn`. Returns the datagrams handed to the connection.
pub fn send(conn: &quinn::Connection, id: u32, packets: u16, size: u16) -> u16 {
    let Some(max) = conn.max_datagram_size() else {
        debug!("peer does not take datagrams: no train");
        return 0;
    };
    let size = (size as usize).min(max).max(HEADER);
    let mut sent = 0;
    for seq in 0..packets {
        let mut b = BytesMut::with_capacity(size);
        b.put_u8(MAGIC);
        b.put_u32(id);
        b.put_u16(seq);
        b.put_u16(packets);
        b.resize(size, 0);
        if conn.send_datagram(b.freeze()).is_err() {
            break;
        }
        sent += 1;
    }
    sent
}

/// One datagram's header, if it is a train datagram.
fn parse(d: &Bytes) -> Option<(u32, u16, u16)> {
    if d.len() < HEADER || d[0] != MAGIC {
        return None;
    }
    let id = u32::from_be_bytes(d[1..5].try_into().ok()?);
    let seq = u16::from_be_bytes(d[5..7].try_into().ok()?);
    let count = u16::from_be_bytes(d[7..9].try_into().ok()?);
    Some((id, seq, count))
}

/// Most tail stamps kept per train: a peer's header could claim any length, and the
/// trains this crate asks for are far shorter.
const MAX_STAMPS: usize = 256;

/// The train being received.
struct Current {
    id: u32,
    count: u16,
    received: u16,
    size: u16,
    first: Instant,
    last: Instant,
    /// How many had come before the tail, once it began.
    tail: Option<u16>,
    /// When the tail's datagrams were read, from its first (at most [`MAX_STAMPS`]).
    stamps: Vec<Instant>,
}

impl Current {
    fn arrived(&self) -> Arrived {
        let (spread, span) = match self.tail {
            Some(before) => tail_span(&self.stamps, self.last, self.received - before),
            None => (self.received, self.last - self.first),
        };
        Arrived {
            id: self.id,
            received: self.received,
            size: self.size,
            spread,
            span,
        }
    }
}

/// The spread and span measured of a tail of `count` datagrams, read at `stamps` from its
/// first (all of them, or as many as were kept) and at `last` for the last: the window,
/// from a start in the first half of the tail to an end in the second, at least two gaps
/// long, whose end gives the fastest of the slowest rates its starts give. A stamp is
/// never early, only late: a late start reads faster and a late end slower, so the slowest
/// start and the fastest end are stamps that were on time (see the module docs). Ties keep
/// the longer window. An end whose slowest start was read together with the datagram after
/// it is skipped (that start was late); when every end is, the span is zero: the train
/// measured nothing.
fn tail_span(stamps: &[Instant], last: Instant, count: u16) -> (u16, Duration) {
    let n = count as usize;
    let Some(&first) = stamps.first() else {
        return (count, Duration::ZERO);
    };
    let whole = (count, last.saturating_duration_since(first));
    if n < 3 {
        return whole;
    }
    let half = (n - 1) / 2;
    let stamp = |k: usize| {
        if k == n - 1 {
            Some(last)
        } else {
            stamps.get(k).copied()
        }
    };
    // Rate of a window, compared without dividing: `a` is slower than `b`.
    let slower = |a: (u16, Duration), b: (u16, Duration)| {
        a.1.as_nanos() * (b.0 as u128 - 1) > b.1.as_nanos() * (a.0 as u128 - 1)
    };
    // A start read together with the datagram after it (a quarter of the window's mean gap
    // apart or less) was late for sure: an end whose slowest start is such a one had no
    // start on time to measure from, and reads the link too fast (a reader that stalled
    // over the first half of a tail of sixteen read it twice as fast from the first end).
    let together = |i: usize, w: (u16, Duration)| {
        let gap = w.1 / (w.0 as u32 - 1);
        match (stamps.get(i), stamp(i + 1)) {
            (Some(a), Some(b)) => b.saturating_duration_since(*a) * 4 <= gap,
            _ => false,
        }
    };
    let mut fastest: Option<(u16, Duration)> = None;
    for j in (n - 1 - half..n).rev() {
        let Some(end) = stamp(j).filter(|_| j >= 2) else {
            continue;
        };
        let mut slowest: Option<((u16, Duration), usize)> = None;
        for i in 0..=half.min(j - 2) {
            let Some(start) = stamps.get(i) else { break };
            let w = ((j - i + 1) as u16, end.saturating_duration_since(*start));
            if slowest.is_none_or(|(s, _)| slower(w, s)) {
                slowest = Some((w, i));
            }
        }
        if let Some((w, i)) = slowest
            && !together(i, w)
            && fastest.is_none_or(|f| slower(f, w))
        {
            fastest = Some(w);
        }
    }
    // Every end without a start on time: read as too fast to measure, like a burst from a
    // fast LAN (the core asks for a longer train next).
    fastest.unwrap_or((count, Duration::ZERO))
}

/// Reads the datagrams of one connection until it closes, and reports each train.
pub async fn receive(peer: NodeId, conn: quinn::Connection, to_driver: mpsc::Sender<LinkInput>) {
    let mut current: Option<Current> = None;
    loop {
        let next = if current.is_some() {
            tokio::time::timeout(TRAIN_IDLE, conn.read_datagram())
                .await
                .ok()
        } else {
            Some(conn.read_datagram().await)
        };
        let datagram = match next {
            // Idle: the rest of the train is lost.
            None => {
                if let Some(c) = current.take() {
                    report(&to_driver, peer, c.arrived()).await;
                }
                continue;
            }
            Some(Ok(d)) => d,
            Some(Err(_)) => return,
        };
        let at = Instant::now();
        let Some((id, seq, count)) = parse(&datagram) else {
            debug!(%peer, "dropped a datagram that is not part of a train");
            continue;
        };
        if current.as_ref().is_some_and(|c| c.id != id)
            && let Some(c) = current.take()
        {
            report(&to_driver, peer, c.arrived()).await;
        }
        let c = current.get_or_insert(Current {
            id,
            count,
            received: 0,
            size: datagram.len().min(u16::MAX as usize) as u16,
            first: at,
            last: at,
            tail: None,
            stamps: Vec::new(),
        });
        if c.tail.is_none() && c.received >= head(c.count).max(1) {
            c.tail = Some(c.received);
        }
        if c.tail.is_some() && c.stamps.len() < MAX_STAMPS {
            c.stamps.push(at);
        }
        c.received = c.received.saturating_add(1);
        c.last = at;
        if seq + 1 >= c.count
            && let Some(c) = current.take()
        {
            report(&to_driver, peer, c.arrived()).await;
        }
    }
}

async fn report(to_driver: &mpsc::Sender<LinkInput>, peer: NodeId, train: Arrived) {
    let _ = to_driver.send(LinkInput::Train { peer, train }).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_train_datagrams_parse() {
        let mut b = BytesMut::new();
        b.put_u8(MAGIC);
        b.put_u32(7);
        b.put_u16(3);
        b.put_u16(16);
        b.resize(1200, 0);
        assert_eq!(parse(&b.freeze()), Some((7, 3, 16)));
        assert_eq!(parse(&Bytes::from_static(&[MAGIC, 0, 0])), None);
        assert_eq!(parse(&Bytes::from_static(&[0; 20])), None);
    }

    /// Stamps `gap_us` apart, the first `late` of them read together with the next.
    fn stamps(count: usize, gap_us: u64, late: usize) -> (Vec<Instant>, Instant) {
        let t0 = Instant::now();
        let at: Vec<Instant> = (0..count)
            .map(|i| t0 + Duration::from_micros(gap_us * i.max(late) as u64))
            .collect();
        let last = *at.last().expect("some");
        (at, last)
    }

    /// Stamps `at[from..]` as read together, `by` after the last of them arrived; returns
    /// that instant.
    fn read_late_from(at: &mut [Instant], from: usize, by: Duration) -> Instant {
        let late = *at.last().expect("some") + by;
        for a in &mut at[from..] {
            *a = late;
        }
        late
    }

    #[test]
    fn an_even_tail_is_measured_whole() {
        let (at, last) = stamps(16, 343, 0);
        assert_eq!(
            tail_span(&at, last, 16),
            (16, Duration::from_micros(15 * 343))
        );
    }

    #[test]
    fn a_tail_read_late_at_its_start_is_measured_from_the_first_stamp_on_time() {
        // The reader waited for a CPU: the first six were read together with the seventh.
        // From the first stamp, 15 gaps in 9 gaps' time read the link 1.67 times too fast.
        let (at, last) = stamps(16, 343, 6);
        assert_eq!(
            tail_span(&at, last, 16),
            (10, Duration::from_micros(9 * 343))
        );
    }

    #[test]
    fn a_tail_read_late_at_its_end_is_measured_to_the_last_stamp_on_time() {
        let (mut at, _) = stamps(16, 343, 0);
        // The last four were read together, 2 ms after the last of them arrived.
        let late = read_late_from(&mut at, 12, Duration::from_millis(2));
        assert_eq!(
            tail_span(&at, late, 16),
            (12, Duration::from_micros(11 * 343))
        );
    }

    #[test]
    fn a_late_start_and_a_late_end_together_still_read_the_link() {
        let (mut at, _) = stamps(24, 343, 5);
        let late = read_late_from(&mut at, 20, Duration::from_millis(1));
        let (spread, span) = tail_span(&at, late, 24);
        let gap = span / (spread as u32 - 1);
        assert_eq!(
            gap,
            Duration::from_micros(343),
            "window {spread} over {span:?}"
        );
    }

    #[test]
    fn an_end_whose_every_start_was_read_late_is_skipped() {
        // The first seven of sixteen were read together with the eighth. The first end
        // (the ninth) may only start at the seventh or before, all late: it would read the
        // link twice as fast. The next ends start at the eighth, on time.
        let (at, last) = stamps(16, 343, 7);
        assert_eq!(
            tail_span(&at, last, 16),
            (9, Duration::from_micros(8 * 343))
        );
        // A tail of six, the first three read together with the fourth: no end of the
        // second half has a start on time.
        let (at, last) = stamps(6, 1_000, 3);
        assert_eq!(tail_span(&at, last, 6), (6, Duration::ZERO));
    }

    #[test]
    fn stamps_kept_short_of_the_tail_still_end_at_the_last() {
        let (mut at, last) = stamps(16, 343, 0);
        at.truncate(4);
        assert_eq!(
            tail_span(&at, last, 16),
            (16, Duration::from_micros(15 * 343))
        );
        assert_eq!(tail_span(&[], last, 5), (5, Duration::ZERO));
        assert_eq!(tail_span(&at[..2], last, 2), (2, last - at[0]));
        for n in 3..6 {
            let (at, last) = stamps(n, 343, 0);
            let gaps = n as u64 - 1;
            let want = (n as u16, Duration::from_micros(gaps * 343));
            assert_eq!(tail_span(&at, last, n as u16), want, "{n}");
        }
    }
}
