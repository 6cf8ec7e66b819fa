//! What arrives for measuring: a peer's request for a train, a train this node asked
//! for, and the rate of a real transfer (see the parent module for what each is for).

use crate::proto::Event;
use crate::proto::core::Core;
use crate::proto::id::NodeId;
use crate::proto::message::MAX_TRAIN_PACKETS;
use std::time::Duration;

use super::TRAIN_DATAGRAM;

/// The shortest spread of a train's tail measured: shorter measures the clock more than
/// the link.
const MIN_SPAN: Duration = Duration::from_micros(200);

impl Core {
    /// A peer asks for a train: sent (by the driver, on [`Event::SendTrain`]) if the
    /// budget allows.
    pub(in crate::proto::core) fn handle_train_request(
        &mut self,
        from: NodeId,
        id: u32,
        packets: u16,
        size: u16,
    ) {
        let packets = packets.min(MAX_TRAIN_PACKETS);
        let size = size.min(TRAIN_DATAGRAM);
        let bytes = packets as f64 * size as f64;
        let rate = self.config.bw_budget as f64;
        if packets == 0 || self.probing.loaded(self.now) || !self.bw.spend(self.now, rate, bytes) {
            self.bw.stats.trains_refused += 1;
            return;
        }
        self.bw.stats.trains_sent += 1;
        self.bw.stats.train_bytes_sent += bytes as u64;
        self.out.event(Event::SendTrain {
            to: from,
            id,
            packets,
            size,
        });
    }

    /// The driver saw a train arrive: `received` datagrams of `size` bytes, the last
    /// `spread` of them over `span`. Only trains this node asked for count.
    pub(in crate::proto::core) fn handle_train(
        &mut self,
        from: NodeId,
        id: u32,
        (received, spread): (u16, u16),
        size: u16,
        span: Duration,
    ) {
        let Some(i) = self
            .bw
            .asked
            .iter()
            .position(|(a, p, _)| *a == id && *p == from)
        else {
            return;
        };
        self.bw.asked.swap_remove(i);
        self.bw.stats.trains_received += 1;
        self.bw.stats.train_bytes_received += received as u64 * size as u64;
        // The spread of n datagrams is n - 1 gaps; too short a spread measures the clock.
        if spread < 3 || spread > received {
            return;
        }
        if span < MIN_SPAN {
            // Whole, but too fast for its length: the next train to that cluster is four
            // times as long (up to the cap). Sized from no estimate, the first train
            // across a 400 Mbit/s LAN (eight datagrams) spans 120 µs, and without this
            // no LAN that fast was ever measured.
            if let Some(name) = self.cluster_name(&from) {
                self.bw.longer.insert(name, received.saturating_mul(4));
            }
            return;
        }
        let bps = (spread - 1) as f64 * size as f64 * 8.0 / span.as_secs_f64();
        let now = self.now;
        // Trains inside this node's cluster are not rechecked: they only size the
        // in-cluster fan-out, and a LAN's train is short and reads noisier.
        let name = self.other_cluster_name(&from);
        let interval = self.config.bw_probe_interval;
        for (peer, bps, replace) in self.bw.judge(now, name, from, bps, interval) {
            self.bw.train(now, peer, bps, replace);
        }
    }

    /// The driver measured a real transfer from `from`: `bytes` in `span`.
    pub(in crate::proto::core) fn handle_transfer_rate(
        &mut self,
        from: NodeId,
        bytes: u64,
        span: Duration,
    ) {
        // Short transfers say more about latency and slow start than about the path.
        if bytes < 256 * 1024 || span.is_zero() || !self.members.is_alive(&from) {
            return;
        }
        let bps = bytes as f64 * 8.0 / span.as_secs_f64();
        let now = self.now;
        let r = self.bw.peers.entry(from).or_default();
        let keep = r.transfer.is_none_or(|(old, at)| {
            bps >= old || now.saturating_since(at) > self.config.bw_probe_interval * 4
        });
        if keep {
            r.transfer = Some((bps, now));
        }
        r.updated = Some(now);
        r.samples = r.samples.saturating_add(1);
        self.bw.stats.transfers_measured += 1;
    }
}
