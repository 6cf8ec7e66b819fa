//! What QUIC put on the wire for the peer connections (datagrams each way, frames sent by
//! type, packets lost), and how those connections came and went.

use super::Out;
use overlay::{LinkCounters, QuicCounters};

/// The QUIC counters of `q` as three families.
pub(super) fn counters(o: &mut Out, q: &QuicCounters) {
    by_label(
        o,
        "overlay_quic_datagrams_total",
        "UDP datagrams QUIC sent and received on the peer connections.",
        "direction",
        &[("out", q.datagrams_sent), ("in", q.datagrams_received)],
    );
    by_label(
        o,
        "overlay_quic_frames_sent_total",
        "Frames QUIC sent on the peer connections: acknowledgements, PINGs (loss probes; \
         no keep-alives are sent) and STREAM frames (the overlay's messages and data).",
        "kind",
        &[
            ("ack", q.ack_frames_sent),
            ("ping", q.ping_frames_sent),
            ("stream", q.stream_frames_sent),
        ],
    );
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
    by_label(
        o,
        "overlay_links_opened_by_total",
        "Admitted peer connections by who opened them and why: dialed for protocol \
         traffic, dialed for a one-off measurement, accepted.",
        "how",
        &[
            ("dialed", l.dialed.saturating_sub(l.measure_dialed)),
            ("dialed_to_measure", l.measure_dialed),
            ("accepted", l.accepted),
        ],
    );
    by_label(
        o,
        "overlay_links_closed_total",
        "Peer connections closed: by this node for idleness (protocol links and \
         measurement-only ones), by the peer for idleness, otherwise.",
        "why",
        &[
            ("idle", l.closed_idle.saturating_sub(l.closed_idle_measure)),
            ("idle_measure", l.closed_idle_measure),
            ("idle_by_peer", l.closed_idle_by_peer),
            ("other", l.closed_otherwise),
        ],
    );
}

/// One counter family `name` with a sample per value of `label`.
fn by_label(o: &mut Out, name: &str, help: &str, label: &str, samples: &[(&str, u64)]) {
    o.family(name, "counter", help);
    for (value, n) in samples {
        o.sample(name, &[(label, value)], &n.to_string());
    }
}
