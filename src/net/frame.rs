//! Framing on QUIC streams: a 4-byte big-endian length, then one encoded [`Packet`]
//! (which starts with the wire version byte). Frames above [`MAX_FRAME_BYTES`] are refused
//! before anything is allocated for them.

use crate::proto::message::MAX_MESSAGE_BYTES;
use crate::proto::{Packet, WireError};

/// Largest frame accepted, length prefix excluded.
pub const MAX_FRAME_BYTES: usize = MAX_MESSAGE_BYTES;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The announced length exceeds the limit; the stream cannot be resynchronised.
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge { len: usize, limit: usize },
    /// The stream ended inside a frame.
    #[error("stream ended inside a frame")]
    Truncated,
    /// The frame's bytes are not a valid packet (the stream stays usable).
    #[error("bad frame: {0}")]
    Wire(#[from] WireError),
    /// Reading failed.
    #[error("read: {0}")]
    Read(#[from] quinn::ReadExactError),
    /// Writing failed.
    #[error("write: {0}")]
    Write(#[from] quinn::WriteError),
}

/// Reads one raw frame. `Ok(None)` when the stream ended cleanly between frames.
pub async fn read_frame(recv: &mut quinn::RecvStream) -> Result<Option<Vec<u8>>, FrameError> {
    let mut len = [0u8; 4];
    match recv.read_exact(&mut len).await {
        Ok(()) => {}
        Err(quinn::ReadExactError::FinishedEarly(0)) => return Ok(None),
        Err(quinn::ReadExactError::FinishedEarly(_)) => return Err(FrameError::Truncated),
        Err(e) => return Err(e.into()),
    }
    let len = frame_len(len)?;
    // Memory follows the bytes that arrived, not the prefix: a peer announcing 1 MiB on
    // each of its streams and sending nothing more holds almost nothing here.
    let mut body: Vec<u8> = Vec::with_capacity(len.min(FIRST_CHUNK));
    while body.len() < len {
        let chunk = match recv.read_chunk(len - body.len(), true).await {
            Ok(Some(chunk)) => chunk.bytes,
            Ok(None) => return Err(FrameError::Truncated),
            Err(e) => return Err(quinn::ReadExactError::ReadError(e).into()),
        };
        if body.capacity() - body.len() < chunk.len() {
            let want = (body.capacity() * 2).clamp(body.len() + chunk.len(), len);
            body.reserve_exact(want - body.len());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// What a frame's body is first given room for; it grows (doubling, capped at the
/// announced length) as more arrives.
const FIRST_CHUNK: usize = 64 * 1024;

/// The body length a frame's 4-byte prefix announces, refused above [`MAX_FRAME_BYTES`].
/// The one place a prefix is interpreted, so that [`read_frame`] and the fuzz entry
/// points (which have no stream) check it alike.
pub fn frame_len(prefix: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(prefix) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge {
            len,
            limit: MAX_FRAME_BYTES,
        });
    }
    Ok(len)
}

/// Writes one raw frame.
pub async fn write_frame(send: &mut quinn::SendStream, body: &[u8]) -> Result<(), FrameError> {
    if body.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge {
            len: body.len(),
            limit: MAX_FRAME_BYTES,
        });
    }
    send.write_all(&(body.len() as u32).to_be_bytes()).await?;
    send.write_all(body).await?;
    Ok(())
}

/// Appends one frame (length prefix and body) to `buf`, for writing several at once.
pub fn append_frame(buf: &mut Vec<u8>, body: &[u8]) -> Result<(), FrameError> {
    if body.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge {
            len: body.len(),
            limit: MAX_FRAME_BYTES,
        });
    }
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(body);
    Ok(())
}

/// Encodes and writes one packet.
pub async fn write_packet(send: &mut quinn::SendStream, packet: &Packet) -> Result<(), FrameError> {
    let body = packet.encode()?;
    write_frame(send, &body).await
}
