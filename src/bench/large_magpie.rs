//! The `magpie` contender of `bench large`: the static MagPIe scheme as a person would
//! configure it from the topology file (a coordinator per cluster, a flat wide-area tree
//! from the root to every coordinator, binomial inside clusters), segmented, executed by
//! protocol-less QUIC forwarders on the same emulated network as the overlay
//! ([`super::quic_tree::StaticNet`]).

use super::bandwidth::Bound;
use super::large::{Contender, Run};
use super::quic_tree::{MAX_SEGMENT, StaticNet};
use super::trees;
use crate::local::LocalOverlay;
use crate::topology::Topology;
use std::time::Duration;

/// MagPIe's segment: 32 KiB, pipelined through every coordinator.
pub const SEGMENT: usize = 32 * 1024;

/// The static nodes and the MagPIe tree from the root, installed once for every size.
pub struct Magpie {
    net: StaticNet,
    next_seq: u32,
}

const TREE: u32 = 1;

impl Magpie {
    /// Static endpoints beside the overlay's, one per node, with the MagPIe tree from node
    /// `root` over `topo` (whose node counts are the overlay's).
    pub fn start(overlay: &LocalOverlay, topo: &Topology, root: usize) -> anyhow::Result<Magpie> {
        let net = StaticNet::start(overlay.map.clone(), &overlay.clusters)?;
        let ids: Vec<_> = overlay.nodes.iter().map(|n| n.id()).collect();
        net.install(TREE, trees::magpie(root, &ids, topo));
        Ok(Magpie { net, next_seq: 0 })
    }

    /// One broadcast of `payload`, timed from the first segment sent to the last node's
    /// last segment.
    pub async fn run(
        &mut self,
        payload: &[u8],
        tree: Bound,
        bound_mbit: f64,
        progress: &dyn Fn(&str),
    ) -> Run {
        let (len, mib) = (payload.len(), payload.len() >> 20);
        let label = format!("{mib} MiB magpie");
        progress(&format!(
            "large: {label}: segments of {} KiB",
            SEGMENT / 1024
        ));
        let ideal = len as f64 * 8.0 / (tree.mbit * 1e6);
        let limit = Duration::try_from_secs_f64(ideal * 3.0 + 60.0).unwrap_or(Duration::MAX);
        let segment = SEGMENT.min(MAX_SEGMENT);
        let first = self.next_seq;
        self.next_seq = self
            .next_seq
            .wrapping_add(len.div_ceil(segment).max(1) as u32);
        let times = self
            .net
            .broadcast_segments(TREE, first, payload, segment, limit)
            .await;
        let delivered = times.iter().filter(|t| t.is_some()).count();
        let completion = (delivered == times.len())
            .then(|| times.iter().flatten().max().copied())
            .flatten()
            .map(|d| d.as_secs_f64());
        let throughput = completion.map(|s| len as f64 * 8.0 / s / 1e6);
        progress(&format!(
            "large: {label}: {}",
            match (completion, throughput) {
                (Some(s), Some(t)) =>
                    format!("all {delivered} received in {s:.2} s ({t:.2} Mbit/s)"),
                _ => format!("only {delivered}/{} received", times.len()),
            }
        ));
        Run {
            size_mib: mib,
            mode: Contender::Magpie,
            completion_s: completion,
            delivered,
            throughput_mbit: throughput,
            share_of_bound: throughput.map(|t| t / bound_mbit),
            max_flow_mbit: 0.0,
            share_of_max_flow: None,
            share_of_tree: throughput.map(|t| t / tree.mbit),
            tree,
            tree_hops: Vec::new(),
            optimal: false,
        }
    }

    /// Closes the static endpoints.
    pub fn close(&self) {
        self.net.close();
    }
}
