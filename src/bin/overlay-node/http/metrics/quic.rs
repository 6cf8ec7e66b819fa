//! What QUIC put on the wire for the peer connections (datagrams each way, frames sent by
//! type, packets lost), and how those connections came and went.

use super::Out;
use overlay::{LinkCounters, QuicCounters};

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

/// How the peer connections came and went, as two families.
pub(super) fn links(o: &mut Out, l: &LinkCounters) {
    let opened = "overlay_links_opened_by_total";
    o.family(
        opened,
        "counter",
        "Admitted peer connections by who opened them and why: dialed for protocol \
         traffic, dialed for a one-off measurement, accepted.",
    );
    for (how, n) in [
        ("dialed", l.dialed.saturating_sub(l.measure_dialed)),
        ("dialed_to_measure", l.measure_dialed),
        ("accepted", l.accepted),
    ] {
        o.sample(opened, &[("how", how)], &n.to_string());
    }
    let closed = "overlay_links_closed_total";
    o.family(
        closed,
        "counter",
        "Peer connections closed: by this node for idleness (protocol links and \
         measurement-only ones), by the peer for idleness, otherwise.",
    );
    for (why, n) in [
        ("idle", l.closed_idle.saturating_sub(l.closed_idle_measure)),
        ("idle_measure", l.closed_idle_measure),
        ("idle_by_peer", l.closed_idle_by_peer),
        ("other", l.closed_otherwise),
    ] {
        o.sample(closed, &[("why", why)], &n.to_string());
    }
}
