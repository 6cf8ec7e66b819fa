//! (in progress) Loader for the topology files of `topologies/` (format: topologies/README.md).
use std::path::Path;
use std::time::Duration;

/// One cluster of a topology.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    /// Cluster name, unique in the file.
    pub name: String,
    /// How many nodes a scenario starts in this cluster.
    pub nodes: usize,
    /// One-way latency between two nodes of this cluster.
    pub latency: Duration,
    /// Per-node link bandwidth inside the cluster, if given.
    pub bandwidth_mbit: Option<f64>,
    /// Site name (second level), if given.
    pub site: Option<String>,
}

/// A parsed topology: clusters and the one-way latency between every ordered pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// The `name` field.
    pub name: String,
    /// The `source` field.
    pub source: String,
    /// Clusters in file order.
    pub clusters: Vec<Cluster>,
}

/// Why a topology could not be loaded: names the file, the line (when known) and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {problem}")]
pub struct TopologyError {
    /// The file (or origin name) being loaded.
    pub file: String,
    /// 1-based line of the problem (0 when it concerns the whole file).
    pub line: usize,
    /// What is wrong.
    pub problem: String,
}

impl Topology {
    /// Reads and parses a topology file.
    pub fn load(path: impl AsRef<Path>) -> Result<Topology, TopologyError> { let _ = path; unimplemented!() }
    /// Parses topology text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Topology, TopologyError> { let _ = (text, origin); unimplemented!() }
    /// A topology shipped inside the binary, by file stem (e.g. "phoenix-27").
    pub fn builtin(name: &str) -> Option<Topology> { let _ = name; unimplemented!() }
    /// One-way latency from a node of cluster `from` to a node of cluster `to` (indices).
    pub fn latency(&self, from: usize, to: usize) -> Duration { let _ = (from, to); unimplemented!() }
    /// Bandwidth from cluster `from` to cluster `to`, if given.
    pub fn bandwidth_mbit(&self, from: usize, to: usize) -> Option<f64> { let _ = (from, to); unimplemented!() }
    /// Total nodes over all clusters.
    pub fn node_count(&self) -> usize { self.clusters.iter().map(|c| c.nodes).sum() }
    /// Cluster index of every node, nodes numbered cluster by cluster in file order.
    pub fn node_clusters(&self) -> Vec<usize> { unimplemented!() }
    /// Whether any cluster names a site.
    pub fn has_sites(&self) -> bool { self.clusters.iter().any(|c| c.site.is_some()) }
    /// Site index of a cluster (clusters without a site are each their own site).
    pub fn site_of(&self, cluster: usize) -> usize { let _ = cluster; unimplemented!() }
    /// Index of the cluster named `name`.
    pub fn cluster_index(&self, name: &str) -> Option<usize> { self.clusters.iter().position(|c| c.name == name) }
}
