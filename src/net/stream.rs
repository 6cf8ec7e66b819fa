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
//! [`DownBody::Stream`]: crate::proto::DownBody::Stream
//! [`Command::StreamDone`]: crate::proto::Command::StreamDone

use super::frame::write_frame;
use super::link::{LinkContext, LinkInput};
use crate::proto::collective::MAX_STREAM_PAYLOAD;
use crate::proto::{DataHeader, NodeId, OpId, Packet};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{debug, warn};

/// Bytes copied per write.
const CHUNK: usize = 256 * 1024;
/// Buffers are dropped this long after they were made (retries are over by then).
const KEEP: Duration = Duration::from_secs(120);
/// Stream stop/reset code: "already have it" or "gave up".
const STOP_DUPLICATE: u32 = 1;
const RESET_FAILED: u32 = 2;

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
}

/// One operation's payload at this node.
struct Buf {
    len: u64,
    digest: [u8; 32],
    state: Mutex<State>,
    progress: watch::Sender<Progress>,
    created: Instant,
}

impl Buf {
    fn new(len: u64, digest: [u8; 32], complete: Option<Bytes>) -> Arc<Buf> {
        let done = complete.is_some();
        Arc::new(Buf {
            len,
            digest,
            state: Mutex::new(State {
                data: Vec::new(),
                complete,
                receiving: false,
            }),
            progress: watch::channel(if done {
                Progress::Done
            } else {
                Progress::Filled(0)
            })
            .0,
            created: Instant::now(),
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
}

impl Streams {
    /// The root's own payload, complete from the start.
    pub fn insert_complete(&mut self, op: OpId, payload: Bytes, digest: [u8; 32]) {
        let len = payload.len() as u64;
        self.bufs.insert(op, Buf::new(len, digest, Some(payload)));
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
        let buf = self
            .bufs
            .entry(op)
            .or_insert_with(|| Buf::new(len, digest, None))
            .clone();
        let header = DataHeader { op, len, digest };
        tokio::spawn(async move {
            if let Err(e) = send(conn, header, buf).await {
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
        if header.len > MAX_STREAM_PAYLOAD {
            warn!(%peer, len = header.len, "data stream larger than the limit refused");
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
                drop(st);
                b
            }
            // None yet, a failed attempt, or one announced differently: start afresh.
            _ => {
                let b = Buf::new(header.len, header.digest, None);
                b.state.lock().expect("not poisoned").receiving = true;
                self.bufs.insert(header.op, b.clone());
                b
            }
        };
        let to_driver = ctx.to_driver.clone();
        tokio::spawn(async move {
            let ok = match receive(&mut recv, &buf).await {
                Ok(()) => true,
                Err(e) => {
                    debug!(%peer, error = %e, "data stream failed");
                    buf.progress.send_replace(Progress::Failed);
                    buf.state.lock().expect("not poisoned").receiving = false;
                    false
                }
            };
            let _ = to_driver.send(LinkInput::StreamDone { op: header.op, ok });
        });
    }

    /// Drops buffers old enough that no retry can need them.
    pub fn prune(&mut self) {
        self.bufs.retain(|_, b| b.created.elapsed() < KEEP);
    }
}

/// Reads the payload into `buf`, hashing as it comes.
async fn receive(recv: &mut quinn::RecvStream, buf: &Buf) -> Result<(), String> {
    let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
    buf.state
        .lock()
        .expect("not poisoned")
        .data
        .reserve_exact(buf.len as usize);
    let mut filled = 0u64;
    while let Some(chunk) = recv
        .read_chunk(CHUNK, true)
        .await
        .map_err(|e| e.to_string())?
    {
        filled += chunk.bytes.len() as u64;
        if filled > buf.len {
            return Err(format!("more than the announced {} bytes", buf.len));
        }
        hash.update(&chunk.bytes);
        buf.state
            .lock()
            .expect("not poisoned")
            .data
            .extend_from_slice(&chunk.bytes);
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
    drop(st);
    buf.progress.send_replace(Progress::Done);
    Ok(())
}

/// Streams `buf` to a peer as it fills.
async fn send(conn: quinn::Connection, header: DataHeader, buf: Arc<Buf>) -> Result<(), String> {
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
        if let Some(chunk) = buf.read(sent, CHUNK) {
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
