//! The bandwidth pipes of the simulated network, in virtual time: one NIC per node and one
//! shared link per directed pair of clusters, each a [`Timeline`] (first come, first
//! served at its rate, a bounded buffer, tail drop) at the topology's figure.
//!
//! A datagram from a node of cluster A to a node of cluster B is serialized on the sender's
//! NIC at A's `bandwidth_mbit`, then, if A and B differ, on the link A -> B at the link's
//! `bandwidth_mbit` (shared by every node of A), then delayed by the one-way latency: the
//! model of the emulated socket, with the same buffer sizes
//! ([`buffer_bytes`](crate::topology::timeline::buffer_bytes)). A pipe without a figure is
//! unlimited and costs nothing, so a topology without bandwidths runs exactly as a
//! latency-only network. The receiver's NIC is not modelled (as in the emulated socket).
//!
//! Times are [`Duration`]s since the simulator's zero, to the nanosecond: a pipe's clock
//! keeps the fraction of a microsecond that one datagram's serialization takes, and only
//! the events the simulator schedules are rounded (up) to its microseconds.

use super::network::NetModel;
use crate::proto::Time;
use crate::topology::timeline::Timeline;
use std::time::Duration;

/// Every NIC and link of a run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pipes {
    /// Whether bandwidth is modelled at all ([`super::SimConfig::bandwidth`]).
    on: bool,
    /// Clusters (row length of `links`).
    k: usize,
    /// Each node's NIC, by node index.
    nics: Vec<Option<Timeline>>,
    /// Each directed link between two clusters, `[from * k + to]`.
    links: Vec<Option<Timeline>>,
}

impl Pipes {
    /// The links of `net` (NICs come with [`Pipes::add_node`]); none when `on` is false.
    pub(crate) fn new(net: &NetModel, on: bool) -> Self {
        let k = net.clusters();
        let links = (0..k * k)
            .map(|i| {
                let mbit = net.link_mbit(i / k, i % k).filter(|_| on)?;
                Timeline::with_rate(mbit)
            })
            .collect();
        Pipes {
            on,
            k,
            nics: Vec::new(),
            links,
        }
    }

    /// Adds the NIC of the next node, in `cluster`.
    pub(crate) fn add_node(&mut self, net: &NetModel, cluster: usize) {
        let nic = net.nic_mbit(cluster).filter(|_| self.on);
        self.nics.push(nic.and_then(Timeline::with_rate));
    }

    /// Passes `len` bytes handed to `node`'s NIC at `at`: when they have left it (`at` for
    /// an unlimited NIC), or `None` if its buffer is full (dropped).
    pub(crate) fn nic(&mut self, node: usize, at: Duration, len: usize) -> Option<Duration> {
        match &mut self.nics[node] {
            Some(nic) => nic.send(at, len),
            None => Some(at),
        }
    }

    /// Whether the link from cluster `from` to cluster `to` has a bandwidth.
    pub(crate) fn has_link(&self, from: usize, to: usize) -> bool {
        self.links[from * self.k + to].is_some()
    }

    /// Passes `len` bytes reaching the link from `from` to `to` at `at`: when they have left
    /// it, or `None` if its buffer is full (dropped). Arrivals must come in time order.
    pub(crate) fn link(
        &mut self,
        from: usize,
        to: usize,
        at: Duration,
        len: usize,
    ) -> Option<Duration> {
        match &mut self.links[from * self.k + to] {
            Some(link) => link.send(at, len),
            None => Some(at),
        }
    }
}

/// `t` as a [`Duration`] since the simulator's zero.
pub(crate) fn since_zero(t: Time) -> Duration {
    Duration::from_micros(t.as_micros())
}

/// The first simulator instant at or after `d` (events are scheduled in whole µs).
pub(crate) fn at_or_after(d: Duration) -> Time {
    let us = d.as_nanos().div_ceil(1000);
    Time::from_micros(us.min(u128::from(u64::MAX)) as u64)
}
