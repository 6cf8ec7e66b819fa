//! The network model: clusters, sites, a one-way latency matrix, bandwidths and partitions.

use super::groups::Groups;
use crate::proto::clusters::ClusterParams;
use crate::topology::Topology;
use std::collections::BTreeSet;
use std::time::Duration;

/// The simulated network: a dense latency matrix between clusters (O(1) lookups), the site
/// of every cluster, the clusters of the initial nodes, the partitioned cluster pairs, and
/// the latency-distinguishable groups of clusters the optimality verdict is judged on
/// ([`Groups`]).
#[derive(Clone, Debug)]
pub struct NetModel {
    name: String,
    cluster_names: Vec<String>,
    /// Row-major `k x k` one-way latencies, `latency[from * k + to]`.
    latency: Vec<Duration>,
    site_of: Vec<usize>,
    site_names: Vec<String>,
    has_sites: bool,
    initial: Vec<usize>,
    partitioned: BTreeSet<(usize, usize)>,
    groups: Groups,
    /// Per-node NIC bandwidth of every cluster, Mbit/s (`None`: unlimited).
    nic_mbit: Vec<Option<f64>>,
    /// Bandwidth of every directed link between two clusters, `[from * k + to]`, Mbit/s
    /// (`None`: unlimited; always `None` inside a cluster, where only the NICs limit).
    link_mbit: Vec<Option<f64>>,
}

impl NetModel {
    /// Builds the model of a topology file: its latency matrix, sites and initial nodes.
    pub fn from_topology(topo: &Topology) -> Self {
        let k = topo.clusters.len();
        let mut latency = Vec::with_capacity(k * k);
        for from in 0..k {
            for to in 0..k {
                latency.push(topo.latency(from, to));
            }
        }
        let site_of: Vec<usize> = (0..k).map(|c| topo.site_of(c)).collect();
        let sites = site_of.iter().copied().max().map_or(0, |m| m + 1);
        let mut site_names = vec![String::new(); sites];
        for (c, &s) in site_of.iter().enumerate() {
            if site_names[s].is_empty() {
                site_names[s] = topo.clusters[c]
                    .site
                    .clone()
                    .unwrap_or_else(|| topo.clusters[c].name.clone());
            }
        }
        NetModel {
            name: topo.name.clone(),
            cluster_names: topo.clusters.iter().map(|c| c.name.clone()).collect(),
            latency,
            groups: Groups::declared(&site_of),
            site_of,
            site_names,
            has_sites: topo.has_sites(),
            initial: topo.node_clusters(),
            partitioned: BTreeSet::new(),
            nic_mbit: topo.clusters.iter().map(|c| c.bandwidth_mbit).collect(),
            link_mbit: (0..k * k)
                .map(|i| (i / k != i % k).then(|| topo.bandwidth_mbit(i / k, i % k))?)
                .collect(),
        }
        .grouped(&ClusterParams::default())
    }

    /// Builds a model by hand (for tests): `latency[from][to]` is the one-way latency between
    /// clusters, `sites` gives each cluster's site (`None`: no sites, each cluster is its own),
    /// `initial` the cluster of every node started at t = 0.
    ///
    /// # Panics
    /// If the matrix is not square, `sites` has the wrong length, or an initial node names a
    /// cluster that does not exist.
    pub fn new(
        name: &str,
        cluster_names: &[&str],
        latency: &[Vec<Duration>],
        sites: Option<&[usize]>,
        initial: &[usize],
    ) -> Self {
        let k = cluster_names.len();
        assert_eq!(latency.len(), k, "latency matrix needs one row per cluster");
        assert!(
            latency.iter().all(|r| r.len() == k),
            "latency matrix must be square"
        );
        assert!(
            initial.iter().all(|&c| c < k),
            "initial node in an unknown cluster"
        );
        let site_of: Vec<usize> = match sites {
            Some(s) => {
                assert_eq!(s.len(), k, "one site per cluster");
                s.to_vec()
            }
            None => (0..k).collect(),
        };
        let n_sites = site_of.iter().copied().max().map_or(0, |m| m + 1);
        NetModel {
            name: name.to_string(),
            cluster_names: cluster_names.iter().map(|s| s.to_string()).collect(),
            latency: latency.iter().flatten().copied().collect(),
            groups: Groups::declared(&site_of),
            site_of,
            site_names: (0..n_sites).map(|s| format!("site{s}")).collect(),
            has_sites: sites.is_some(),
            initial: initial.to_vec(),
            partitioned: BTreeSet::new(),
            nic_mbit: vec![None; k],
            link_mbit: vec![None; k * k],
        }
        .grouped(&ClusterParams::default())
    }

    /// The same network with its verdict groups computed under `params` (the nodes'
    /// grouping rule; [`NetModel::from_topology`] and [`NetModel::new`] use the default
    /// one, and [`Sim`](super::Sim) the one of its core configuration).
    pub fn grouped(mut self, params: &ClusterParams) -> Self {
        self.groups = Groups::of(&self, params);
        self
    }

    /// The same network with bandwidths (for tests; [`NetModel::from_topology`] takes the
    /// file's): `nic[c]` is the per-node NIC bandwidth of cluster `c`, `links[from][to]`
    /// the bandwidth of the directed link between two clusters, in Mbit/s (`None`:
    /// unlimited; the diagonal is ignored, as inside a cluster only the NICs limit).
    ///
    /// # Panics
    /// If `nic` or `links` does not have one entry per cluster (per pair).
    pub fn with_bandwidth(mut self, nic: &[Option<f64>], links: &[Vec<Option<f64>>]) -> Self {
        let k = self.clusters();
        assert_eq!(nic.len(), k, "one NIC bandwidth per cluster");
        assert!(
            links.len() == k && links.iter().all(|r| r.len() == k),
            "one link bandwidth per pair of clusters"
        );
        self.nic_mbit = nic.to_vec();
        self.link_mbit = (0..k * k)
            .map(|i| (i / k != i % k).then(|| links[i / k][i % k])?)
            .collect();
        self
    }

    /// Per-node NIC bandwidth of cluster `c`, Mbit/s (`None`: unlimited).
    pub fn nic_mbit(&self, c: usize) -> Option<f64> {
        self.nic_mbit[c]
    }

    /// Bandwidth of the directed link from cluster `from` to cluster `to`, shared by every
    /// node of `from`, Mbit/s (`None`: unlimited, and always inside a cluster).
    pub fn link_mbit(&self, from: usize, to: usize) -> Option<f64> {
        self.link_mbit[from * self.clusters() + to]
    }

    /// Whether any NIC or link has a bandwidth (else the network is latency only).
    pub fn has_bandwidth(&self) -> bool {
        self.nic_mbit
            .iter()
            .chain(&self.link_mbit)
            .any(Option::is_some)
    }

    /// The latency-distinguishable groups of clusters the verdict is judged on.
    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// A readable name of cluster `c`'s group: the names of its clusters joined by `+`.
    pub fn group_name(&self, c: usize) -> String {
        let g = self.groups.group_of(c);
        let names: Vec<&str> = (0..self.clusters())
            .filter(|&x| self.groups.group_of(x) == g)
            .map(|x| self.cluster_names[x].as_str())
            .collect();
        names.join("+")
    }

    /// A readable name of site `s` as the verdict merged it: the names of the declared sites
    /// merged into it joined by `+`.
    pub fn merged_site_name(&self, s: usize) -> String {
        let mut names: Vec<&str> = Vec::new();
        for c in 0..self.clusters() {
            let declared = self.site_of[c];
            if self.groups.site_of(c) == s && !names.contains(&self.site_names[declared].as_str()) {
                names.push(&self.site_names[declared]);
            }
        }
        names.join("+")
    }

    /// The topology's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of clusters.
    pub fn clusters(&self) -> usize {
        self.cluster_names.len()
    }

    /// Name of cluster `c`.
    pub fn cluster_name(&self, c: usize) -> &str {
        &self.cluster_names[c]
    }

    /// Index of the cluster named `name`.
    pub fn cluster_index(&self, name: &str) -> Option<usize> {
        self.cluster_names.iter().position(|n| n == name)
    }

    /// One-way latency from a node of cluster `from` to a node of cluster `to`.
    pub fn latency(&self, from: usize, to: usize) -> Duration {
        self.latency[from * self.clusters() + to]
    }

    /// The smallest one-way latency between any two clusters (or inside one), in whole
    /// microseconds (rounded down): nothing sent arrives sooner.
    pub fn min_latency(&self) -> Duration {
        let min = self.latency.iter().min().copied().unwrap_or_default();
        Duration::from_micros(u64::try_from(min.as_micros()).unwrap_or(u64::MAX))
    }

    /// Whether the topology has a second (site) level.
    pub fn has_sites(&self) -> bool {
        self.has_sites
    }

    /// Site of cluster `c` (each cluster is its own site when there are no sites).
    pub fn site_of(&self, c: usize) -> usize {
        self.site_of[c]
    }

    /// Number of sites.
    pub fn sites(&self) -> usize {
        self.site_names.len()
    }

    /// Name of site `s`.
    pub fn site_name(&self, s: usize) -> &str {
        &self.site_names[s]
    }

    /// Cluster of every node started at t = 0, in node-index order.
    pub fn initial_clusters(&self) -> &[usize] {
        &self.initial
    }

    /// Cuts all traffic between clusters `a` and `b` (both directions; `a == b` cuts the
    /// cluster's internal traffic).
    pub fn partition(&mut self, a: usize, b: usize) {
        self.partitioned.insert(pair(a, b));
    }

    /// Restores the traffic between clusters `a` and `b`.
    pub fn heal(&mut self, a: usize, b: usize) {
        self.partitioned.remove(&pair(a, b));
    }

    /// Whether traffic between clusters `a` and `b` is currently cut.
    pub fn is_partitioned(&self, a: usize, b: usize) -> bool {
        !self.partitioned.is_empty() && self.partitioned.contains(&pair(a, b))
    }
}

fn pair(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}
