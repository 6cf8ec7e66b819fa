//! Reading QUIC's path statistics for saturated windows (see
//! [`crate::proto::Input::PathSaturated`]): every second the driver compares each
//! connection's counters with the last reading. A window in which the connection sent at
//! least [`MIN_WINDOW_BYTES`] and its congestion controller backed off at least once ran
//! the path full, and what it delivered (sent minus lost) is about what the path toward the
//! peer carries. Idle connections say nothing: an idle link is measured by trains only.

use super::Links;
use crate::proto::NodeId;
use std::time::{Duration, Instant};

/// Least a window must have sent to count: fewer bytes measure a burst, not a path.
pub const MIN_WINDOW_BYTES: u64 = 64 * 1024;
/// Shortest window (the driver reads once a second; a reading sooner waits).
const MIN_WINDOW: Duration = Duration::from_millis(500);

/// A connection's counters when last read.
#[derive(Clone, Copy, Debug)]
pub(super) struct PathWindow {
    at: Instant,
    sent: u64,
    lost: u64,
    backoffs: u64,
}

impl PathWindow {
    pub(super) fn start(conn: &quinn::Connection, at: Instant) -> Self {
        let s = conn.stats();
        PathWindow {
            at,
            sent: s.udp_tx.bytes,
            lost: s.path.lost_bytes,
            backoffs: s.path.congestion_events,
        }
    }

    /// The window since the last reading, if it ran the path full: bytes delivered and
    /// over how long. Starts the next window either way (once [`MIN_WINDOW`] is over).
    fn read(&mut self, conn: &quinn::Connection, now: Instant) -> Option<(u64, Duration)> {
        let span = now.saturating_duration_since(self.at);
        if span < MIN_WINDOW {
            return None;
        }
        let was = *self;
        *self = PathWindow::start(conn, now);
        saturated(
            self.sent.saturating_sub(was.sent),
            self.lost.saturating_sub(was.lost),
            self.backoffs.saturating_sub(was.backoffs),
        )
        .map(|delivered| (delivered, span))
    }
}

/// Bytes delivered in a window that sent `sent`, lost `lost` and backed off `backoffs`
/// times, if it ran the path full.
fn saturated(sent: u64, lost: u64, backoffs: u64) -> Option<u64> {
    (sent >= MIN_WINDOW_BYTES && backoffs > 0).then(|| sent.saturating_sub(lost))
}

impl Links {
    /// The connections whose last window ran their path full: (peer, bytes delivered,
    /// over how long).
    pub fn saturated_paths(&mut self, now: Instant) -> Vec<(NodeId, u64, Duration)> {
        self.links
            .iter_mut()
            .filter_map(|(peer, link)| {
                let (bytes, span) = link.path.read(&link.conn, now)?;
                Some((*peer, bytes, span))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_busy_window_that_backed_off_counts() {
        assert_eq!(saturated(400_000, 20_000, 1), Some(380_000));
        assert_eq!(
            saturated(400_000, 0, 0),
            None,
            "no back-off: the path had room"
        );
        assert_eq!(saturated(10_000, 2_000, 3), None, "too little sent to say");
        assert_eq!(
            saturated(MIN_WINDOW_BYTES, 2 * MIN_WINDOW_BYTES, 1),
            Some(0)
        );
    }
}
