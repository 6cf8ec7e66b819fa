//! A connection's QUIC counters, as the node reports them ([`QuicCounters`]).

use crate::net::view::QuicCounters;

/// What QUIC put on the wire for `conn` so far.
pub(super) fn counters(conn: &quinn::Connection) -> QuicCounters {
    let s = conn.stats();
    QuicCounters {
        datagrams_sent: s.udp_tx.datagrams,
        datagrams_received: s.udp_rx.datagrams,
        ack_frames_sent: s.frame_tx.acks,
        ping_frames_sent: s.frame_tx.ping,
        stream_frames_sent: s.frame_tx.stream,
        packets_lost: s.path.lost_packets,
    }
}
