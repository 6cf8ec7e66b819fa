//! quinn's socket interface for an emulated socket: sends queued for their delay, plain
//! receives, one datagram at a time.

use super::EmulatedUdpSocket;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Instant;

/// Never blocks: sends are queued, so the socket is always writable.
#[derive(Debug)]
struct AlwaysWritable;

impl UdpPoller for AlwaysWritable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncUdpSocket for EmulatedUdpSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(AlwaysWritable)
    }

    /// Queues the datagram(s) of `transmit` for the one-way latency to its destination
    /// (none, logged at debug, if the destination is not registered); never blocks and
    /// never fails: a full queue drops, as a router would.
    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let dest = transmit.destination;
        let from = self.registered;
        // We report one segment per transmit, so quinn does not set `segment_size`; split
        // anyway in case a caller does, so each datagram keeps its own boundary (and is
        // counted as sent, whether or not it arrives).
        let segment = transmit
            .segment_size
            .unwrap_or(transmit.contents.len())
            .max(1);
        for chunk in transmit.contents.chunks(segment) {
            self.map.count_sent(chunk.len());
        }
        if self.map.is_cut(from, dest) {
            return Ok(());
        }
        let (latency, link, known) = match self.map.route(from, dest) {
            Some(r) => (r.latency, r.link, true),
            None => {
                tracing::debug!(%from, %dest, "emulated socket: unknown destination, no delay");
                (Duration::ZERO, None, false)
            }
        };
        let now = Instant::now();
        let mut new_head: Option<Instant> = None;
        let mut dropped = 0usize;
        {
            let mut queue = self.shared.queue();
            for chunk in transmit.contents.chunks(segment) {
                // A destination outside the map passes no pipe either: it is not emulated.
                let left = if known {
                    queue.serialize(now, chunk.len(), link)
                } else {
                    Some(now)
                };
                let Some(left) = left else {
                    dropped += 1;
                    continue;
                };
                let delay = (left - now) + latency;
                match queue.push(now, delay, dest, chunk) {
                    // A new head needs a token; the wire wakes only if it is its earliest.
                    Some(due) if queue.next_due() == Some(due) => new_head = Some(due),
                    Some(_) => {}
                    None => dropped += 1,
                }
            }
        }
        if dropped > 0 {
            tracing::trace!(%dest, dropped, "emulated socket: queue or pipe full, dropped");
        }
        if let Some(due) = new_head
            && let Some(wire) = self.map.wire.get()
        {
            wire.schedule(due, self.shared.clone());
        }
        Ok(())
    }

    /// Plain UDP receive: one datagram per buffer, as many as are ready (up to the batch).
    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let max = bufs.len().min(meta.len());
        if max == 0 {
            return Poll::Ready(Ok(0));
        }
        // Wait for the first datagram (registering the waker), then take what else is ready.
        loop {
            ready!(self.io.poll_recv_ready(cx))?;
            match self.io.try_recv_from(&mut bufs[0]) {
                Ok((len, addr)) => {
                    meta[0] = datagram_meta(len, addr);
                    break;
                }
                // Spurious readiness: readiness is cleared, poll again to re-register.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        let mut n = 1;
        while n < max {
            match self.io.try_recv_from(&mut bufs[n]) {
                Ok((len, addr)) => {
                    meta[n] = datagram_meta(len, addr);
                    n += 1;
                }
                // Deliver what we have; an error other than WouldBlock is reported by the
                // next receive if it persists.
                Err(_) => break,
            }
        }
        Poll::Ready(Ok(n))
    }

    /// The real bound address (what quinn reports as the endpoint's local address).
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    /// One datagram per transmit: no GSO, so every datagram gets its own due time.
    fn max_transmit_segments(&self) -> usize {
        1
    }

    /// One datagram per receive buffer: GRO is not enabled on the socket.
    fn max_receive_segments(&self) -> usize {
        1
    }

    /// The plain socket does not set don't-fragment, so quinn keeps path MTU discovery off
    /// and stays at its initial MTU (1200 bytes): fine for latency, not for peak throughput.
    fn may_fragment(&self) -> bool {
        true
    }
}

/// Metadata of one plain datagram (no GRO, no ECN, no destination-IP control message).
fn datagram_meta(len: usize, addr: SocketAddr) -> RecvMeta {
    RecvMeta {
        addr,
        len,
        stride: len,
        ecn: None,
        dst_ip: None,
    }
}
