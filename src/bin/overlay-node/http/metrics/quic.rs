//! What QUIC put on the wire for the peer connections: datagrams each way, frames sent by
//! type, packets lost.

use super::Out;
use overlay::QuicCounters;

/// The QUIC counters of `q` as three families.
pub(super) fn counters(o: &mut Out, q: &QuicCounters) {
    let datagrams = "overlay_quic_datagrams_total";
    o.family(
        datagrams,
        "counter",
        "UDP datagrams QUIC sent and received on the peer connections.",
    );
    o.sample(
        datagrams,
        &[("direction", "out")],
        &q.datagrams_sent.to_string(),
    );
    o.sample(
        datagrams,
        &[("direction", "in")],
        &q.datagrams_received.to_string(),
    );
    let frames = "overlay_quic_frames_sent_total";
    o.family(
        frames,
        "counter",
        "Frames QUIC sent on the peer connections: acknowledgements, PINGs (keep-alives, \
         loss probes) and STREAM frames (the overlay's messages and data).",
    );
    for (kind, n) in [
        ("ack", q.ack_frames_sent),
        ("ping", q.ping_frames_sent),
        ("stream", q.stream_frames_sent),
    ] {
        o.sample(frames, &[("kind", kind)], &n.to_string());
    }
    let lost = "overlay_quic_packets_lost_total";
    o.family(
        lost,
        "counter",
        "Packets QUIC declared lost on the peer connections.",
    );
    o.sample(lost, &[], &q.packets_lost.to_string());
}
