//! The node's state in the Prometheus text exposition format (version 0.0.4), rendered
//! on every scrape from a fresh status, so nothing is kept between scrapes but the few
//! counters the daemon adds ([`Extra`]).

use overlay::api::{CollectiveStats, LATENCY_BUCKETS_S, NodeStatus};
use overlay::proto::{Liveness, NodeId};
use std::fmt::Write as _;

/// The content type of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the metrics need beyond the status.
#[derive(Debug, Default, Clone)]
pub struct Extra {
    /// Times this node's parent changed in any tree since the daemon started.
    pub parent_changes: u64,
    /// The collectives started at this node.
    pub collectives: Vec<CollectiveStats>,
    /// This node's own tree: members that reach it along the tree, and the most hops.
    pub own_tree: Option<(usize, usize)>,
}

/// The exposition text of `s` and `extra`.
pub fn render(s: &NodeStatus, extra: &Extra) -> String {
    let mut o = Out::default();
    let name_of = |id: NodeId| {
        let m = s.members.iter().find(|m| m.id == id);
        m.map(|m| m.name.clone()).unwrap_or_default()
    };

    o.family(
        "overlay_info",
        "gauge",
        "This node: id, name and version (always 1).",
    );
    let short = s.id.short();
    let hex = s.id.to_hex();
    let labels = [
        ("id", hex.as_str()),
        ("short_id", short.as_str()),
        ("name", s.name.as_str()),
        ("version", env!("CARGO_PKG_VERSION")),
    ];
    o.sample("overlay_info", &labels, "1");
    o.family(
        "overlay_uptime_seconds",
        "gauge",
        "Time since the node started.",
    );
    o.sample(
        "overlay_uptime_seconds",
        &[],
        &num(s.uptime_ms as f64 / 1e3),
    );

    o.family(
        "overlay_members",
        "gauge",
        "Members known, by liveness state (this node included).",
    );
    for (state, label) in [
        (Liveness::Alive, "alive"),
        (Liveness::Suspect, "suspect"),
        (Liveness::Dead, "dead"),
        (Liveness::Left, "left"),
    ] {
        let n = s.members.iter().filter(|m| m.state == state).count();
        o.sample("overlay_members", &[("state", label)], &n.to_string());
    }
    o.family(
        "overlay_peer_rtt_seconds",
        "gauge",
        "Filtered round-trip time to each measured peer.",
    );
    for m in s.members.iter().filter(|m| m.id != s.id) {
        if let Some(ms) = m.rtt_ms {
            let peer = m.id.short();
            let labels = [("peer", peer.as_str()), ("peer_name", m.name.as_str())];
            o.sample("overlay_peer_rtt_seconds", &labels, &num(ms / 1e3));
        }
    }
    o.family("overlay_connections", "gauge", "Open peer connections.");
    o.sample("overlay_connections", &[], &s.connections.to_string());
    o.family(
        "overlay_local_health",
        "gauge",
        "How starved of CPU the node believes itself to be, 0 to 8 (membership timings x 1+this).",
    );
    o.sample("overlay_local_health", &[], &s.local_health.to_string());
    o.family(
        "overlay_tokio_tasks",
        "gauge",
        "Tokio tasks alive in the node's runtime.",
    );
    o.sample("overlay_tokio_tasks", &[], &s.tasks.to_string());

    trees(&mut o, s, &name_of, extra.parent_changes);
    if let Some((spanned, depth)) = extra.own_tree {
        o.family(
            "overlay_own_tree_members",
            "gauge",
            "Members that reach this node along its own tree (itself included; refreshed at most every 30 s).",
        );
        o.sample("overlay_own_tree_members", &[], &spanned.to_string());
        o.family(
            "overlay_own_tree_depth",
            "gauge",
            "Most hops from a member to this node along its own tree (refreshed at most every 30 s).",
        );
        o.sample("overlay_own_tree_depth", &[], &depth.to_string());
    }
    traffic(&mut o, s);
    quic::counters(&mut o, &s.quic);
    quic::links(&mut o, &s.links);
    clusters(&mut o, s, &name_of);
    collectives(&mut o, &extra.collectives);
    o.text
}

/// The trees: how many, this node's place in them.
fn trees(o: &mut Out, s: &NodeStatus, name_of: &dyn Fn(NodeId) -> String, parent_changes: u64) {
    let count =
        |f: &dyn Fn(&overlay::api::TreeInfo) -> bool| s.trees.iter().filter(|t| f(t)).count();
    o.family(
        "overlay_trees",
        "gauge",
        "Trees this node is in (one per root).",
    );
    o.sample("overlay_trees", &[], &s.trees.len().to_string());
    o.family(
        "overlay_trees_connected",
        "gauge",
        "Trees in which this node has a path to the root.",
    );
    o.sample(
        "overlay_trees_connected",
        &[],
        &count(&|t| t.connected).to_string(),
    );
    o.family(
        "overlay_trees_without_parent",
        "gauge",
        "Trees of other roots in which this node has no parent (should be 0 once converged).",
    );
    let orphan = count(&|t| t.root != s.id && t.parent.is_none());
    o.sample("overlay_trees_without_parent", &[], &orphan.to_string());
    o.family(
        "overlay_tree_children",
        "gauge",
        "Children of this node, summed over every tree.",
    );
    let children: usize = s.trees.iter().map(|t| t.children.len()).sum();
    o.sample("overlay_tree_children", &[], &children.to_string());
    o.family(
        "overlay_tree_dist_max_seconds",
        "gauge",
        "Largest distance to a root along its tree, over the connected trees.",
    );
    let max = s.trees.iter().filter(|t| t.connected).map(|t| t.dist_ms);
    o.sample(
        "overlay_tree_dist_max_seconds",
        &[],
        &num(max.fold(0.0, f64::max) / 1e3),
    );
    o.family(
        "overlay_tree_dist_seconds",
        "gauge",
        "Distance to each root along its tree.",
    );
    for t in s.trees.iter().filter(|t| t.connected) {
        let (root, name) = (t.root.short(), name_of(t.root));
        let labels = [("root", root.as_str()), ("root_name", name.as_str())];
        o.sample("overlay_tree_dist_seconds", &labels, &num(t.dist_ms / 1e3));
    }
    o.family(
        "overlay_parent_changes_total",
        "counter",
        "Times this node's parent changed in any tree.",
    );
    o.sample(
        "overlay_parent_changes_total",
        &[],
        &parent_changes.to_string(),
    );
}

/// Frames, bytes and the error counters.
fn traffic(o: &mut Out, s: &NodeStatus) {
    let both = |o: &mut Out, name: &str, help: &str, i: u64, out: u64| {
        o.family(name, "counter", help);
        o.sample(name, &[("direction", "in")], &i.to_string());
        o.sample(name, &[("direction", "out")], &out.to_string());
    };
    both(
        o,
        "overlay_frames_total",
        "Control frames received (decoded) and sent.",
        s.frames_in,
        s.frames_out,
    );
    both(
        o,
        "overlay_bytes_total",
        "Control bytes received and sent, frame prefixes included.",
        s.bytes_in,
        s.bytes_out,
    );
    both(
        o,
        "overlay_probe_bytes_total",
        "Bytes of bandwidth-probing packet trains received and sent.",
        s.probe_bytes_received,
        s.probe_bytes_sent,
    );
    for (name, help, frames) in [
        (
            "overlay_messages_total",
            "Messages received and handed to connections, by kind.",
            true,
        ),
        (
            "overlay_message_bytes_total",
            "Bytes of messages received and handed to connections, by kind.",
            false,
        ),
    ] {
        o.family(name, "counter", help);
        for t in &s.traffic {
            let (i, out) = match frames {
                true => (t.frames_in, t.frames_out),
                false => (t.bytes_in, t.bytes_out),
            };
            for (direction, n) in [("in", i), ("out", out)] {
                let labels = [("kind", t.kind.as_str()), ("direction", direction)];
                o.sample(name, &labels, &n.to_string());
            }
        }
    }
    let counters = [
        (
            "overlay_frames_rejected_total",
            "Frames dropped because they did not decode.",
            s.frames_rejected,
        ),
        (
            "overlay_protocol_errors_total",
            "Connections closed for oversized or truncated frames.",
            s.protocol_errors,
        ),
        (
            "overlay_links_opened_total",
            "Admitted connections opened, dialed or accepted.",
            s.links_opened,
        ),
        (
            "overlay_forged_records_total",
            "Membership records refused: their owner's signature did not verify.",
            s.forged_records,
        ),
        (
            "overlay_light_joins_total",
            "Joins answered with a few records, full answers being past the budget.",
            s.light_joins,
        ),
        (
            "overlay_auth_failures_total",
            "Connections refused for a bad join-token proof.",
            s.auth_failures,
        ),
        (
            "overlay_refused_connections_total",
            "Inbound connections refused (handshakes over the limit or failed, bad token \
             proofs, peers kept out).",
            s.refused_connections,
        ),
        (
            "overlay_peers_kept_out_total",
            "Times a peer was kept out for too many malformed frames or protocol violations.",
            s.peers_kept_out,
        ),
        (
            "overlay_packets_dropped_total",
            "Packets dropped (queues full, peer unreachable).",
            s.packets_dropped,
        ),
        (
            "overlay_links_lost_total",
            "Times frames to a peer may have been lost.",
            s.links_lost,
        ),
        (
            "overlay_resyncs_after_loss_total",
            "Times state was sent again to a peer after such a loss.",
            s.resyncs_after_loss,
        ),
        (
            "overlay_paths_saturated_total",
            "Windows in which a connection ran its path full (QUIC backed off while busy).",
            s.paths_saturated,
        ),
        (
            "overlay_saturation_rechecks_total",
            "Clusters measured again because a peer's connection ran full far below the \
             estimate.",
            s.saturations_rechecked,
        ),
        (
            "overlay_transfers_measured_total",
            "Real transfers whose rate was taken as a passive bandwidth measurement.",
            s.transfers_measured,
        ),
    ];
    for (name, help, value) in counters {
        o.family(name, "counter", help);
        o.sample(name, &[], &value.to_string());
    }
    o.family(
        "overlay_send_cost_seconds",
        "gauge",
        "Cost of one send the in-cluster plan assumes.",
    );
    o.sample(
        "overlay_send_cost_seconds",
        &[],
        &num(s.send_cost_us as f64 / 1e6),
    );
}

/// The discovered clusters and the bandwidth between them.
fn clusters(o: &mut Out, s: &NodeStatus, name_of: &dyn Fn(NodeId) -> String) {
    o.family(
        "overlay_clusters",
        "gauge",
        "Groups discovered at each level (1: clusters).",
    );
    for level in &s.clusters {
        let l = level.level.to_string();
        o.sample(
            "overlay_clusters",
            &[("level", l.as_str())],
            &level.groups.len().to_string(),
        );
    }
    o.family(
        "overlay_cluster_members",
        "gauge",
        "Members of each level-1 cluster (named by its smallest member).",
    );
    o.family(
        "overlay_cluster_rtt_seconds",
        "gauge",
        "Typical RTT inside each level-1 cluster.",
    );
    for g in s
        .clusters
        .iter()
        .filter(|l| l.level == 1)
        .flat_map(|l| &l.groups)
    {
        let (c, name) = (g.label.short(), name_of(g.label));
        let mine = if g.mine { "true" } else { "false" };
        let labels = [
            ("cluster", c.as_str()),
            ("cluster_name", name.as_str()),
            ("mine", mine),
        ];
        o.sample(
            "overlay_cluster_members",
            &labels,
            &g.members.len().to_string(),
        );
        if let Some(ms) = g.rtt_ms {
            o.sample("overlay_cluster_rtt_seconds", &labels[..2], &num(ms / 1e3));
        }
    }
    o.family(
        "overlay_cluster_bandwidth_bits_per_second",
        "gauge",
        "Measured bandwidth between clusters (directed).",
    );
    o.family(
        "overlay_cluster_latency_seconds",
        "gauge",
        "Modelled one-way latency between clusters.",
    );
    for b in &s.bandwidth {
        let (from, to) = (b.from.short(), b.to.short());
        let labels = [("from", from.as_str()), ("to", to.as_str())];
        o.sample(
            "overlay_cluster_bandwidth_bits_per_second",
            &labels,
            &num(b.mbit * 1e6),
        );
        if let Some(ms) = b.latency_ms {
            o.sample("overlay_cluster_latency_seconds", &labels, &num(ms / 1e3));
        }
    }
}

/// The collectives started at this node: counts and a latency histogram per kind.
fn collectives(o: &mut Out, all: &[CollectiveStats]) {
    o.family(
        "overlay_collectives_total",
        "counter",
        "Collective operations started at this node, by kind and outcome.",
    );
    for c in all {
        for (outcome, n) in [("completed", c.completed), ("failed", c.failed)] {
            let labels = [("kind", c.kind.as_str()), ("outcome", outcome)];
            o.sample("overlay_collectives_total", &labels, &n.to_string());
        }
    }
    let name = "overlay_collective_duration_seconds";
    o.family(
        name,
        "histogram",
        "Latency of the completed collectives started at this node, by kind.",
    );
    for c in all {
        let mut cumulative = 0;
        for (i, bound) in LATENCY_BUCKETS_S.iter().enumerate() {
            cumulative += c.buckets.get(i).copied().unwrap_or(0);
            let le = num(*bound);
            let labels = [("kind", c.kind.as_str()), ("le", le.as_str())];
            o.sample(&format!("{name}_bucket"), &labels, &cumulative.to_string());
        }
        let labels = [("kind", c.kind.as_str()), ("le", "+Inf")];
        o.sample(&format!("{name}_bucket"), &labels, &c.completed.to_string());
        o.sample(&format!("{name}_sum"), &labels[..1], &num(c.sum_s));
        o.sample(
            &format!("{name}_count"),
            &labels[..1],
            &c.completed.to_string(),
        );
    }
}

/// A float as the format writes it (`NaN`, `+Inf`, `-Inf` included).
fn num(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{x}")
    }
}

/// The text being written.
#[derive(Default)]
struct Out {
    text: String,
}

impl Out {
    /// Starts a metric family: its HELP and TYPE lines.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample line; label values are escaped as the format requires.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: &str) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.text, "{k}=\"{v}\"");
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }
}

mod quic;

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
