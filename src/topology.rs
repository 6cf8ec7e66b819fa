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
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

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

/// The file as written, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    name: String,
    source: String,
    #[serde(default)]
    cluster: Vec<Spanned<RawCluster>>,
    #[serde(default)]
    link: Vec<Spanned<RawLink>>,
}

/// One `[[cluster]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: Spanned<String>,
    nodes: Spanned<i64>,
    latency_ms: Spanned<f64>,
    bandwidth_mbit: Option<Spanned<f64>>,
    site: Option<Spanned<String>>,
}

/// One `[[link]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    from: Spanned<String>,
    to: Spanned<String>,
    latency_ms: Spanned<f64>,
    bandwidth_mbit: Option<Spanned<f64>>,
}

/// A validated link in one direction.
struct Link {
    latency: Duration,
    bandwidth: Option<f64>,
    line: usize,
}

/// Builds errors for one origin, turning byte offsets into 1-based line numbers.
struct Reporter<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Reporter<'_> {
    /// 1-based line holding byte `offset` (clamped to the text).
    fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        1 + self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
    }

    /// An error at byte `offset`.
    fn at(&self, offset: usize, problem: impl Into<String>) -> TopologyError {
        self.at_line(self.line_of(offset), problem)
    }

    /// An error at a known line (0: the whole file).
    fn at_line(&self, line: usize, problem: impl Into<String>) -> TopologyError {
        TopologyError {
            file: self.origin.to_string(),
            line,
            problem: problem.into(),
        }
    }

    /// Checks a latency in milliseconds: finite, not negative, representable as a Duration.
    fn latency(&self, value: &Spanned<f64>, what: &str) -> Result<Duration, TopologyError> {
        let ms = *value.get_ref();
        if !ms.is_finite() || ms < 0.0 {
            return Err(self.at(
                value.span().start,
                format!("{what}: latency_ms must be a finite number >= 0, got {ms}"),
            ));
        }
        Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| {
            self.at(
                value.span().start,
                format!("{what}: latency_ms {ms} is too large"),
            )
        })
    }

    /// Checks an optional bandwidth in Mbit/s: finite and positive.
    fn bandwidth(
        &self,
        value: &Option<Spanned<f64>>,
        what: &str,
    ) -> Result<Option<f64>, TopologyError> {
        let Some(value) = value else { return Ok(None) };
        let mbit = *value.get_ref();
        if !mbit.is_finite() || mbit <= 0.0 {
            return Err(self.at(
                value.span().start,
                format!("{what}: bandwidth_mbit must be a finite number > 0, got {mbit}"),
            ));
        }
        Ok(Some(mbit))
    }
}

impl Topology {
    /// Reads and parses a topology file.
    ///
    /// Errors name the path as given; an unreadable file is reported at line 0 with the
    /// operating system's error.
    pub fn load(path: impl AsRef<Path>) -> Result<Topology, TopologyError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| TopologyError {
            file: origin.clone(),
            line: 0,
            problem: format!("cannot read file: {e}"),
        })?;
        Topology::parse(&text, &origin)
    }

    /// Parses topology text; `origin` names it in errors.
    ///
    /// Checks the whole format of `topologies/README.md`: required and unknown fields, at
    /// least one cluster, unique cluster names, at least one node per cluster, finite
    /// non-negative latencies, finite positive bandwidths, links only between distinct known
    /// clusters, at most one link per direction, and a link for every pair of clusters.
    pub fn parse(text: &str, origin: &str) -> Result<Topology, TopologyError> {
        let rep = Reporter { text, origin };
        let raw: RawTopology = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| rep.line_of(s.start));
            rep.at_line(line, e.message().trim_end())
        })?;

        if raw.cluster.is_empty() {
            return Err(rep.at_line(0, "no clusters: at least one [[cluster]] is required"));
        }

        // Clusters.
        let mut clusters = Vec::with_capacity(raw.cluster.len());
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut lines = Vec::with_capacity(raw.cluster.len());
        let mut total_nodes: usize = 0;
        for raw_cluster in &raw.cluster {
            let c = raw_cluster.get_ref();
            let name = c.name.get_ref();
            let name_line = rep.line_of(c.name.span().start);
            if name.is_empty() {
                return Err(rep.at_line(name_line, "cluster name must not be empty"));
            }
            if let Some(&first) = index.get(name.as_str()) {
                return Err(rep.at_line(
                    name_line,
                    format!(
                        "duplicate cluster name \"{name}\" (first defined at line {})",
                        lines[first]
                    ),
                ));
            }
            let what = format!("cluster \"{name}\"");
            let nodes = *c.nodes.get_ref();
            if nodes < 1 {
                return Err(rep.at(
                    c.nodes.span().start,
                    format!("{what}: nodes must be at least 1, got {nodes}"),
                ));
            }
            let nodes = usize::try_from(nodes).unwrap_or(usize::MAX);
            total_nodes = total_nodes.saturating_add(nodes);
            if total_nodes > MAX_NODES {
                return Err(rep.at(
                    c.nodes.span().start,
                    format!("{what}: too many nodes (more than {MAX_NODES} in total)"),
                ));
            }
            let latency = rep.latency(&c.latency_ms, &what)?;
            let bandwidth_mbit = rep.bandwidth(&c.bandwidth_mbit, &what)?;
            let site = match &c.site {
                Some(site) if site.get_ref().is_empty() => {
                    return Err(
                        rep.at(site.span().start, format!("{what}: site must not be empty"))
                    );
                }
                Some(site) => Some(site.get_ref().clone()),
                None => None,
            };
            index.insert(name.as_str(), clusters.len());
            lines.push(name_line);
            clusters.push(Cluster {
                name: name.clone(),
                nodes,
                latency,
                bandwidth_mbit,
                site,
            });
        }
        let n = clusters.len();

        // Links, by ordered pair of cluster indices.
        let mut links: HashMap<(usize, usize), Link> = HashMap::new();
        for raw_link in &raw.link {
            let l = raw_link.get_ref();
            let line = rep.line_of(raw_link.span().start);
            let lookup = |end: &Spanned<String>, field: &str| {
                index.get(end.get_ref().as_str()).copied().ok_or_else(|| {
                    rep.at(
                        end.span().start,
                        format!("link {field} unknown cluster \"{}\"", end.get_ref()),
                    )
                })
            };
            let from = lookup(&l.from, "from")?;
            let to = lookup(&l.to, "to")?;
            let what = format!("link {} -> {}", l.from.get_ref(), l.to.get_ref());
            if from == to {
                return Err(rep.at(
                    l.to.span().start,
                    format!("{what}: a link must join two different clusters"),
                ));
            }
            let latency = rep.latency(&l.latency_ms, &what)?;
            let bandwidth = rep.bandwidth(&l.bandwidth_mbit, &what)?;
            if let Some(first) = links.get(&(from, to)) {
                return Err(rep.at_line(
                    line,
                    format!("duplicate {what} (first given at line {})", first.line),
                ));
            }
            links.insert(
                (from, to),
                Link {
                    latency,
                    bandwidth,
                    line,
                },
            );
        }

        // Every pair needs a link. Checked before the n*n matrix is allocated, so its size is
        // bounded by the number of links actually written in the file.
        for a in 0..n {
            for b in a + 1..n {
                if !links.contains_key(&(a, b)) && !links.contains_key(&(b, a)) {
                    return Err(rep.at_line(
                        0,
                        format!(
                            "missing link between clusters \"{}\" and \"{}\"",
                            clusters[a].name, clusters[b].name
                        ),
                    ));
                }
            }
        }

        let mut latency = vec![Duration::ZERO; n * n];
        let mut bandwidth = vec![None; n * n];
        for (i, c) in clusters.iter().enumerate() {
            latency[i * n + i] = c.latency;
            bandwidth[i * n + i] = c.bandwidth_mbit;
        }
        for a in 0..n {
            for b in 0..n {
                if a == b {
                    continue;
                }
                // Own direction if given, else the reverse one (symmetric link).
                let link = links.get(&(a, b)).or_else(|| links.get(&(b, a)));
                if let Some(link) = link {
                    latency[a * n + b] = link.latency;
                    bandwidth[a * n + b] = link.bandwidth;
                }
            }
        }

        // Sites, numbered by first appearance; a cluster without a site is its own site.
        let mut site_index: HashMap<&str, usize> = HashMap::new();
        let mut sites = Vec::with_capacity(n);
        let mut site_count = 0;
        for c in &clusters {
            let s = match &c.site {
                Some(name) => *site_index.entry(name.as_str()).or_insert_with(|| {
                    site_count += 1;
                    site_count - 1
                }),
                None => {
                    site_count += 1;
                    site_count - 1
                }
            };
            sites.push(s);
        }

        Ok(Topology {
            name: raw.name,
            source: raw.source,
            clusters,
            latency,
            bandwidth,
            sites,
            site_count,
        })
    }

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
mod tests {
    use super::*;

    #[test]
    fn scaled_keeps_the_matrix_and_multiplies_the_nodes() {
        let t = Topology::builtin("phoenix-27").expect("shipped");
        let d = t.scaled(2.0);
        assert_eq!(d.node_count(), 2 * t.node_count());
        assert_eq!(d.clusters.len(), t.clusters.len());
        for a in 0..t.clusters.len() {
            for b in 0..t.clusters.len() {
                assert_eq!(d.latency(a, b), t.latency(a, b));
            }
        }
        assert!(d.name.ends_with("-x2"), "{}", d.name);
        assert!(t.scaled(0.01).clusters.iter().all(|c| c.nodes == 1));
    }

    #[test]
    fn dilated_multiplies_every_latency_and_divides_every_bandwidth() {
        let t = Topology::builtin("phoenix-27").expect("shipped");
        let d = t.dilated(10);
        assert_eq!(d.node_count(), t.node_count());
        assert_eq!(d.node_clusters(), t.node_clusters());
        for a in 0..t.clusters.len() {
            for b in 0..t.clusters.len() {
                assert_eq!(d.latency(a, b), t.latency(a, b) * 10);
                let (bw, dbw) = (t.bandwidth_mbit(a, b), d.bandwidth_mbit(a, b));
                assert_eq!(bw.is_some(), dbw.is_some());
                if let (Some(x), Some(y)) = (bw, dbw) {
                    assert!((x / 10.0 - y).abs() < 1e-9, "{x} {y}");
                }
            }
            assert_eq!(d.clusters[a].latency, t.clusters[a].latency * 10);
        }
        assert!(d.name.ends_with("-dilated-x10"), "{}", d.name);
        // 0 and 1 leave it as it is.
        assert_eq!(t.dilated(1), t);
        assert_eq!(t.dilated(0), t);
    }

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64(x / 1000.0)
    }

    /// Parses `text` expecting an error; returns it.
    fn err(text: &str) -> TopologyError {
        match Topology::parse(text, "test.toml") {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(e) => e,
        }
    }

    /// Asserts the error is at `line` and its message contains every one of `words`.
    fn assert_err(text: &str, line: usize, words: &[&str]) {
        let e = err(text);
        let shown = e.to_string();
        assert_eq!(e.file, "test.toml", "{shown}");
        assert_eq!(e.line, line, "wrong line in: {shown}");
        assert!(
            shown.starts_with(&format!("test.toml:{line}: ")),
            "bad format: {shown}"
        );
        for w in words {
            assert!(shown.contains(w), "{shown:?} does not mention {w:?}");
        }
    }

    const HEAD: &str = "name = \"t\"\nsource = \"s\"\n";

    /// Two clusters A (2 nodes) and B (3 nodes) and one link, after HEAD (lines 3..).
    fn two() -> String {
        format!(
            "{HEAD}[[cluster]]\nname = \"A\"\nnodes = 2\nlatency_ms = 0.1\n\
             [[cluster]]\nname = \"B\"\nnodes = 3\nlatency_ms = 0.2\n"
        )
    }

    #[test]
    fn shipped_topologies_parse() {
        let expected = [
            ("fig2-shortcut", 3, 3),
            ("phoenix-27", 3, 27),
            ("phoenix-168", 3, 168),
            ("das-4", 4, 40),
            ("sites-64", 8, 64),
            ("scale-1000", 10, 1000),
            ("split-site", 5, 40),
        ];
        assert_eq!(Topology::builtin_names().count(), expected.len());
        for (name, clusters, nodes) in expected {
            let t = Topology::builtin(name).unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(t.name, name);
            assert!(!t.source.is_empty());
            assert_eq!(t.clusters.len(), clusters, "{name}");
            assert_eq!(t.node_count(), nodes, "{name}");
            assert_eq!(t.node_clusters().len(), nodes, "{name}");
            // Also through load(), from the repository's file.
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("topologies")
                .join(format!("{name}.toml"));
            let loaded = Topology::load(&path).unwrap();
            assert_eq!(loaded, t);
        }
        assert!(Topology::builtin("nope").is_none());
    }

    #[test]
    fn cluster_sizes_and_node_numbering() {
        let t = Topology::builtin("phoenix-168").unwrap();
        let sizes: Vec<usize> = t.clusters.iter().map(|c| c.nodes).collect();
        assert_eq!(sizes, [100, 65, 3]);
        let nc = t.node_clusters();
        assert_eq!(nc[0], 0);
        assert_eq!(nc[99], 0);
        assert_eq!(nc[100], 1);
        assert_eq!(nc[164], 1);
        assert_eq!(nc[165], 2);
        assert_eq!(nc[167], 2);
        let t = Topology::builtin("phoenix-27").unwrap();
        let sizes: Vec<usize> = t.clusters.iter().map(|c| c.nodes).collect();
        assert_eq!(sizes, [3, 12, 12]);
    }

    #[test]
    fn das4_asymmetric_links() {
        let t = Topology::builtin("das-4").unwrap();
        let vu = t.cluster_index("VU").unwrap();
        let leiden = t.cluster_index("Leiden").unwrap();
        let uva = t.cluster_index("UvA").unwrap();
        let delft = t.cluster_index("Delft").unwrap();
        // Latency is the same both ways in the paper; bandwidth differs.
        assert_eq!(t.latency(vu, leiden), ms(3.5));
        assert_eq!(t.latency(leiden, vu), ms(3.5));
        assert_eq!(t.bandwidth_mbit(vu, leiden), Some(5.0));
        assert_eq!(t.bandwidth_mbit(leiden, vu), Some(3.5));
        assert_eq!(t.bandwidth_mbit(uva, delft), Some(7.5));
        assert_eq!(t.bandwidth_mbit(delft, uva), Some(6.5));
        assert_eq!(t.latency(leiden, delft), ms(4.0));
        // Intra-cluster.
        assert_eq!(t.latency(vu, vu), ms(0.02));
        assert_eq!(t.bandwidth_mbit(vu, vu), Some(400.0));
    }

    #[test]
    fn one_direction_is_symmetric() {
        let t = Topology::builtin("phoenix-168").unwrap();
        let (a, b, c) = (0, 1, 2);
        assert_eq!(t.latency(a, b), ms(15.0));
        assert_eq!(t.latency(b, a), ms(15.0));
        assert_eq!(t.latency(c, a), ms(25.0));
        assert_eq!(t.latency(c, b), ms(20.0));
        assert_eq!(t.bandwidth_mbit(b, a), Some(100.0));
        assert_eq!(t.latency(a, a), ms(0.1));
        assert_eq!(t.bandwidth_mbit(c, c), Some(1000.0));
    }

    #[test]
    fn both_directions_use_their_own_numbers() {
        let text = format!(
            "{}[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 10\nbandwidth_mbit = 50\n\
             [[link]]\nfrom = \"B\"\nto = \"A\"\nlatency_ms = 12.5\n",
            two()
        );
        let t = Topology::parse(&text, "x").unwrap();
        assert_eq!(t.latency(0, 1), ms(10.0));
        assert_eq!(t.latency(1, 0), ms(12.5));
        assert_eq!(t.bandwidth_mbit(0, 1), Some(50.0));
        assert_eq!(t.bandwidth_mbit(1, 0), None);
        assert_eq!(t.latency(1, 1), ms(0.2));
        assert_eq!(t.bandwidth_mbit(0, 0), None);
        assert_eq!(t.node_clusters(), [0, 0, 1, 1, 1]);
    }

    #[test]
    fn sites() {
        let t = Topology::builtin("sites-64").unwrap();
        assert!(t.has_sites());
        assert_eq!(t.site_count(), 4);
        let sites: Vec<usize> = (0..8).map(|c| t.site_of(c)).collect();
        assert_eq!(sites, [0, 0, 1, 1, 2, 2, 3, 3]);
        assert_eq!(t.clusters[2].site.as_deref(), Some("ANL"));

        let t = Topology::builtin("phoenix-27").unwrap();
        assert!(!t.has_sites());
        assert_eq!(t.site_count(), 3);
        let sites: Vec<usize> = (0..3).map(|c| t.site_of(c)).collect();
        assert_eq!(sites, [0, 1, 2]);
    }

    #[test]
    fn clusters_without_site_are_their_own_site() {
        let mut text = String::from(HEAD);
        for (name, site) in [("A", Some("x")), ("B", None), ("C", Some("x")), ("D", None)] {
            text += &format!("[[cluster]]\nname = \"{name}\"\nnodes = 1\nlatency_ms = 0\n");
            if let Some(s) = site {
                text += &format!("site = \"{s}\"\n");
            }
        }
        for (a, b) in [
            ("A", "B"),
            ("A", "C"),
            ("A", "D"),
            ("B", "C"),
            ("B", "D"),
            ("C", "D"),
        ] {
            text += &format!("[[link]]\nfrom = \"{a}\"\nto = \"{b}\"\nlatency_ms = 1\n");
        }
        let t = Topology::parse(&text, "x").unwrap();
        assert!(t.has_sites());
        let sites: Vec<usize> = (0..4).map(|c| t.site_of(c)).collect();
        assert_eq!(sites, [0, 1, 0, 2]);
        assert_eq!(t.site_count(), 3);
    }

    #[test]
    fn single_cluster_needs_no_links() {
        let text = format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 4\nlatency_ms = 0.5\n");
        let t = Topology::parse(&text, "x").unwrap();
        assert_eq!(t.node_count(), 4);
        assert_eq!(t.latency(0, 0), ms(0.5));
    }

    // ---- errors, one test per kind ----

    #[test]
    fn error_missing_file_names_path() {
        let e = Topology::load("no/such/dir/missing.toml").unwrap_err();
        let shown = e.to_string();
        assert_eq!(e.file, "no/such/dir/missing.toml");
        assert_eq!(e.line, 0);
        assert!(shown.starts_with("no/such/dir/missing.toml:0: cannot read file: "));
        assert!(shown.to_lowercase().contains("no such file"), "{shown}");
    }

    #[test]
    fn error_toml_syntax() {
        assert_err(
            &format!("{HEAD}[[cluster]]\nname = \"A\nnodes = 1\n"),
            4,
            &[],
        );
        assert_err(&format!("{HEAD}[[cluster]\n"), 3, &[]);
    }

    #[test]
    fn error_missing_field() {
        assert_err(
            &format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\n"),
            3,
            &["missing field", "latency_ms"],
        );
        assert_err(
            "source = \"s\"\n[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\n",
            1,
            &["missing field", "name"],
        );
        assert_err(
            &format!("{}[[link]]\nfrom = \"A\"\nlatency_ms = 1\n", two()),
            11,
            &["missing field", "to"],
        );
    }

    #[test]
    fn error_unknown_field() {
        assert_err(
            &format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency = 1\n"),
            6,
            &["unknown field", "latency"],
        );
        assert_err(
            &format!(
                "{HEAD}colour = \"red\"\n[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\n"
            ),
            3,
            &["unknown field", "colour"],
        );
        assert_err(
            &format!(
                "{}[[links]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 1\n",
                two()
            ),
            11,
            &["unknown field", "links"],
        );
    }

    #[test]
    fn error_wrong_type() {
        assert_err(
            &format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = \"many\"\nlatency_ms = 1\n"),
            5,
            &["invalid type"],
        );
        assert_err(
            &format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1.5\nlatency_ms = 1\n"),
            5,
            &["invalid type"],
        );
    }

    #[test]
    fn error_duplicate_cluster() {
        let text = format!(
            "{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\n\
             [[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\n"
        );
        assert_err(&text, 8, &["duplicate cluster", "\"A\"", "line 4"]);
    }

    #[test]
    fn error_link_unknown_cluster() {
        let text = format!(
            "{}[[link]]\nfrom = \"A\"\nto = \"Z\"\nlatency_ms = 1\n",
            two()
        );
        assert_err(&text, 13, &["unknown cluster", "\"Z\""]);
        let text = format!(
            "{}[[link]]\nfrom = \"Y\"\nto = \"B\"\nlatency_ms = 1\n",
            two()
        );
        assert_err(&text, 12, &["unknown cluster", "\"Y\""]);
    }

    #[test]
    fn error_link_to_itself() {
        let text = format!(
            "{}[[link]]\nfrom = \"A\"\nto = \"A\"\nlatency_ms = 1\n",
            two()
        );
        assert_err(&text, 13, &["A -> A", "two different clusters"]);
    }

    #[test]
    fn error_duplicate_link() {
        let text = format!(
            "{}[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 1\n\
             [[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 2\n",
            two()
        );
        assert_err(&text, 15, &["duplicate link A -> B", "line 11"]);
    }

    #[test]
    fn error_bad_latency() {
        for (value, word) in [
            ("-1.0", "-1"),
            ("nan", "NaN"),
            ("inf", "inf"),
            ("-inf", "-inf"),
        ] {
            let text =
                format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = {value}\n");
            assert_err(&text, 6, &["cluster \"A\"", "latency_ms", word]);
            let text = format!(
                "{}[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = {value}\n",
                two()
            );
            assert_err(&text, 14, &["link A -> B", "latency_ms", word]);
        }
        let text = format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1e300\n");
        assert_err(&text, 6, &["too large"]);
    }

    #[test]
    fn error_bad_bandwidth() {
        for value in ["-5", "0", "nan", "inf"] {
            let text = format!(
                "{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\nbandwidth_mbit = {value}\n"
            );
            assert_err(&text, 7, &["cluster \"A\"", "bandwidth_mbit"]);
            let text = format!(
                "{}[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 1\nbandwidth_mbit = {value}\n",
                two()
            );
            assert_err(&text, 15, &["link A -> B", "bandwidth_mbit"]);
        }
    }

    #[test]
    fn error_bad_node_count() {
        for value in ["0", "-3"] {
            let text =
                format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = {value}\nlatency_ms = 1\n");
            assert_err(
                &text,
                5,
                &["cluster \"A\"", "nodes must be at least 1", value],
            );
        }
        let text = format!(
            "{HEAD}[[cluster]]\nname = \"A\"\nnodes = 9223372036854775807\nlatency_ms = 1\n"
        );
        assert_err(&text, 5, &["too many nodes"]);
    }

    #[test]
    fn error_empty_names() {
        let text = format!("{HEAD}[[cluster]]\nname = \"\"\nnodes = 1\nlatency_ms = 1\n");
        assert_err(&text, 4, &["name must not be empty"]);
        let text =
            format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\nsite = \"\"\n");
        assert_err(&text, 7, &["site must not be empty"]);
    }

    #[test]
    fn error_no_clusters() {
        assert_err(HEAD, 0, &["no clusters"]);
        assert_err(&format!("{HEAD}cluster = []\n"), 0, &["no clusters"]);
    }

    #[test]
    fn error_missing_pair() {
        assert_err(&two(), 0, &["missing link", "\"A\"", "\"B\""]);
        let mut text = String::from(HEAD);
        for name in ["A", "B", "C"] {
            text += &format!("[[cluster]]\nname = \"{name}\"\nnodes = 1\nlatency_ms = 0\n");
        }
        text += "[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 1\n";
        text += "[[link]]\nfrom = \"C\"\nto = \"A\"\nlatency_ms = 1\n";
        assert_err(&text, 0, &["missing link", "\"B\" and \"C\""]);
    }

    #[test]
    fn never_panics_on_damaged_input() {
        // Every prefix of every shipped file, and files with bytes overwritten by a cheap
        // deterministic generator: parse must return, never panic.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let junk = b"[]=\"\n.-0123456789e#ABnaif ,{}";
        for (_, text) in BUILTIN {
            let bytes = text.as_bytes();
            for cut in (0..bytes.len()).step_by(7) {
                if let Ok(prefix) = std::str::from_utf8(&bytes[..cut]) {
                    let _ = Topology::parse(prefix, "cut");
                }
            }
            for _ in 0..200 {
                let mut damaged = bytes.to_vec();
                for _ in 0..1 + next() % 4 {
                    let at = (next() % damaged.len() as u64) as usize;
                    damaged[at] = junk[(next() % junk.len() as u64) as usize];
                }
                if let Ok(s) = std::str::from_utf8(&damaged) {
                    let _ = Topology::parse(s, "damaged");
                }
            }
        }
    }
}
