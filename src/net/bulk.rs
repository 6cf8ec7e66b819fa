//! Point-to-point transfers for the large collectives: one QUIC unidirectional stream per
//! transfer, a [`Packet::Bulk`] header then the raw bytes, delivered into a [`Mailbox`]
//! keyed by (operation, sender, tag).
//!
//! The sender is the connection's authenticated peer. A transfer someone already waits
//! for is handed over as soon as its last byte is in; one nobody waits for yet (it came
//! before the receiver reached that step) is kept, up to [`UNCLAIMED_LIMIT`] bytes in all
//! (counted from the header on, before the bytes are read) and for [`KEEP`]; beyond the
//! limit, or for an operation this node has finished, the stream is stopped and the
//! sender sees an error, so a peer cannot grow a node's memory with transfers nobody
//! asked for.

mod activity;

pub use self::activity::Activity;

use super::frame::write_frame;
use crate::proto::{BulkHeader, NodeId, Packet};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tracing::debug;

/// The largest single transfer.
pub const MAX_TRANSFER: u64 = 1 << 30;
/// Bytes of transfers nobody waits for that a node keeps.
pub const UNCLAIMED_LIMIT: usize = 512 << 20;
/// How long a transfer nobody waits for is kept.
pub const KEEP: Duration = Duration::from_secs(120);
/// Stream stop code: "no room" (or "too large").
const STOP_REFUSED: u32 = 3;

/// Who sent what, in which operation.
pub type Key = (u64, NodeId, u32);

enum Slot {
    Waiting(oneshot::Sender<Bytes>),
    Ready { bytes: Bytes, at: Instant },
}

#[derive(Default)]
struct Inner {
    slots: HashMap<Key, Slot>,
    /// Bytes kept or being read for transfers nobody waits for.
    unclaimed: usize,
    /// Operations finished or abandoned, and when: late transfers for them are refused.
    forgotten: HashMap<u64, Instant>,
}

/// Where transfers arrive; shared by a node's connection tasks and its API handles.
#[derive(Default)]
pub struct Mailbox {
    inner: Mutex<Inner>,
    activity: Activity,
}

impl Mailbox {
    /// Transfers in flight either way, and the rates they reached.
    pub fn activity(&self) -> &Activity {
        &self.activity
    }

    /// Hands `bytes` to whoever waits for `key`, or keeps them. False if they were refused
    /// (no room for transfers nobody waits for).
    pub fn post(&self, key: Key, bytes: Bytes) -> bool {
        let mut inner = self.inner.lock().expect("not poisoned");
        let now = Instant::now();
        inner.prune(now);
        if let Some(Slot::Waiting(_)) = inner.slots.get(&key) {
            let Some(Slot::Waiting(tx)) = inner.slots.remove(&key) else {
                unreachable!("just looked");
            };
            // A waiter that gave up (its call was cancelled) leaves nothing to keep.
            let _ = tx.send(bytes);
            return true;
        }
        if inner.unclaimed + bytes.len() > UNCLAIMED_LIMIT {
            return false;
        }
        inner.unclaimed += bytes.len();
        if let Some(Slot::Ready { bytes: old, .. }) =
            inner.slots.insert(key, Slot::Ready { bytes, at: now })
        {
            // A duplicate of the same transfer: the newest is kept.
            inner.unclaimed -= old.len();
        }
        true
    }

    /// Makes room for a transfer of `len` bytes for `key` about to be read: nothing to
    /// reserve if someone waits for it, else `len` counted against the limit until
    /// [`Mailbox::post_reserved`] or [`Mailbox::release`]. `None`: refused (no room, or
    /// its operation is over).
    pub fn reserve(&self, key: &Key, len: u64) -> Option<usize> {
        let mut inner = self.inner.lock().expect("not poisoned");
        inner.prune(Instant::now());
        if inner.forgotten.contains_key(&key.0) {
            return None;
        }
        if matches!(inner.slots.get(key), Some(Slot::Waiting(_))) {
            return Some(0);
        }
        let len = usize::try_from(len).ok()?;
        if inner.unclaimed.checked_add(len)? > UNCLAIMED_LIMIT {
            return None;
        }
        inner.unclaimed += len;
        Some(len)
    }

    /// Posts a transfer read under a reservation of `reserved` bytes.
    pub fn post_reserved(&self, key: Key, bytes: Bytes, reserved: usize) {
        let mut inner = self.inner.lock().expect("not poisoned");
        inner.unclaimed -= reserved;
        if inner.forgotten.contains_key(&key.0) {
            return;
        }
        if let Some(Slot::Waiting(_)) = inner.slots.get(&key) {
            let Some(Slot::Waiting(tx)) = inner.slots.remove(&key) else {
                unreachable!("just looked");
            };
            let _ = tx.send(bytes);
            return;
        }
        // Within the reservation just released, so within the limit.
        inner.unclaimed += bytes.len();
        let old = inner.slots.insert(
            key,
            Slot::Ready {
                bytes,
                at: Instant::now(),
            },
        );
        if let Some(Slot::Ready { bytes: old, .. }) = old {
            inner.unclaimed -= old.len();
        }
    }

    /// Gives back a reservation whose transfer failed.
    pub fn release(&self, reserved: usize) {
        self.inner.lock().expect("not poisoned").unclaimed -= reserved;
    }

    /// The bytes of `key` if they are in, without waiting (and without leaving a waiter).
    pub fn try_take(&self, key: Key) -> Option<Bytes> {
        let mut inner = self.inner.lock().expect("not poisoned");
        match inner.slots.remove(&key) {
            Some(Slot::Ready { bytes, .. }) => {
                inner.unclaimed -= bytes.len();
                Some(bytes)
            }
            Some(waiting) => {
                inner.slots.insert(key, waiting);
                None
            }
            None => None,
        }
    }

    /// The bytes of `key` once they are in.
    pub fn take(&self, key: Key) -> oneshot::Receiver<Bytes> {
        let (tx, rx) = oneshot::channel();
        let mut inner = self.inner.lock().expect("not poisoned");
        match inner.slots.remove(&key) {
            Some(Slot::Ready { bytes, .. }) => {
                inner.unclaimed -= bytes.len();
                let _ = tx.send(bytes);
            }
            _ => {
                inner.slots.insert(key, Slot::Waiting(tx));
            }
        }
        rx
    }

    /// Forgets everything of operation `op` (a finished or abandoned attempt).
    pub fn forget(&self, op: u64) {
        let mut inner = self.inner.lock().expect("not poisoned");
        inner.forgotten.insert(op, Instant::now());
        let mut freed = 0;
        inner.slots.retain(|k, s| {
            if k.0 != op {
                return true;
            }
            if let Slot::Ready { bytes, .. } = s {
                freed += bytes.len();
            }
            false
        });
        inner.unclaimed -= freed;
    }

    /// Bytes kept for transfers nobody waits for yet.
    pub fn unclaimed(&self) -> usize {
        self.inner.lock().expect("not poisoned").unclaimed
    }
}

impl Inner {
    fn prune(&mut self, now: Instant) {
        let mut freed = 0;
        self.slots.retain(|_, s| match s {
            Slot::Ready { bytes, at } if now.duration_since(*at) > KEEP => {
                freed += bytes.len();
                false
            }
            Slot::Waiting(tx) => !tx.is_closed(),
            _ => true,
        });
        self.unclaimed -= freed;
        self.forgotten
            .retain(|_, at| now.duration_since(*at) <= KEEP);
    }
}

/// Whether the transfer a received `header` announces from `peer` is taken, decided from
/// the header alone before any of its bytes are read: `None` when refused (over
/// [`MAX_TRANSFER`], no room, or its operation is over), else the key it is posted under
/// and the bytes reserved for it (see [`Mailbox::reserve`]).
pub fn admit(mailbox: &Mailbox, peer: NodeId, header: &BulkHeader) -> Option<(Key, usize)> {
    if header.len > MAX_TRANSFER {
        return None;
    }
    let key = (header.op, peer, header.tag);
    Some((key, mailbox.reserve(&key, header.len)?))
}

/// Reads a transfer whose header came on `recv` and posts it.
pub async fn receive(
    mailbox: &Mailbox,
    peer: NodeId,
    header: BulkHeader,
    mut recv: quinn::RecvStream,
) {
    let Some((key, reserved)) = admit(mailbox, peer, &header) else {
        debug!(peer = %peer, len = header.len, "refused a transfer: too large, no room, or over");
        let _ = recv.stop(STOP_REFUSED.into());
        return;
    };
    let mut moving = mailbox.activity().receiving(peer);
    match recv.read_to_end(header.len as usize).await {
        Ok(bytes) if bytes.len() as u64 == header.len => {
            moving.arrived(header.len);
            mailbox.post_reserved(key, Bytes::from(bytes), reserved);
        }
        Ok(bytes) => {
            mailbox.release(reserved);
            debug!(peer = %peer, got = bytes.len(), want = header.len, "transfer cut short")
        }
        Err(e) => {
            mailbox.release(reserved);
            debug!(peer = %peer, error = %e, "transfer failed")
        }
    }
}

/// Why a transfer could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The stream could not be opened or written.
    #[error("transfer to {peer}: {reason}")]
    Stream { peer: NodeId, reason: String },
    /// Larger than [`MAX_TRANSFER`].
    #[error("a transfer of {0} bytes is over the limit")]
    TooLarge(u64),
}

/// Sends `bytes` as transfer `tag` of operation `op` on `conn`, returning once the peer
/// has read it all (or the stream failed).
pub async fn send(
    conn: &quinn::Connection,
    peer: NodeId,
    op: u64,
    tag: u32,
    bytes: Bytes,
) -> Result<(), SendError> {
    let len = bytes.len() as u64;
    if len > MAX_TRANSFER {
        return Err(SendError::TooLarge(len));
    }
    let fail = |e: &dyn std::fmt::Display| SendError::Stream {
        peer,
        reason: e.to_string(),
    };
    let mut out = conn.open_uni().await.map_err(|e| fail(&e))?;
    let frame = Packet::Bulk(BulkHeader { op, tag, len })
        .encode()
        .map_err(|e| fail(&e))?;
    write_frame(&mut out, &frame).await.map_err(|e| fail(&e))?;
    out.write_chunk(bytes).await.map_err(|e| fail(&e))?;
    out.finish().map_err(|e| fail(&e))?;
    match out.stopped().await {
        Ok(None) => Ok(()),
        Ok(Some(code)) => Err(fail(&format!("stopped by the peer ({code})"))),
        Err(e) => Err(fail(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(op: u64, tag: u32) -> Key {
        (op, NodeId::from_bytes([2; 16]), tag)
    }

    #[tokio::test]
    async fn posts_meet_their_waiters_in_either_order_and_unclaimed_bytes_are_bounded() {
        let m = Mailbox::default();
        assert!(m.post(key(1, 1), Bytes::from_static(b"early")));
        assert_eq!(m.unclaimed(), 5);
        assert_eq!(
            m.take(key(1, 1)).await.unwrap(),
            Bytes::from_static(b"early")
        );
        assert_eq!(m.unclaimed(), 0);
        let late = m.take(key(1, 2));
        assert!(m.post(key(1, 2), Bytes::from_static(b"late")));
        assert_eq!(late.await.unwrap(), Bytes::from_static(b"late"));
        // Nobody waits: refused beyond the limit.
        let big = Bytes::from(vec![0u8; UNCLAIMED_LIMIT]);
        assert!(m.post(key(2, 1), big));
        assert!(!m.post(key(2, 2), Bytes::from_static(b"x")));
        assert!(m.reserve(&key(2, 3), 1).is_none());
        // A waiter is always served.
        let w = m.take(key(2, 4));
        assert_eq!(m.reserve(&key(2, 4), 1), Some(0));
        assert!(m.post(key(2, 4), Bytes::from_static(b"y")));
        assert!(w.await.is_ok());
        m.forget(2);
        assert_eq!(m.unclaimed(), 0);
        // A reservation counts until posted or released; a forgotten operation takes nothing.
        let r = m.reserve(&key(3, 1), 10).expect("room");
        assert_eq!(m.unclaimed(), 10);
        m.post_reserved(key(3, 1), Bytes::from(vec![1u8; 10]), r);
        assert_eq!(m.unclaimed(), 10);
        let r = m
            .reserve(&key(3, 2), UNCLAIMED_LIMIT as u64 - 10)
            .expect("room");
        assert!(
            m.reserve(&key(3, 3), 1).is_none(),
            "reserved room is not given twice"
        );
        m.release(r);
        assert_eq!(m.unclaimed(), 10);
        assert!(m.reserve(&key(2, 9), 1).is_none(), "operation 2 is over");
    }
}
