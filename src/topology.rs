//! Loader for the topology files of `topologies/` (format: `topologies/README.md`).
//!
//! A topology is a list of clusters (each with a node count, an intra-cluster one-way latency
//! and optionally a bandwidth and a site) plus a link between every pair of clusters. The
//! loader validates the whole file and precomputes a cluster-by-cluster latency and bandwidth
//! matrix, so [`Topology::latency`] and [`Topology::bandwidth_mbit`] are O(1) lookups (the
//! simulator calls them once per message).
//!
//! What a pipe of a given bandwidth does to a datagram (serialization, a bounded buffer,
//! tail drop) is [`timeline`]: pure arithmetic on time, for virtual and real time alike.
//!
//! Every problem is reported as a [`TopologyError`] naming the file, the 1-based line and what
//! is wrong; no input makes the loader panic.
//!
//! ```
//! use overlay::topology::Topology;
//! let t = Topology::builtin("phoenix-27").unwrap();
//! assert_eq!(t.node_count(), 27);
//! let (a, b) = (t.cluster_index("A").unwrap(), t.cluster_index("B").unwrap());
//! assert_eq!(t.latency(a, b).as_secs_f64(), 0.015);
//! ```
use std::time::Duration;

mod parse;
pub mod timeline;

/// Most nodes a topology may declare in total (a guard against absurd node counts).
pub const MAX_NODES: usize = 1 << 24;

/// The topology files shipped in `topologies/`, by file stem, with their text.
const BUILTIN: &[(&str, &str)] = &[
    (
        "fig2-shortcut",
        include_str!("../topologies/fig2-shortcut.toml"),
    ),
    ("phoenix-27", include_str!("../topologies/phoenix-27.toml")),
    (
        "phoenix-168",
        include_str!("../topologies/phoenix-168.toml"),
    ),
    ("das-4", include_str!("../topologies/das-4.toml")),
    ("sites-64", include_str!("../topologies/sites-64.toml")),
    ("scale-1000", include_str!("../topologies/scale-1000.toml")),
    ("split-site", include_str!("../topologies/split-site.toml")),
    (
        "field-station",
        include_str!("../topologies/field-station.toml"),
    ),
];

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
///
/// The latency and bandwidth matrices are computed when the topology is parsed; changing
/// [`Cluster::latency`] or [`Cluster::bandwidth_mbit`] afterwards does not change what
/// [`Topology::latency`] and [`Topology::bandwidth_mbit`] return.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// The `name` field.
    pub name: String,
    /// The `source` field.
    pub source: String,
    /// Clusters in file order.
    pub clusters: Vec<Cluster>,
    /// One-way latency, row-major `[from * n + to]`; the diagonal is the intra-cluster latency.
    latency: Vec<Duration>,
    /// Bandwidth, same layout as `latency`.
    bandwidth: Vec<Option<f64>>,
    /// Site index of every cluster.
    sites: Vec<usize>,
    /// Number of distinct sites.
    site_count: usize,
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
    /// A topology shipped inside the binary, by file stem (e.g. "phoenix-27").
    ///
    /// The shipped files are those listed by [`Topology::builtin_names`]; any other name
    /// gives `None`.
    pub fn builtin(name: &str) -> Option<Topology> {
        let (stem, text) = BUILTIN.iter().find(|(stem, _)| *stem == name)?;
        let origin = format!("topologies/{stem}.toml");
        // The unit tests parse every shipped file, so this cannot fail in a tested build.
        Some(Topology::parse(text, &origin).expect("shipped topology file must parse"))
    }

    /// The text of a shipped topology file, by file stem (seeds for fuzzing the parser).
    pub fn builtin_text(name: &str) -> Option<&'static str> {
        BUILTIN
            .iter()
            .find(|(stem, _)| *stem == name)
            .map(|&(_, text)| text)
    }

    /// File stems of the topologies available through [`Topology::builtin`].
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        BUILTIN.iter().map(|(stem, _)| *stem)
    }

    /// One-way latency from a node of cluster `from` to a node of cluster `to` (indices).
    ///
    /// `from == to` gives the cluster's intra-cluster latency. O(1).
    ///
    /// # Panics
    /// If either index is not below `clusters.len()`.
    pub fn latency(&self, from: usize, to: usize) -> Duration {
        self.latency[self.cell(from, to)]
    }

    /// Bandwidth from cluster `from` to cluster `to`, if given.
    ///
    /// `from == to` gives the cluster's intra-cluster bandwidth. O(1).
    ///
    /// # Panics
    /// If either index is not below `clusters.len()`.
    pub fn bandwidth_mbit(&self, from: usize, to: usize) -> Option<f64> {
        self.bandwidth[self.cell(from, to)]
    }

    /// Matrix cell of an ordered pair of cluster indices.
    fn cell(&self, from: usize, to: usize) -> usize {
        let n = self.sites.len();
        assert!(
            from < n && to < n,
            "cluster index out of range: ({from}, {to}) with {n} clusters"
        );
        from * n + to
    }

    /// The same topology with every cluster's node count multiplied by `factor` (rounded,
    /// at least one node per cluster): same clusters, sites, latency and bandwidth
    /// matrices, only more or fewer nodes. Named `<name>-x<factor>`; how it was derived is
    /// appended to `source`. Used to measure how traffic grows with the number of nodes
    /// without inventing latencies (e.g. 500 and 2000 nodes from scale-1000).
    ///
    /// # Panics
    /// If `factor` is not a positive finite number.
    pub fn scaled(&self, factor: f64) -> Topology {
        assert!(
            factor.is_finite() && factor > 0.0,
            "scale factor must be positive"
        );
        let mut t = self.clone();
        for c in &mut t.clusters {
            c.nodes = ((c.nodes as f64 * factor).round() as usize).max(1);
        }
        t.name = format!("{}-x{factor}", self.name);
        t.source = format!(
            "{} Derived: every cluster's node count of {} multiplied by {factor} ({} nodes); same latency matrix.",
            self.source,
            self.name,
            t.node_count()
        );
        t
    }

    /// The same topology with the directed link `from` -> `to` at `mbit` Mbit/s: what the
    /// network looks like after that link changed (e.g. to report the bound after an
    /// emulated link was slowed mid-run).
    ///
    /// # Panics
    /// If either index is not below `clusters.len()`.
    pub fn with_link_bandwidth(&self, from: usize, to: usize, mbit: f64) -> Topology {
        let mut t = self.clone();
        let cell = t.cell(from, to);
        t.bandwidth[cell] = Some(mbit);
        t
    }

    /// The same topology in dilated time: every latency multiplied by `factor` and every
    /// bandwidth divided by it, so that a message takes `factor` times as long everywhere.
    /// Nodes, clusters and sites are unchanged. Named `<name>-dilated-x<factor>`.
    ///
    /// This is time dilation for emulation (as in Gupta et al., "To Infinity and Beyond:
    /// Time-Warped Network Emulation", NSDI 2006): many real nodes share few cores, so the
    /// network is slowed instead, and each node's CPU looks `factor` times faster against
    /// it. Times measured on it are divided by `factor` to read in the original's time.
    /// A factor of 0 is taken as 1.
    pub fn dilated(&self, factor: u32) -> Topology {
        let k = factor.max(1);
        let mut t = self.clone();
        for c in &mut t.clusters {
            c.latency *= k;
            c.bandwidth_mbit = c.bandwidth_mbit.map(|b| b / f64::from(k));
        }
        for l in &mut t.latency {
            *l *= k;
        }
        for b in t.bandwidth.iter_mut().flatten() {
            *b /= f64::from(k);
        }
        if k > 1 {
            t.name = format!("{}-dilated-x{k}", self.name);
            t.source = format!(
                "{} Derived: {} in time dilated x{k} (every latency times {k}, every bandwidth divided by {k}).",
                self.source, self.name
            );
        }
        t
    }

    /// Total nodes over all clusters.
    pub fn node_count(&self) -> usize {
        self.clusters.iter().map(|c| c.nodes).sum()
    }

    /// Cluster index of every node, nodes numbered cluster by cluster in file order.
    pub fn node_clusters(&self) -> Vec<usize> {
        self.clusters
            .iter()
            .enumerate()
            .flat_map(|(i, c)| std::iter::repeat_n(i, c.nodes))
            .collect()
    }

    /// Whether any cluster names a site.
    pub fn has_sites(&self) -> bool {
        self.clusters.iter().any(|c| c.site.is_some())
    }

    /// Site index of a cluster (clusters without a site are each their own site).
    ///
    /// Sites are numbered from 0 in order of first appearance in the file; a cluster without
    /// a site takes the next number at its position.
    ///
    /// # Panics
    /// If `cluster` is not below `clusters.len()`.
    pub fn site_of(&self, cluster: usize) -> usize {
        self.sites[cluster]
    }

    /// Number of distinct sites (counting each cluster without a site as one).
    pub fn site_count(&self) -> usize {
        self.site_count
    }

    /// Index of the cluster named `name`.
    pub fn cluster_index(&self, name: &str) -> Option<usize> {
        self.clusters.iter().position(|c| c.name == name)
    }
}

#[cfg(test)]
mod tests;
