//! Large collectives in virtual time: a plan's transfers ([`crate::proto::bulk::dag`])
//! replayed through the simulated network's bandwidth pipes.
//!
//! The same pipes as the simulator's messages (`sim/bandwidth.rs`): the sender's NIC at
//! its cluster's rate, then (between clusters) the shared directed link, then the one-way
//! latency; the receiver's NIC is not modelled. Transfers move in segments of
//! [`SEGMENT`] bytes, each serialized on the NIC and then on the link, so a transfer
//! streams through both as QUIC's packets do; transfers that share a pipe take it first
//! come, first served, each booking all its segments when it becomes ready (QUIC would
//! interleave their packets: the pipe's total time is the same, single transfers finish
//! in another order). Buffers are unbounded: QUIC's
//! congestion control keeps a real sender from overrunning them, and nothing is lost.
//! A transfer leaves once everything it waits for has arrived; the run ends when the
//! last transfer arrives.

use super::network::NetModel;
use crate::proto::bulk::dag::Transfer;
use crate::topology::timeline::Timeline;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Bytes per segment.
pub const SEGMENT: u64 = 64 * 1024;

/// When the last of `transfers` arrives, its members in clusters `cluster_of` (by member
/// index) of `net`, every transfer without a wait starting at zero.
pub fn replay(net: &NetModel, cluster_of: &[usize], transfers: &[Transfer]) -> Duration {
    let k = net.clusters();
    let pipe = |mbit: Option<f64>| mbit.and_then(|m| Timeline::new(m, usize::MAX));
    let mut nics: Vec<Option<Timeline>> = (cluster_of.iter())
        .map(|c| pipe(net.nic_mbit(*c)))
        .collect();
    let mut links: Vec<Option<Timeline>> = (0..k * k)
        .map(|i| pipe(net.link_mbit(i / k, i % k)))
        .collect();
    let mut waiting: Vec<usize> = transfers.iter().map(|t| t.after.len()).collect();
    let mut ready_at: Vec<Duration> = vec![Duration::ZERO; transfers.len()];
    let mut then: Vec<Vec<usize>> = vec![Vec::new(); transfers.len()];
    for (i, t) in transfers.iter().enumerate() {
        for a in &t.after {
            then[*a].push(i);
        }
    }
    let mut queue: BinaryHeap<Reverse<(Duration, usize)>> = (waiting.iter().enumerate())
        .filter(|(_, w)| **w == 0)
        .map(|(i, _)| Reverse((Duration::ZERO, i)))
        .collect();
    let mut last = Duration::ZERO;
    while let Some(Reverse((at, i))) = queue.pop() {
        let t = &transfers[i];
        let (from, to) = (t.from as usize, t.to as usize);
        let (cf, ct) = (cluster_of[from], cluster_of[to]);
        let mut left = at;
        let mut sent = 0;
        while sent < t.bytes.max(1) {
            let seg = SEGMENT.min(t.bytes - sent).max(1) as usize;
            let mut out = match &mut nics[from] {
                Some(nic) => nic.send(at, seg).unwrap_or(at),
                None => at,
            };
            if cf != ct
                && let Some(link) = &mut links[cf * k + ct]
            {
                out = link.send(out, seg).unwrap_or(out);
            }
            left = left.max(out);
            sent += seg as u64;
        }
        let arrived = left + net.latency(cf, ct);
        last = last.max(arrived);
        for &j in &then[i] {
            ready_at[j] = ready_at[j].max(arrived);
            waiting[j] -= 1;
            if waiting[j] == 0 {
                queue.push(Reverse((ready_at[j], j)));
            }
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two clusters 10 ms apart, a 8 Mbit/s link between them, 80 Mbit/s NICs.
    fn two() -> NetModel {
        let ms = Duration::from_millis;
        NetModel::new(
            "two",
            &["a", "b"],
            &[vec![ms(0), ms(10)], vec![ms(10), ms(0)]],
            None,
            &[0, 0, 1],
        )
        .with_bandwidth(
            &[Some(80.0), Some(80.0)],
            &[vec![None, Some(8.0)], vec![Some(8.0), None]],
        )
    }

    fn send(from: u32, to: u32, bytes: u64, after: Vec<usize>) -> Transfer {
        Transfer {
            from,
            to,
            bytes,
            after,
        }
    }

    #[test]
    fn a_transfer_takes_its_bottleneck_and_latency_and_waits_for_its_inputs() {
        let net = two();
        let clusters = [0, 0, 1];
        // 1 MB over the 8 Mbit/s link: 1 s, plus 10 ms.
        let one = replay(&net, &clusters, &[send(0, 2, 1_000_000, vec![])]);
        assert!((one.as_secs_f64() - 1.01).abs() < 0.01, "{one:?}");
        // Relayed through member 1 first (80 Mbit/s inside): 0.1 s more at most.
        let relayed = replay(
            &net,
            &clusters,
            &[
                send(0, 1, 1_000_000, vec![]),
                send(1, 2, 1_000_000, vec![0]),
            ],
        );
        assert!((relayed.as_secs_f64() - 1.11).abs() < 0.01, "{relayed:?}");
        // Two senders of cluster a share the link: twice as long.
        let shared = replay(
            &net,
            &clusters,
            &[send(0, 2, 1_000_000, vec![]), send(1, 2, 1_000_000, vec![])],
        );
        assert!((shared.as_secs_f64() - 2.01).abs() < 0.01, "{shared:?}");
    }
}
