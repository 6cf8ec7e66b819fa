//! The steady window of the real-QUIC run: what the nodes send right after convergence,
//! as frames by kind (what the simulator's overhead figures count) and as datagrams on
//! the emulated network (QUIC's headers and acknowledgements included).

use crate::local::LocalOverlay;
use crate::net::emulated::LatencyMap;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Per node, per second of the topology's time, over one window.
#[derive(Clone, Debug, Default)]
pub struct SteadyTraffic {
    /// The window, in the topology's time.
    pub window: Duration,
    /// Frame bytes the nodes handed to their connections, bandwidth probes left out:
    /// the simulator's measure (payload only).
    pub frame_bytes: f64,
    /// Frame bytes by kind (`probe`, `advert`, `membership`...), bandwidth probes in
    /// `bandwidth`.
    pub by_kind: BTreeMap<String, f64>,
    /// UDP payload bytes the nodes' sockets sent: every QUIC packet whole (headers,
    /// acknowledgements, every frame, bandwidth probes too), IP and UDP headers not.
    pub wire_bytes: f64,
    /// Datagrams the nodes' sockets sent.
    pub wire_datagrams: f64,
}

impl SteadyTraffic {
    /// One line for a person: the window, frame bytes by kind, and the wire.
    pub fn line(&self) -> String {
        let kinds: Vec<String> = (self.by_kind.iter())
            .map(|(k, b)| format!("{k} {b:.0}"))
            .collect();
        format!(
            "quic: steady control traffic over {:.0} s after convergence, per node per second of the topology's time: {:.0} B of frames (bandwidth probes left out; {}), {:.0} B in {:.1} datagrams on the wire (QUIC headers and acks included)",
            self.window.as_secs_f64(),
            self.frame_bytes,
            kinds.join(", "),
            self.wire_bytes,
            self.wire_datagrams
        )
    }
}

/// What the nodes' counters and the network's say at one moment.
struct Counts {
    frame_bytes: u64,
    by_kind: BTreeMap<String, u64>,
    wire: (u64, u64),
    nodes: usize,
}

async fn counts(overlay: &LocalOverlay, map: &LatencyMap) -> Counts {
    let mut c = Counts {
        frame_bytes: 0,
        by_kind: BTreeMap::new(),
        wire: map.sent(),
        nodes: 0,
    };
    for node in &overlay.nodes {
        if let Ok(s) = node.status().await {
            c.frame_bytes += s.bytes_out.saturating_sub(s.probe_bytes_sent);
            for k in &s.traffic {
                *c.by_kind.entry(k.kind.clone()).or_default() += k.bytes_out;
            }
            c.nodes += 1;
        }
    }
    c
}

/// Measures `window` of wall time; `dilation` turns wall seconds into the topology's (the
/// protocol's clocks run that many times slower, so a wall second holds that many fewer
/// of the topology's seconds' worth of traffic).
pub(super) async fn measure(
    overlay: &LocalOverlay,
    map: &LatencyMap,
    window: Duration,
    dilation: u32,
) -> SteadyTraffic {
    let before = counts(overlay, map).await;
    let t = Instant::now();
    tokio::time::sleep(window).await;
    let after = counts(overlay, map).await;
    let topology_s = t.elapsed().as_secs_f64() / f64::from(dilation.max(1));
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / topology_s / after.nodes.max(1) as f64;
    SteadyTraffic {
        window: window / dilation.max(1),
        frame_bytes: per(after.frame_bytes, before.frame_bytes),
        by_kind: (after.by_kind.iter())
            .map(|(k, &b)| {
                (
                    k.clone(),
                    per(b, before.by_kind.get(k).copied().unwrap_or(0)),
                )
            })
            .filter(|(_, b)| *b > 0.0)
            .collect(),
        wire_bytes: per(after.wire.0, before.wire.0),
        wire_datagrams: per(after.wire.1, before.wire.1),
    }
}
