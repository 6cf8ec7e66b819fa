//! The model's [`Network`] from what a node measured: its bandwidth view's clusters,
//! rates and latencies, restricted to an operation's participants.

use super::model::Network;
use crate::proto::NodeId;
use crate::proto::bandwidth::BandwidthView;

impl Network {
    /// The participants' clusters (the view's, or `groups` if given: a static
    /// configuration, with nothing measured) and what `view` holds between them. Each
    /// participant sits in the first cluster that names it; one no cluster names is a
    /// cluster of its own.
    pub fn from_view(
        view: &BandwidthView,
        members: &[NodeId],
        groups: Option<&[Vec<NodeId>]>,
    ) -> Network {
        let clusters: Vec<Vec<NodeId>> = groups.map(<[_]>::to_vec).unwrap_or(view.clusters.clone());
        // Each participant in the first cluster that names it; the others alone.
        let mut out: Vec<(usize, Vec<NodeId>)> = Vec::new();
        let mut placed = std::collections::HashSet::new();
        for (i, c) in clusters.iter().enumerate() {
            let g: Vec<NodeId> = c
                .iter()
                .filter(|m| members.binary_search(m).is_ok() && placed.insert(**m))
                .copied()
                .collect();
            if !g.is_empty() {
                out.push((i, g));
            }
        }
        for m in members {
            if placed.insert(*m) {
                out.push((usize::MAX, vec![*m]));
            }
        }
        for (_, g) in &mut out {
            g.sort();
        }
        let mut net = Network::unmeasured(out.iter().map(|(_, g)| g.clone()).collect());
        if groups.is_some() {
            return net;
        }
        let at: Vec<usize> = out.iter().map(|(i, _)| *i).collect();
        let index = |cluster: usize| at.iter().position(|i| *i == cluster);
        for l in &view.links {
            if let (Some(a), Some(b)) = (index(l.from), index(l.to)) {
                if a == b {
                    net.lan_bps[a] = l.bps;
                } else {
                    net.wide_bps[a][b] = l.bps;
                }
            }
        }
        for (a, &ca) in at.iter().enumerate() {
            for (b, &cb) in at.iter().enumerate() {
                if let Some(us) = view.latency_us.get(ca).and_then(|r| r.get(cb))
                    && *us > 0
                {
                    net.latency_s[a][b] = f64::from(*us) / 1e6;
                }
            }
        }
        net
    }
}
