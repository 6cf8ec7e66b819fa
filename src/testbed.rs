//! The network-namespace testbed's model: how a topology is laid out on namespaces, bridges
//! and subnets (the plan that `netns-scripts/up` builds), and how a running testbed is
//! judged against its topology (trees, membership, RTTs). Shared by the `overlay-netns`
//! helper binary (plan, WAN emulator, status) and the netns integration test.
//!
//! Addressing: cluster `i` (0-based, file order) is the subnet `10.77.{i+1}.0/24`; the
//! router is `.1` on it and the cluster's nodes are `.2`, `.3`, ... A node is named
//! `{cluster}-{k}` (k from 1), like the nodes of [`crate::local::LocalOverlay`].

pub mod fuzz;

use crate::api::NodeStatus;
use crate::local::{OverlayCheck, check_statuses};
use crate::proto::{Liveness, NodeId};
use crate::sim::NetModel;
use crate::topology::Topology;
use serde::Serialize;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// First two octets of every testbed address.
pub const NET_PREFIX: [u8; 2] = [10, 77];
/// Most clusters a testbed can have (one /24 each, third octet 1..=254).
pub const MAX_CLUSTERS: usize = 254;
/// Most nodes per cluster (.2 to .254 of the cluster's /24).
pub const MAX_NODES_PER_CLUSTER: usize = 253;
/// UDP port every node listens on (each node has its own address).
pub const NODE_PORT: u16 = 7400;

/// One node of the testbed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanNode {
    /// `{cluster}-{k}`: the node's overlay name and the suffix of its namespace's name.
    pub name: String,
    /// Cluster index.
    pub cluster: usize,
    /// Number within its cluster, from 1.
    pub number: usize,
    /// Its address.
    pub ip: Ipv4Addr,
}

/// How a topology is laid out on the testbed.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The topology, with every cluster's `nodes` set to what the testbed runs.
    pub topology: Topology,
    /// Every node, cluster by cluster in file order.
    pub nodes: Vec<PlanNode>,
}

/// Why a topology cannot be laid out.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

impl Plan {
    /// Lays `topology` out; `nodes_per_cluster` overrides every cluster's node count.
    pub fn new(
        mut topology: Topology,
        nodes_per_cluster: Option<usize>,
    ) -> Result<Plan, PlanError> {
        if topology.clusters.len() > MAX_CLUSTERS {
            return Err(PlanError(format!(
                "{} clusters: the testbed has room for at most {MAX_CLUSTERS}",
                topology.clusters.len()
            )));
        }
        if nodes_per_cluster == Some(0) {
            return Err(PlanError("--nodes-per-cluster must be at least 1".into()));
        }
        for c in &mut topology.clusters {
            if let Some(n) = nodes_per_cluster {
                c.nodes = n;
            }
            if !valid_cluster_name(&c.name) {
                return Err(PlanError(format!(
                    "cluster name {:?} cannot name a namespace: use 1 to 32 of A-Z a-z 0-9 _ .",
                    c.name
                )));
            }
            if c.nodes > MAX_NODES_PER_CLUSTER {
                return Err(PlanError(format!(
                    "cluster {} has {} nodes: the testbed has room for at most {MAX_NODES_PER_CLUSTER} per cluster (use --nodes-per-cluster)",
                    c.name, c.nodes
                )));
            }
        }
        let mut nodes = Vec::new();
        for (i, c) in topology.clusters.iter().enumerate() {
            for k in 1..=c.nodes {
                nodes.push(PlanNode {
                    name: format!("{}-{k}", c.name),
                    cluster: i,
                    number: k,
                    ip: node_ip(i, k),
                });
            }
        }
        Ok(Plan { topology, nodes })
    }

    /// The plan as lines for the shell scripts (fields separated by one space):
    ///
    /// ```text
    /// topology NAME NODES CLUSTERS
    /// cluster INDEX NAME NODES SUBNET GATEWAY
    /// node NAME CLUSTER_INDEX NUMBER IP PORT
    /// link FROM_INDEX TO_INDEX LATENCY_MS BANDWIDTH_MBIT|-
    /// ```
    ///
    /// One `link` line per ordered pair of distinct clusters.
    pub fn to_lines(&self) -> String {
        let t = &self.topology;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "topology {} {} {}",
            t.name.replace(char::is_whitespace, "_"),
            self.nodes.len(),
            t.clusters.len()
        );
        for (i, c) in t.clusters.iter().enumerate() {
            let _ = writeln!(
                out,
                "cluster {i} {} {} {}/24 {}",
                c.name,
                c.nodes,
                subnet(i),
                gateway(i)
            );
        }
        for n in &self.nodes {
            let _ = writeln!(
                out,
                "node {} {} {} {} {NODE_PORT}",
                n.name, n.cluster, n.number, n.ip
            );
        }
        let k = t.clusters.len();
        for a in 0..k {
            for b in (0..k).filter(|&b| b != a) {
                let bw = t
                    .bandwidth_mbit(a, b)
                    .map_or_else(|| "-".to_string(), |m| format!("{m}"));
                let lat = t.latency(a, b).as_secs_f64() * 1e3;
                let _ = writeln!(out, "link {a} {b} {lat} {bw}");
            }
        }
        out
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&PlanNode> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Expected RTT in ms between a node of cluster `a` and one of cluster `b`: the one-way
    /// latency there plus the one-way latency back.
    pub fn expected_rtt_ms(&self, a: usize, b: usize) -> f64 {
        (self.topology.latency(a, b) + self.topology.latency(b, a)).as_secs_f64() * 1e3
    }
}

/// Whether a cluster name can be part of a namespace name.
pub fn valid_cluster_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

/// Network address of cluster `i`'s /24.
pub fn subnet(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(NET_PREFIX[0], NET_PREFIX[1], third_octet(i), 0)
}

/// The router's address on cluster `i`.
pub fn gateway(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(NET_PREFIX[0], NET_PREFIX[1], third_octet(i), 1)
}

/// Address of node `k` (from 1) of cluster `i`.
pub fn node_ip(i: usize, k: usize) -> Ipv4Addr {
    assert!((1..=MAX_NODES_PER_CLUSTER).contains(&k), "node number {k}");
    Ipv4Addr::new(NET_PREFIX[0], NET_PREFIX[1], third_octet(i), k as u8 + 1)
}

fn third_octet(i: usize) -> u8 {
    assert!(i < MAX_CLUSTERS, "cluster index {i}");
    i as u8 + 1
}

/// The cluster whose subnet holds `ip`, if any (`clusters`: how many there are).
pub fn cluster_of_ip(ip: Ipv4Addr, clusters: usize) -> Option<usize> {
    let o = ip.octets();
    if o[0] != NET_PREFIX[0] || o[1] != NET_PREFIX[1] || o[2] == 0 {
        return None;
    }
    let i = usize::from(o[2]) - 1;
    (i < clusters).then_some(i)
}

/// How far the RTTs the nodes measured are from the topology's.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RttReport {
    /// Measured (node, member) pairs between clusters.
    pub inter_pairs: usize,
    /// Mean absolute error over those pairs, ms.
    pub inter_mean_abs_ms: f64,
    /// Largest absolute error over those pairs, ms.
    pub inter_max_abs_ms: f64,
    /// Mean relative error (measured / expected - 1) over those pairs.
    pub inter_mean_rel: f64,
    /// Largest absolute relative error over those pairs.
    pub inter_max_rel: f64,
    /// Measured pairs inside a cluster.
    pub intra_pairs: usize,
    /// Largest RTT measured inside a cluster, ms (expected: twice the cluster's latency).
    pub intra_max_ms: f64,
    /// Pairs (alive members of one another) without an RTT yet.
    pub unmeasured: usize,
    /// Pairs outside the margin: "node -> member: measured X ms, expected Y ms".
    pub outside_margin: Vec<String>,
    /// The margin applied: |error| <= max(margin_abs_ms, margin_rel * expected).
    pub margin_abs_ms: f64,
    /// See `margin_abs_ms`.
    pub margin_rel: f64,
}

/// Compares every RTT in `statuses` with the topology: a pair is outside the margin when
/// |measured - expected| > max(`abs_ms`, `rel` * expected). Members that are not alive, and
/// names outside the plan, are skipped.
pub fn rtt_report(plan: &Plan, statuses: &[NodeStatus], abs_ms: f64, rel: f64) -> RttReport {
    let mut r = RttReport {
        margin_abs_ms: abs_ms,
        margin_rel: rel,
        ..Default::default()
    };
    let (mut sum_abs, mut sum_rel) = (0.0, 0.0);
    for s in statuses {
        let Some(a) = plan.node(&s.name) else {
            continue;
        };
        for m in &s.members {
            if m.id == s.id || m.state != Liveness::Alive {
                continue;
            }
            let Some(b) = plan.node(&m.name) else {
                continue;
            };
            let Some(measured) = m.rtt_ms else {
                r.unmeasured += 1;
                continue;
            };
            let expected = plan.expected_rtt_ms(a.cluster, b.cluster);
            let err = measured - expected;
            if a.cluster == b.cluster {
                r.intra_pairs += 1;
                r.intra_max_ms = r.intra_max_ms.max(measured);
            } else {
                r.inter_pairs += 1;
                sum_abs += err.abs();
                sum_rel += err / expected;
                r.inter_max_abs_ms = r.inter_max_abs_ms.max(err.abs());
                r.inter_max_rel = r.inter_max_rel.max((err / expected).abs());
            }
            if err.abs() > abs_ms.max(rel * expected) {
                r.outside_margin.push(format!(
                    "{} -> {}: measured {measured:.2} ms, expected {expected:.2} ms",
                    s.name, m.name
                ));
            }
        }
    }
    if r.inter_pairs > 0 {
        r.inter_mean_abs_ms = sum_abs / r.inter_pairs as f64;
        r.inter_mean_rel = sum_rel / r.inter_pairs as f64;
    }
    r
}

/// The trees and membership of a group of testbed nodes, judged from their own statuses.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GroupCheck {
    /// Nodes in the group.
    pub expected: usize,
    /// Of those, nodes whose status is in hand.
    pub answering: usize,
    /// Trees, spanning and optimality, over the answering nodes of the group only (a tree
    /// edge to a node outside the group does not count).
    pub overlay: OverlayCheck,
    /// (node, tree of a group root) pairs in which the node's parent is outside the group.
    pub trees_with_foreign_parent: usize,
}

impl GroupCheck {
    /// Every node of the group answers, knows every other as alive, and every group
    /// member's tree spans the group.
    pub fn spanning(&self) -> bool {
        self.answering == self.expected
            && self.overlay.trees == self.expected
            && self.overlay.spanning == self.expected
            && self.overlay.full_membership == self.expected
    }

    /// [`GroupCheck::spanning`], and every tree is wide-area optimal.
    pub fn optimal(&self) -> bool {
        self.spanning() && self.overlay.wide_area_optimal == self.expected
    }
}

/// Checks the nodes named `group` (all of the plan's nodes when `None`) from `statuses`,
/// ignoring every status and member outside the group.
pub fn check_group(plan: &Plan, statuses: &[NodeStatus], group: Option<&[String]>) -> GroupCheck {
    let in_group = |name: &str| group.is_none_or(|g| g.iter().any(|n| n == name));
    let expected = plan.nodes.iter().filter(|n| in_group(&n.name)).count();
    let mine: Vec<NodeStatus> = statuses
        .iter()
        .filter(|s| in_group(&s.name) && plan.node(&s.name).is_some())
        .cloned()
        .collect();
    let ids: Vec<NodeId> = mine.iter().map(|s| s.id).collect();
    let clusters: Vec<usize> = mine
        .iter()
        .map(|s| plan.node(&s.name).map_or(0, |n| n.cluster))
        .collect();
    let net = NetModel::from_topology(&plan.topology);
    let overlay = check_statuses(&mine, &ids, &clusters, &net);
    let trees_with_foreign_parent = mine
        .iter()
        .flat_map(|s| s.trees.iter())
        .filter(|t| ids.contains(&t.root) && t.parent.is_some_and(|p| !ids.contains(&p)))
        .count();
    GroupCheck {
        expected,
        answering: mine.len(),
        overlay,
        trees_with_foreign_parent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn das4_plan() {
        let t = Topology::builtin("das-4").unwrap();
        let p = Plan::new(t, Some(3)).unwrap();
        assert_eq!(p.nodes.len(), 12);
        assert_eq!(p.nodes[0].name, "VU-1");
        assert_eq!(p.nodes[0].ip, Ipv4Addr::new(10, 77, 1, 2));
        assert_eq!(p.nodes[3].name, "Leiden-1");
        assert_eq!(p.nodes[11].ip, Ipv4Addr::new(10, 77, 4, 4));
        assert_eq!(p.topology.node_count(), 12);
        let lines = p.to_lines();
        assert!(lines.starts_with("topology das-4 12 4\n"), "{lines}");
        assert!(lines.contains("cluster 1 Leiden 3 10.77.2.0/24 10.77.2.1\n"));
        assert!(lines.contains("node Delft-3 3 3 10.77.4.4 7400\n"));
        assert!(lines.contains("link 0 1 3.5 5\n"), "{lines}");
        assert!(lines.contains("link 1 0 3.5 3.5\n"), "{lines}");
        assert_eq!(lines.lines().filter(|l| l.starts_with("link ")).count(), 12);
        assert_eq!(p.expected_rtt_ms(0, 1), 7.0);
        // Without an override, the topology's own counts.
        let p = Plan::new(Topology::builtin("das-4").unwrap(), None).unwrap();
        assert_eq!(p.nodes.len(), 40);
    }

    #[test]
    fn addresses_map_back_to_clusters() {
        assert_eq!(cluster_of_ip(node_ip(0, 1), 4), Some(0));
        assert_eq!(cluster_of_ip(node_ip(3, 253), 4), Some(3));
        assert_eq!(cluster_of_ip(gateway(2), 4), Some(2));
        assert_eq!(cluster_of_ip(node_ip(4, 1), 4), None);
        assert_eq!(cluster_of_ip(Ipv4Addr::new(10, 77, 0, 5), 4), None);
        assert_eq!(cluster_of_ip(Ipv4Addr::new(10, 78, 1, 5), 4), None);
    }

    #[test]
    fn rejects_what_cannot_be_laid_out() {
        let t = Topology::builtin("phoenix-27").unwrap();
        assert!(Plan::new(t.clone(), Some(0)).is_err());
        assert!(Plan::new(t.clone(), Some(254)).is_err());
        assert!(Plan::new(t, Some(253)).is_ok());
        let mut t = Topology::builtin("phoenix-27").unwrap();
        t.clusters[0].name = "a b".into();
        let e = Plan::new(t, None).unwrap_err();
        assert!(e.to_string().contains("\"a b\""), "{e}");
        assert!(valid_cluster_name("Leiden_2.x"));
        assert!(!valid_cluster_name(""));
        assert!(!valid_cluster_name("a/b"));
    }
}
