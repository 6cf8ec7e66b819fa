//! Packet trains: the datagrams the core asks a peer for to measure the bandwidth of the
//! path from it ([`crate::proto::Message::TrainRequest`]).
//!
//! The sender hands `packets` QUIC datagrams to its connection back to back; the narrowest
//! link on the way spreads them out, and the receiver, which stamps each one as it reads
//! it, reports the spread of the train's tail ([`Arrived`]) to the core, which turns it
//! into a rate. Only the tail: a token-bucket shaper on the way (a router's htb, a
//! provider's policer) lets the head of a burst through at line rate before it holds the
//! rest to its rate, so the first third of the train is skipped (measured on the netns
//! testbed's htb: the whole train read 15-19 % above the shaped rate). Datagrams are unreliable: a lost one only shortens the train, and a
//! train whose last datagram never comes is reported once no datagram came for
//! [`TRAIN_IDLE`].
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

/// The train being received.
struct Current {
    id: u32,
    count: u16,
    received: u16,
    size: u16,
    first: Instant,
    last: Instant,
    /// The first arrival of the tail, and how many had come before it.
    tail: Option<(Instant, u16)>,
}

impl Current {
    fn arrived(&self) -> Arrived {
        let (from, before) = self.tail.unwrap_or((self.first, 0));
        Arrived {
            id: self.id,
            received: self.received,
            size: self.size,
            spread: self.received - before,
            span: self.last - from,
        }
    }
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
        });
        if c.tail.is_none() && c.received >= head(c.count).max(1) {
            c.tail = Some((at, c.received));
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
}
