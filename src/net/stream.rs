//! The data plane: large broadcast payloads travel beside the control messages, on a QUIC
//! stream of their own per hop, and are forwarded as they arrive (pipelined).
//!
//! Whenever the core sends a [`DownBody::Stream`] to a peer (to a child, or directly on a
//! retry), the driver opens a unidirectional stream to it whose first frame is a
//! [`Packet::Data`] header and whose rest is the payload, copied from this node's buffer
//! for the operation as fast as it fills and as QUIC flow control lets it. A node keeps one
//! buffer per operation: the payload itself, which it needs to deliver anyway, so memory per
//! in-flight message is its size plus one chunk per child being served. A receiver hashes
//! the bytes as they come and tells the core ([`Command::StreamDone`]) once all arrived and
//! the SHA-256 matches; a second stream for a payload already arriving or complete (a node
//! reached twice) is stopped at once.
//!
//! [`Forwarding::StoreAndForward`] turns pipelining off: a relay opens its children's
//! streams only once the whole payload is in and its SHA-256 matched, so every hop adds a
//! full transfer time. It exists to measure what pipelining gains (`bench large`); the
//! default is [`Forwarding::Pipelined`].
//!
//! [`DownBody::Stream`]: crate::proto::DownBody::Stream
//! [`Command::StreamDone`]: crate::proto::Command::StreamDone

use super::frame::write_frame;
use super::link::{LinkContext, LinkInput};
use super::pace::{PACED_CHUNK, Pace};
use crate::proto::collective::MAX_STREAM_PAYLOAD;
use crate::proto::{DataHeader, NodeId, OpId, Packet};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{debug, warn};

/// Bytes copied per write.
const CHUNK: usize = 256 * 1024;
/// Buffers are dropped this long after their payload arrived or failed, or after they were
/// made if nothing ever arrived (retries are over by then). A buffer still receiving is
/// kept however long the transfer takes: a large payload on a slow link can take minutes.
const KEEP: Duration = Duration::from_secs(120);
/// Stream stop/reset code: "already have it" or "gave up".
const STOP_DUPLICATE: u32 = 1;
const RESET_FAILED: u32 = 2;

/// When a relay passes a streamed payload on to its children.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Forwarding {
    /// Every chunk as soon as it arrives (the default): a payload crosses a chain of hops in
    /// about the time of the slowest hop, not the sum of them.
    #[default]
    Pipelined,
    /// Only once all of it arrived and its SHA-256 matched: each hop adds the payload's
    /// whole transfer time. For comparison; nothing is gained by it in normal use.
    StoreAndForward,
}

impl Forwarding {
    /// A short name for tables: `pipelined` or `store-and-forward`.
    pub fn name(self) -> &'static str {
        match self {
            Forwarding::Pipelined => "pipelined",
            Forwarding::StoreAndForward => "store-and-forward",
        }
    }
}

/// How far a buffer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    /// This many bytes are in.
    Filled(u64),
    /// All bytes are in and checked.
    Done,
    /// The incoming stream broke or the bytes did not match the digest.
    Failed,
}

struct State {
    data: Vec<u8>,
    complete: Option<Bytes>,
    receiving: bool,
    /// Who the payload is coming in from, while `receiving`.
    from: Option<NodeId>,
    /// Done with: delivered here, or (the root's own) its operation reported. Only such a
    /// payload may be dropped for the byte bound.
    done_with: bool,
    /// [`KEEP`] counts from here: creation, the end of the last transfer in, or (the root's
    /// own payload) the operation's deadline.
    keep_from: Instant,
}

/// One operation's payload at this node.
struct Buf {
    len: u64,
    digest: [u8; 32],
    /// The pace of its streams to children (a tree of a striped broadcast at its root).
    pace: Option<Arc<Pace>>,
    state: Mutex<State>,
    progress: watch::Sender<Progress>,
}

impl Buf {
    fn new(len: u64, digest: [u8; 32], complete: Option<Bytes>) -> Arc<Buf> {
        let done = complete.is_some();
        Arc::new(Buf {
            len,
            digest,
            pace: None,
            state: Mutex::new(State {
                data: Vec::new(),
                complete,
                receiving: false,
                from: None,
                done_with: false,
                keep_from: Instant::now(),
            }),
            progress: watch::channel(if done {
                Progress::Done
            } else {
                Progress::Filled(0)
            })
            .0,
        })
    }

    fn failed(&self) -> bool {
        *self.progress.borrow() == Progress::Failed
    }

    /// Up to `max` bytes from `at`, if they are in.
    fn read(&self, at: u64, max: usize) -> Option<Bytes> {
        let state = self.state.lock().expect("not poisoned");
        let end = |have: u64| (at + max as u64).min(have);
        if let Some(c) = &state.complete {
            return (at < c.len() as u64)
                .then(|| c.slice(at as usize..end(c.len() as u64) as usize));
        }
        let have = state.data.len() as u64;
        (at < have).then(|| Bytes::copy_from_slice(&state.data[at as usize..end(have) as usize]))
    }
}

/// Every payload this node holds, by operation.
#[derive(Default)]
pub struct Streams {
    bufs: HashMap<OpId, Arc<Buf>>,
    /// Operations whose payload was dropped for the byte bound, oldest first.
    evicted: std::collections::VecDeque<OpId>,
    forwarding: Forwarding,
    /// Data streams in flight, in or out (the node is moving bulk data while above zero).
    in_flight: Arc<AtomicUsize>,
}

/// Counts one data stream in flight for as long as it lives.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(count: &Arc<AtomicUsize>) -> InFlight {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Streams {
    /// No payloads yet; streams to children are forwarded as `forwarding` says.
    pub fn new(forwarding: Forwarding) -> Streams {
        Streams {
            bufs: HashMap::new(),
            evicted: std::collections::VecDeque::new(),
            forwarding,
            in_flight: Arc::default(),
        }
    }

    /// Whether a data stream is moving bytes in or out of this node.
    pub fn moving(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
    }

    /// Changes how streams opened from now on are forwarded (those running keep theirs).
    pub fn set_forwarding(&mut self, forwarding: Forwarding) {
        self.forwarding = forwarding;
    }

    /// The root's own payload, complete from the start; kept until `KEEP` after
    /// `timeout`, the operation's deadline, since the root may retry until then. Its
    /// streams to children go at `pace` if given.
    pub fn insert_complete(
        &mut self,
        op: OpId,
        payload: Bytes,
        digest: [u8; 32],
        timeout: Duration,
        pace: Option<Arc<Pace>>,
    ) {
        let len = payload.len() as u64;
        let mut buf = Buf::new(len, digest, Some(payload));
        Arc::get_mut(&mut buf).expect("just made").pace = pace;
        if let Some(deadline) = Instant::now().checked_add(timeout) {
            buf.state.lock().expect("not poisoned").keep_from = deadline;
        }
        self.bufs.insert(op, buf);
    }

    /// Marks `op`'s payload done with (delivered, or the root's operation reported): it
    /// may now be dropped for the byte bound, and a root's own counts `KEEP` from now.
    pub fn done_with(&mut self, op: OpId) {
        if let Some(b) = self.bufs.get(&op) {
            let mut st = b.state.lock().expect("not poisoned");
            st.done_with = true;
            st.keep_from = st.keep_from.min(Instant::now());
        }
    }

    /// The whole payload of `op`, once it is here.
    pub fn payload(&self, op: OpId) -> Option<Bytes> {
        let b = self.bufs.get(&op)?;
        b.state.lock().expect("not poisoned").complete.clone()
    }

    /// The core sent `to` a [`crate::proto::DownBody::Stream`]: stream the payload beside it.
    pub fn forward(
        &mut self,
        conn: quinn::Connection,
        to: NodeId,
        op: OpId,
        len: u64,
        digest: [u8; 32],
    ) {
        if self.evicted.contains(&op) {
            debug!(peer = %to, "no data stream: the payload was dropped for the memory bound");
            return;
        }
        let buf = self
            .bufs
            .entry(op)
            .or_insert_with(|| Buf::new(len, digest, None))
            .clone();
        let header = DataHeader { op, len, digest };
        let forwarding = self.forwarding;
        let in_flight = InFlight::new(&self.in_flight);
        crate::net::spawn_in_span(async move {
            let _in_flight = in_flight;
            if let Err(e) = send(conn, to, header, buf, forwarding).await {
                debug!(peer = %to, error = %e, "data stream stopped");
            }
        });
    }

    /// A peer opened a data stream for `header.op`: receive it unless the payload is
    /// already here or arriving.
    pub fn accept(
        &mut self,
        peer: NodeId,
        header: DataHeader,
        mut recv: quinn::RecvStream,
        ctx: &LinkContext,
    ) {
        if !admissible(&header) {
            warn!(%peer, len = header.len, "data stream larger than the limit refused");
            let _ = recv.stop(RESET_FAILED.into());
            return;
        }
        if self.arriving(&header) {
            let _ = recv.stop(STOP_DUPLICATE.into());
            return;
        }
        if let Err(why) = self.room_for(peer, header.len) {
            // The sender's stream fails; its root retries later or reports us missing.
            if let Some(more) = ctx.guard.frames.allow(peer, Instant::now()) {
                warn!(%peer, len = header.len, more, "data stream refused: {why}");
            }
            let _ = recv.stop(RESET_FAILED.into());
            return;
        }
        let existing = self.bufs.get(&header.op).cloned();
        let buf = match existing {
            Some(b) if b.len == header.len && b.digest == header.digest && !b.failed() => {
                let mut st = b.state.lock().expect("not poisoned");
                if st.receiving || st.complete.is_some() {
                    drop(st);
                    let _ = recv.stop(STOP_DUPLICATE.into());
                    return;
                }
                st.receiving = true;
                st.from = Some(peer);
                drop(st);
                b
            }
            // None yet, a failed attempt, or one announced differently: start afresh.
            _ => {
                let b = Buf::new(header.len, header.digest, None);
                {
                    let mut st = b.state.lock().expect("not poisoned");
                    st.receiving = true;
                    st.from = Some(peer);
                }
                self.bufs.insert(header.op, b.clone());
                b
            }
        };
        let to_driver = ctx.to_driver.clone();
        let in_flight = InFlight::new(&self.in_flight);
        crate::net::spawn_in_span(async move {
            let _in_flight = in_flight;
            let (ok, rate) = match receive(&mut recv, &buf).await {
                Ok(span) => (true, Some((peer, buf.len, span))),
                Err(e) => {
                    debug!(%peer, error = %e, "data stream failed");
                    buf.progress.send_replace(Progress::Failed);
                    let mut st = buf.state.lock().expect("not poisoned");
                    st.receiving = false;
                    st.keep_from = Instant::now();
                    (false, None)
                }
            };
            let _ = to_driver
                .send(LinkInput::StreamDone {
                    op: header.op,
                    ok,
                    rate,
                })
                .await;
        });
    }
}

/// Whether a received data-stream header may be received at all, decided from the header
/// alone: its announced length is capped at [`MAX_STREAM_PAYLOAD`] (the buffer then grows
/// with the bytes that arrive, up to that length).
pub fn admissible(header: &DataHeader) -> bool {
    header.len <= MAX_STREAM_PAYLOAD
}

/// Reads the payload into `buf`, hashing as it comes; returns the time from the first
/// bytes to the last (what the transfer's rate is measured over).
async fn receive(recv: &mut quinn::RecvStream, buf: &Buf) -> Result<Duration, String> {
    let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
    let mut filled = 0u64;
    let mut first: Option<Instant> = None;
    while let Some(chunk) = recv
        .read_chunk(CHUNK, true)
        .await
        .map_err(|e| e.to_string())?
    {
        first.get_or_insert_with(Instant::now);
        filled += chunk.bytes.len() as u64;
        if filled > buf.len {
            return Err(format!("more than the announced {} bytes", buf.len));
        }
        hash.update(&chunk.bytes);
        let mut st = buf.state.lock().expect("not poisoned");
        // Memory follows what arrived, not what the header announced (a header alone,
        // for an operation nobody started, once reserved up to 1 GiB): doubling, capped
        // at the announced length so a complete payload holds no slack.
        if st.data.capacity() - st.data.len() < chunk.bytes.len() {
            let want = (st.data.capacity() * 2).clamp(filled as usize, buf.len as usize);
            let extra = want - st.data.len();
            st.data.reserve_exact(extra);
        }
        st.data.extend_from_slice(&chunk.bytes);
        drop(st);
        buf.progress.send_replace(Progress::Filled(filled));
    }
    if filled != buf.len {
        return Err(format!("{filled} of {} bytes", buf.len));
    }
    if hash.finish().as_ref() != buf.digest {
        return Err("payload does not match its digest".into());
    }
    let mut st = buf.state.lock().expect("not poisoned");
    let data = std::mem::take(&mut st.data);
    st.complete = Some(Bytes::from(data));
    st.receiving = false;
    st.keep_from = Instant::now();
    drop(st);
    buf.progress.send_replace(Progress::Done);
    Ok(first.map_or(Duration::ZERO, |t| t.elapsed()))
}

/// Streams `buf` to a peer as it fills, or once it is complete and checked
/// ([`Forwarding::StoreAndForward`]).
async fn send(
    conn: quinn::Connection,
    to: NodeId,
    header: DataHeader,
    buf: Arc<Buf>,
    forwarding: Forwarding,
) -> Result<(), String> {
    if forwarding == Forwarding::StoreAndForward {
        let mut progress = buf.progress.subscribe();
        loop {
            match *progress.borrow_and_update() {
                Progress::Done => break,
                Progress::Failed => return Err("the incoming stream failed".into()),
                Progress::Filled(_) => {}
            }
            progress
                .changed()
                .await
                .map_err(|_| "buffer dropped".to_string())?;
        }
    }
    let mut out = conn.open_uni().await.map_err(|e| e.to_string())?;
    let frame = Packet::Data(header).encode().map_err(|e| e.to_string())?;
    write_frame(&mut out, &frame)
        .await
        .map_err(|e| e.to_string())?;
    let mut progress = buf.progress.subscribe();
    let mut sent = 0u64;
    while sent < buf.len {
        // Marked seen before reading, so an update after the read wakes the wait below.
        let seen = *progress.borrow_and_update();
        let most = if buf.pace.is_some() {
            PACED_CHUNK
        } else {
            CHUNK
        };
        if let Some(chunk) = buf.read(sent, most) {
            if let Some(pace) = &buf.pace {
                pace.wait(to, chunk.len()).await;
            }
            sent += chunk.len() as u64;
            out.write_chunk(chunk).await.map_err(|e| e.to_string())?;
            continue;
        }
        if seen == Progress::Failed {
            let _ = out.reset(RESET_FAILED.into());
            return Err("the incoming stream failed".into());
        }
        progress
            .changed()
            .await
            .map_err(|_| "buffer dropped".to_string())?;
    }
    out.finish().map_err(|e| e.to_string())?;
    let _ = out.stopped().await;
    Ok(())
}

/// SHA-256 of a payload, as the data plane checks it.
pub fn digest(payload: &[u8]) -> [u8; 32] {
    ring::digest::digest(&ring::digest::SHA256, payload)
        .as_ref()
        .try_into()
        .expect("32 bytes")
}

mod retention;
pub use self::retention::{
    MAX_RECEIVING_BYTES, MAX_RECEIVING_BYTES_PER_PEER, MAX_RECEIVING_PER_PEER,
};

#[cfg(test)]
mod tests;
