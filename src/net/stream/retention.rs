//! What the data plane keeps and lets in: payloads kept for retries (for [`KEEP`], and
//! at most [`MAX_KEPT_BYTES`] of those done with), and the streams a peer may have coming
//! in at once.

use super::{DataHeader, KEEP, Streams};
use crate::proto::collective::MAX_STREAM_PAYLOAD;
use crate::proto::{NodeId, OpId};
use std::time::Instant;

/// Bytes of payloads kept past their use (for retries), at most: past it the oldest go
/// first, so back-to-back large broadcasts (a file sent piece by piece) hold a bounded
/// amount, not the whole file for [`KEEP`]. Only a payload that is done with can go: one
/// delivered here, or the root's own once its operation reported. A later retry that
/// would need a payload gone opens no stream, and the root reports that member missing.
pub(super) const MAX_KEPT_BYTES: u64 = 256 << 20;
/// Operations whose payload was dropped for the byte bound, remembered (so a retry opens
/// no stream that could never be fed).
const EVICTED_REMEMBERED: usize = 4096;
/// Data streams one peer may have coming in at once. A relay gets one per operation from
/// its parent, and a striped broadcast one per tree the sender is a parent in, so honest
/// peers stay far below; a member opening streams for operations nobody started is held
/// here.
pub const MAX_RECEIVING_PER_PEER: usize = 32;
/// Bytes announced by one peer's streams coming in at once (a buffer grows to its
/// announced length): two of the largest payloads.
pub const MAX_RECEIVING_BYTES_PER_PEER: u64 = 2 * MAX_STREAM_PAYLOAD;
/// Bytes announced by all peers' streams coming in at once.
pub const MAX_RECEIVING_BYTES: u64 = 4 * MAX_STREAM_PAYLOAD;

impl Streams {
    /// Whether this payload is already here or coming in.
    pub(super) fn arriving(&self, header: &DataHeader) -> bool {
        self.bufs.get(&header.op).is_some_and(|b| {
            let st = b.state.lock().expect("not poisoned");
            b.len == header.len
                && b.digest == header.digest
                && !b.failed()
                && (st.receiving || st.complete.is_some())
        })
    }

    /// Whether a stream of `len` bytes from `peer` fits under the limits on streams
    /// coming in (per peer: [`MAX_RECEIVING_PER_PEER`], [`MAX_RECEIVING_BYTES_PER_PEER`];
    /// in all: [`MAX_RECEIVING_BYTES`]); else why not.
    pub(super) fn room_for(&self, peer: NodeId, len: u64) -> Result<(), &'static str> {
        let (mut streams, mut bytes, mut total) = (0usize, 0u64, 0u64);
        for b in self.bufs.values() {
            let st = b.state.lock().expect("not poisoned");
            if !st.receiving {
                continue;
            }
            total += b.len;
            if st.from == Some(peer) {
                streams += 1;
                bytes += b.len;
            }
        }
        if streams >= MAX_RECEIVING_PER_PEER {
            return Err("too many streams from this peer at once");
        }
        if bytes + len > MAX_RECEIVING_BYTES_PER_PEER {
            return Err("too many bytes announced by this peer at once");
        }
        if total + len > MAX_RECEIVING_BYTES {
            return Err("too many bytes coming in at once");
        }
        Ok(())
    }

    /// Drops buffers old enough that no retry can need them, then the oldest kept ones
    /// while they hold more than `MAX_KEPT_BYTES`; never one still receiving.
    pub fn prune(&mut self) {
        let mut kept: Vec<(Instant, u64, OpId)> = Vec::new();
        self.bufs.retain(|op, b| {
            let st = b.state.lock().expect("not poisoned");
            // `elapsed` of an instant still to come is zero: the root's payload stays.
            let keep = st.receiving || st.keep_from.elapsed() < KEEP;
            if keep && st.done_with && !st.receiving && st.complete.is_some() {
                kept.push((st.keep_from, b.len, *op));
            }
            keep
        });
        let mut total: u64 = kept.iter().map(|&(_, len, _)| len).sum();
        if total <= MAX_KEPT_BYTES {
            return;
        }
        kept.sort_unstable_by_key(|&(from, _, _)| from);
        for (_, len, op) in kept {
            if total <= MAX_KEPT_BYTES {
                break;
            }
            self.bufs.remove(&op);
            if self.evicted.len() == EVICTED_REMEMBERED {
                self.evicted.pop_front();
            }
            self.evicted.push_back(op);
            total -= len;
        }
    }
}
