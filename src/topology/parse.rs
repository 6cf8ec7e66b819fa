//! Parsing and validating topology text: the file as written, checked into a [`Topology`].

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{Cluster, MAX_NODES, Topology, TopologyError};

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
}
