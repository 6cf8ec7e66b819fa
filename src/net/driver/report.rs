//! What the driver shows the API: tree queries, the member view, the status snapshot.

use super::Driver;
use crate::net::view::{
    ClusterBandwidth, MemberInfo, NodeStatus, TreeInfo, TreeNode, TreeSnapshot, cluster_levels,
};
use crate::proto::{NodeId, NodeInput};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a tree query waits for members' answers.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// A tree query in progress.
pub(super) struct TreeQuery {
    pub(super) root: NodeId,
    pub(super) nodes: HashMap<NodeId, TreeNode>,
    pub(super) deadline: Instant,
    pub(super) reply: oneshot::Sender<TreeSnapshot>,
}

impl Driver {
    pub(super) fn start_tree_query(&mut self, root: NodeId, reply: oneshot::Sender<TreeSnapshot>) {
        self.next_query += 1;
        let id = self.next_query;
        let mut nodes = HashMap::new();
        let me = self.node.gossip().me().clone();
        nodes.insert(me.id, self.tree_node(me.id, &me.name, root));
        for r in self.node.gossip().live_members() {
            let unanswered = TreeNode {
                id: r.id,
                name: r.name.clone(),
                parent: None,
                dist_ms: None,
                answered: false,
            };
            nodes.insert(r.id, unanswered);
        }
        self.node
            .handle(self.now(), NodeInput::AskTree { id, root });
        self.queries.insert(
            id,
            TreeQuery {
                root,
                nodes,
                deadline: Instant::now() + QUERY_TIMEOUT,
                reply,
            },
        );
        // The loop's drain carries the questions out; a lone node has its answer already.
        self.finish_queries(false);
    }

    pub(super) fn tree_node(&self, id: NodeId, name: &str, root: NodeId) -> TreeNode {
        let view = self.node.core().tree(root);
        TreeNode {
            id,
            name: name.to_string(),
            parent: view.as_ref().and_then(|v| v.parent),
            dist_ms: view
                .filter(|v| v.connected)
                .map(|v| v.dist.as_secs_f64() * 1e3),
            answered: true,
        }
    }

    /// Answers queries that are complete or past their deadline (all of them if `all`).
    pub(super) fn finish_queries(&mut self, all: bool) {
        let now = Instant::now();
        let done: Vec<u64> = self
            .queries
            .iter()
            .filter(|(_, q)| all || q.deadline <= now || q.nodes.values().all(|n| n.answered))
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            if let Some(q) = self.queries.remove(&id) {
                let mut nodes: Vec<TreeNode> = q.nodes.into_values().collect();
                nodes.sort_by_key(|n| n.id);
                let _ = q.reply.send(TreeSnapshot {
                    root: q.root,
                    nodes,
                });
            }
        }
    }

    /// Writes one member's record and RTT into the view the API reads.
    pub(super) fn refresh_member(&self, id: NodeId) {
        if let Some(record) = self.node.gossip().record(&id) {
            self.members
                .upsert(member_info(record, self.node.core().rtt(id)));
        }
    }

    /// Writes every member and its RTT into the view the API reads.
    pub(super) fn refresh_members(&self) {
        let core = self.node.core();
        let records = self.node.gossip().records();
        let members = records.iter().map(|r| member_info(r, core.rtt(r.id)));
        self.members.replace(members);
    }

    pub(super) fn status(&self) -> NodeStatus {
        let core = self.node.core();
        let gossip = self.node.gossip();
        let me = gossip.me();
        let members = gossip
            .records()
            .iter()
            .map(|r| member_info(r, core.rtt(r.id)))
            .collect();
        let mut trees: Vec<TreeInfo> = core
            .roots()
            .into_iter()
            .filter_map(|root| core.tree(root))
            .map(TreeInfo::from_view)
            .collect();
        trees.sort_by_key(|t| t.root);
        let stats = &self.ctx.stats;
        use std::sync::atomic::Ordering::Relaxed;
        let (send_cost, send_cost_measured) = core.send_cost();
        let core_stats = core.stats();
        NodeStatus {
            id: me.id,
            name: me.name.clone(),
            addr: me.addr,
            members,
            trees,
            connections: self.links.len(),
            frames_in: stats.frames_in.load(Relaxed),
            frames_out: stats.frames_out.load(Relaxed),
            bytes_in: stats.bytes_in.load(Relaxed),
            bytes_out: stats.bytes_out.load(Relaxed),
            frames_rejected: stats.frames_rejected.load(Relaxed),
            protocol_errors: stats.protocol_errors.load(Relaxed),
            auth_failures: stats.auth_failures.load(Relaxed),
            refused_connections: stats.refused_connections.load(Relaxed),
            peers_kept_out: stats.peers_kept_out.load(Relaxed),
            forged_records: gossip.forged_records(),
            light_joins: gossip.light_joins(),
            local_health: gossip.local_health(),
            links_opened: stats.links_opened.load(Relaxed),
            packets_dropped: self.links.dropped,
            uptime_ms: self.start.elapsed().as_millis() as u64,
            clusters: cluster_levels(core.clusters(), me.id, |id| {
                gossip.record(id).map(|r| r.name.clone())
            }),
            send_cost_us: send_cost.as_micros() as u64,
            send_cost_measured,
            links_lost: core_stats.links_lost,
            resyncs_after_loss: core_stats.resyncs_after_loss,
            bandwidth: cluster_bandwidth(&core.bandwidth_view()),
            probe_bytes_sent: core.bandwidth_stats().train_bytes_sent,
            probe_bytes_received: core.bandwidth_stats().train_bytes_received,
            paths_saturated: core.bandwidth_stats().paths_saturated,
            saturations_rechecked: core.bandwidth_stats().saturations_rechecked,
            transfers_measured: core.bandwidth_stats().transfers_measured,
            // Kept by the API handle, which fills it in.
            collectives: Vec::new(),
            tasks: tokio::runtime::Handle::try_current()
                .map_or(0, |h| h.metrics().num_alive_tasks() as u64),
            traffic: stats.by_kind.snapshot(),
            quic: self.links.quic_counters(),
            links: self.links.counters,
            core: core_stats,
        }
    }
}

pub(super) fn member_info(r: &crate::proto::MemberRecord, rtt: Option<Duration>) -> MemberInfo {
    MemberInfo {
        id: r.id,
        name: r.name.clone(),
        addr: r.addr,
        state: r.state,
        rtt_ms: rtt.map(|d| d.as_secs_f64() * 1e3),
        groups: r.groups.clone(),
    }
}

/// The bandwidth view as status shows it.
fn cluster_bandwidth(view: &crate::proto::bandwidth::BandwidthView) -> Vec<ClusterBandwidth> {
    let name = |i: usize| view.clusters.get(i).and_then(|c| c.first().copied());
    view.links
        .iter()
        .filter_map(|l| {
            Some(ClusterBandwidth {
                from: name(l.from)?,
                to: name(l.to)?,
                mbit: l.bps / 1e6,
                figures: l.figures,
                age_s: l.age.as_secs_f64(),
                latency_ms: (view.latency_us.get(l.from)?.get(l.to).copied())
                    .filter(|us| *us > 0)
                    .map(|us| f64::from(us) / 1e3),
            })
        })
        .collect()
}
