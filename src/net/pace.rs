//! Pacing of the data streams of one tree of a striped broadcast at the rate its packing
//! gave it.
//!
//! The trees of a packing share links: VU->UvA, say, carries two trees at the rates the
//! packing split its capacity into. Left to QUIC, trees on one link share it as their
//! connections' congestion control does, whatever the plan said, and a tree that takes
//! more than its share on one link leaves another tree short there, which then carries
//! less everywhere (measured: one tree at 2.9 Mbit/s throughout, the others falling from
//! 1.4 to 0.4). So the root sends each tree's data to each of its children no faster than
//! the tree's planned rate ([`HEADROOM`]), and the relays forward what they get as it
//! comes: every link then carries about what the plan gave it.

use crate::proto::NodeId;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How far above its planned rate a tree is sent. Not above: the packing fills the
/// binding links to their measured capacity, and trees sent faster than planned overflow
/// those links' queues, where losses make some connections back off far more than others
/// (measured on das-4, 16 MiB: at 1.05 and 1.1 some runs fell to 0.65 of the bound, at
/// 1.0 none below 0.86). The estimates run 2-3% under the links' real rates, which is
/// what this gives away.
pub const HEADROOM: f64 = 1.0;
/// Bytes written per paced write: small, so that several trees crossing one link do not
/// land bursts on a router's shallow buffer at once (the netns testbed's fifos hold 50 ms).
pub const PACED_CHUNK: usize = 4 * 1024;
/// Credit a stream may build up while it waits for data, so a pause is not made up
/// for with a burst larger than this.
const BURST: Duration = Duration::from_millis(5);

/// A rate shared by every stream of one tree from this node, one clock per child.
#[derive(Debug)]
pub struct Pace {
    bps: f64,
    next: Mutex<HashMap<NodeId, Instant>>,
}

impl Pace {
    /// A pace of `bps` bits per second (`None` unless finite and above zero).
    pub fn new(bps: f64) -> Option<Pace> {
        (bps.is_finite() && bps > 0.0).then(|| Pace {
            bps,
            next: Mutex::new(HashMap::new()),
        })
    }

    /// The rate, bits per second.
    pub fn bps(&self) -> f64 {
        self.bps
    }

    /// When `bytes` more may leave for `peer`, now counted as sent.
    pub fn reserve(&self, peer: NodeId, bytes: usize, now: Instant) -> Instant {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let earliest = now.checked_sub(BURST).unwrap_or(now);
        let at = next.get(&peer).copied().unwrap_or(now).max(earliest);
        next.insert(
            peer,
            at + Duration::from_secs_f64(bytes as f64 * 8.0 / self.bps),
        );
        at
    }

    /// Waits until `bytes` more may leave for `peer`.
    pub async fn wait(&self, peer: NodeId, bytes: usize) {
        let at = self.reserve(peer, bytes, Instant::now());
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_child_gets_the_rate_and_pauses_are_not_made_up_in_bursts() {
        let pace = Pace::new(8e6).unwrap(); // 1 MB/s
        let (a, b) = (NodeId([1; 16]), NodeId([2; 16]));
        let t0 = Instant::now();
        assert_eq!(pace.reserve(a, 1000, t0), t0);
        assert_eq!(pace.reserve(a, 1000, t0), t0 + Duration::from_millis(1));
        assert_eq!(
            pace.reserve(b, 1000, t0),
            t0,
            "another child has its own clock"
        );
        let later = t0 + Duration::from_secs(1);
        assert_eq!(pace.reserve(a, 1000, later), later - BURST);
        assert!(Pace::new(0.0).is_none() && Pace::new(f64::NAN).is_none());
    }
}
