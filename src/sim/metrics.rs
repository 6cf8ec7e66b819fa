//! Tree metrics: spanning, wide-area and site optimality, depth, fan-out.
//!
//! Optimality is judged on the network's verdict groups ([`super::groups`]): a "cluster"
//! below is a group of declared clusters latency cannot tell apart (the declared cluster
//! itself wherever nothing merges), and a "site" a declared site, merged where a group
//! spans two. Cluster and site indices in the results are the groups' names: the smallest
//! cluster (site) index of each.
//!
//! Computed per root in O(N) from the global parent view with memoized reachability (each
//! node's walk stops at the first node already resolved), so a 1000-node run with 1000 roots
//! costs about a million steps per full snapshot; the simulator recomputes only the trees
//! that changed since the last snapshot.

use super::network::NetModel;
use crate::proto::Time;

const NONE: u32 = u32::MAX;
const UNSEEN: u8 = 0;
const ON_PATH: u8 = 1;
const REACHES: u8 = 2;
const CUT: u8 = 3;

/// Who is alive and where, as the metrics need it.
pub struct Layout<'a> {
    /// `alive[node]`.
    pub alive: &'a [bool],
    /// `cluster_of[node]`.
    pub cluster_of: &'a [usize],
    /// The network (sites).
    pub net: &'a NetModel,
    /// Live nodes per declared cluster (summed per group here).
    pub live_per_cluster: &'a [usize],
    /// Live nodes per declared site (summed per merged site here).
    pub live_per_site: &'a [usize],
    /// Number of live nodes.
    pub live: usize,
}

/// Metrics of one tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeMetrics {
    /// The root (node index).
    pub root: usize,
    /// Live nodes, the root included, whose parent pointers lead to the root through live
    /// nodes.
    pub reached: usize,
    /// Every live node reaches the root.
    pub spanning: bool,
    /// Spanning, exactly one tree edge enters every non-root cluster (verdict group, see
    /// [`super::groups`]) that has live nodes, and none enters the root's.
    pub wide_area_optimal: bool,
    /// Wide-area optimal and the same holds at site level (equals `wide_area_optimal` when
    /// the topology has no sites).
    pub site_optimal: bool,
    /// Largest number of hops from a reached node to the root.
    pub depth: u32,
    /// Sum of the hop counts of all reached nodes (for mean hop counts).
    pub total_hops: u64,
    /// Largest number of children of one node.
    pub max_fanout: u32,
}

/// A cluster or site entered by the wrong number of tree edges: (its index, how many edges
/// should enter it, the entering edges as (child, parent)).
pub type BadEntry = (usize, usize, Vec<(usize, usize)>);

/// What is wrong with one tree (node, cluster and site indices).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeDiagnosis {
    /// The root.
    pub root: usize,
    /// Live nodes that do not reach the root.
    pub unreached: Vec<usize>,
    /// Clusters (verdict groups, named by their smallest cluster index) entered by the
    /// wrong number of tree edges: (group, expected, the entering edges as (child, parent)).
    pub bad_clusters: Vec<BadEntry>,
    /// Sites (merged where a group spans two, named by the smallest site index) entered by
    /// the wrong number of tree edges: (site, expected, edges).
    pub bad_sites: Vec<BadEntry>,
}

impl TreeDiagnosis {
    /// Whether nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.unreached.is_empty() && self.bad_clusters.is_empty() && self.bad_sites.is_empty()
    }
}

/// Reusable buffers for [`tree_metrics`].
#[derive(Default)]
pub struct Scratch {
    state: Vec<u8>,
    depth: Vec<u32>,
    fanout: Vec<u32>,
    cluster_in: Vec<u32>,
    site_in: Vec<u32>,
    stack: Vec<usize>,
    group_live: Vec<usize>,
    site_live: Vec<usize>,
}

impl Scratch {
    /// Sums the live nodes per verdict group and per merged site into `group_live` and
    /// `site_live` (indexed by the smallest member, as the groups name themselves).
    fn live_by_group(&mut self, lay: &Layout<'_>) {
        let groups = lay.net.groups();
        self.group_live.clear();
        self.group_live.resize(lay.net.clusters(), 0);
        self.site_live.clear();
        self.site_live.resize(lay.net.sites(), 0);
        for (c, &live) in lay.live_per_cluster.iter().enumerate() {
            self.group_live[groups.group_of(c)] += live;
        }
        for (x, &live) in lay.live_per_site.iter().enumerate() {
            self.site_live[groups.merged_site(x)] += live;
        }
    }
}

/// Computes the metrics of `root`'s tree, given its parent row (`row[node]` = parent index
/// or `u32::MAX`).
pub fn tree_metrics(root: usize, row: &[u32], lay: &Layout<'_>, s: &mut Scratch) -> TreeMetrics {
    let n = row.len();
    let mut m = TreeMetrics {
        root,
        reached: 0,
        spanning: false,
        wide_area_optimal: false,
        site_optimal: false,
        depth: 0,
        total_hops: 0,
        max_fanout: 0,
    };
    if !lay.alive[root] {
        return m;
    }
    reach(root, row, lay.alive, s);
    s.live_by_group(lay);
    let groups = lay.net.groups();
    s.fanout.clear();
    s.fanout.resize(n, 0);
    s.cluster_in.clear();
    s.cluster_in.resize(lay.net.clusters(), 0);
    s.site_in.clear();
    s.site_in.resize(lay.net.sites(), 0);
    for (v, &parent) in row.iter().enumerate() {
        if !lay.alive[v] || s.state[v] != REACHES {
            continue;
        }
        m.reached += 1;
        m.depth = m.depth.max(s.depth[v]);
        m.total_hops += u64::from(s.depth[v]);
        if v == root {
            continue;
        }
        let p = parent as usize;
        s.fanout[p] += 1;
        m.max_fanout = m.max_fanout.max(s.fanout[p]);
        let (cv, cp) = (lay.cluster_of[v], lay.cluster_of[p]);
        if cv != cp {
            let gv = groups.group_of(cv);
            // A loose node is a group of its own, rightly entered by this edge.
            if !groups.is_loose(cv) && gv != groups.group_of(cp) {
                s.cluster_in[gv] += 1;
            }
            let sv = groups.site_of(cv);
            if sv != groups.site_of(cp) {
                s.site_in[sv] += 1;
            }
        }
    }
    m.spanning = m.reached == lay.live;
    let root_group = groups.group_of(lay.cluster_of[root]);
    let root_site = groups.site_of(lay.cluster_of[root]);
    m.wide_area_optimal = m.spanning
        && (0..lay.net.clusters()).all(|g| {
            groups.is_loose(g)
                || s.cluster_in[g] as usize == expected(g == root_group, s.group_live[g])
        });
    m.site_optimal = m.wide_area_optimal
        && (!lay.net.has_sites()
            || (0..lay.net.sites())
                .all(|x| s.site_in[x] as usize == expected(x == root_site, s.site_live[x])));
    m
}

/// Says what is wrong with `root`'s tree: unreached nodes and wrongly entered clusters/sites.
pub fn diagnose(root: usize, row: &[u32], lay: &Layout<'_>, s: &mut Scratch) -> TreeDiagnosis {
    let mut d = TreeDiagnosis {
        root,
        ..Default::default()
    };
    if !lay.alive[root] {
        return d;
    }
    reach(root, row, lay.alive, s);
    s.live_by_group(lay);
    let groups = lay.net.groups();
    let mut cluster_edges = vec![Vec::new(); lay.net.clusters()];
    let mut site_edges = vec![Vec::new(); lay.net.sites()];
    for (v, &parent) in row.iter().enumerate() {
        if !lay.alive[v] {
            continue;
        }
        if s.state[v] != REACHES {
            d.unreached.push(v);
            continue;
        }
        if v == root {
            continue;
        }
        let p = parent as usize;
        let (cv, cp) = (lay.cluster_of[v], lay.cluster_of[p]);
        if cv != cp {
            let gv = groups.group_of(cv);
            if !groups.is_loose(cv) && gv != groups.group_of(cp) {
                cluster_edges[gv].push((v, p));
            }
            let sv = groups.site_of(cv);
            if sv != groups.site_of(cp) {
                site_edges[sv].push((v, p));
            }
        }
    }
    let root_group = groups.group_of(lay.cluster_of[root]);
    for (g, edges) in cluster_edges.into_iter().enumerate() {
        if groups.is_loose(g) {
            continue;
        }
        let want = expected(g == root_group, s.group_live[g]);
        if edges.len() != want {
            d.bad_clusters.push((g, want, edges));
        }
    }
    if lay.net.has_sites() {
        let root_site = groups.site_of(lay.cluster_of[root]);
        for (x, edges) in site_edges.into_iter().enumerate() {
            let want = expected(x == root_site, s.site_live[x]);
            if edges.len() != want {
                d.bad_sites.push((x, want, edges));
            }
        }
    }
    d
}

/// How many tree edges should enter a cluster (or site).
fn expected(is_root_side: bool, live: usize) -> usize {
    usize::from(!is_root_side && live > 0)
}

/// Marks in `s.state` which nodes reach `root` (REACHES, with `s.depth`) and which do not.
fn reach(root: usize, row: &[u32], alive: &[bool], s: &mut Scratch) {
    let n = row.len();
    s.state.clear();
    s.state.resize(n, UNSEEN);
    s.depth.clear();
    s.depth.resize(n, 0);
    s.state[root] = REACHES;
    for v in 0..n {
        if !alive[v] || s.state[v] != UNSEEN {
            continue;
        }
        s.stack.clear();
        let mut cur = v;
        let (reaches, mut d) = loop {
            match s.state[cur] {
                REACHES => break (true, s.depth[cur]),
                CUT | ON_PATH => break (false, 0),
                _ => {}
            }
            s.state[cur] = ON_PATH;
            s.stack.push(cur);
            let p = row[cur];
            if p == NONE || !alive[p as usize] {
                break (false, 0);
            }
            cur = p as usize;
        };
        while let Some(x) = s.stack.pop() {
            if reaches {
                d += 1;
                s.depth[x] = d;
                s.state[x] = REACHES;
            } else {
                s.state[x] = CUT;
            }
        }
    }
}

/// Aggregate metrics over all live trees at one check.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Snapshot {
    /// Sequence number of the snapshot (1 for the first).
    pub seq: u64,
    /// When it was taken.
    pub at: Time,
    /// Live nodes.
    pub nodes: usize,
    /// Live roots (every live node is a root).
    pub trees: usize,
    /// Trees that span all live nodes.
    pub spanning: usize,
    /// Trees that are wide-area optimal.
    pub wide_area_optimal: usize,
    /// Trees that are site optimal (equal to `wide_area_optimal` without sites).
    pub site_optimal: usize,
    /// Largest tree depth (hops).
    pub max_depth: u32,
    /// Mean over trees of the tree depth.
    pub mean_depth: f64,
    /// Mean over all trees and reached nodes of the hop count to the root.
    pub mean_hops: f64,
    /// Largest number of children of a node in any tree.
    pub max_fanout: u32,
}

impl Snapshot {
    /// Every live tree spans every live node.
    pub fn all_spanning(&self) -> bool {
        self.spanning == self.trees
    }

    /// Every live tree spans and is wide-area optimal (and site optimal when `sites`).
    pub fn all_optimal(&self, sites: bool) -> bool {
        self.all_spanning()
            && self.wide_area_optimal == self.trees
            && (!sites || self.site_optimal == self.trees)
    }

    /// Combines per-tree metrics into a snapshot.
    pub fn from_trees<'a>(
        seq: u64,
        at: Time,
        nodes: usize,
        trees: impl Iterator<Item = &'a TreeMetrics>,
    ) -> Snapshot {
        let mut s = Snapshot {
            seq,
            at,
            nodes,
            ..Default::default()
        };
        let (mut depth_sum, mut hops, mut reached) = (0u64, 0u64, 0u64);
        for m in trees {
            s.trees += 1;
            s.spanning += usize::from(m.spanning);
            s.wide_area_optimal += usize::from(m.wide_area_optimal);
            s.site_optimal += usize::from(m.site_optimal);
            s.max_depth = s.max_depth.max(m.depth);
            s.max_fanout = s.max_fanout.max(m.max_fanout);
            depth_sum += u64::from(m.depth);
            hops += m.total_hops;
            reached += m.reached as u64;
        }
        if s.trees > 0 {
            s.mean_depth = depth_sum as f64 / s.trees as f64;
        }
        if reached > 0 {
            s.mean_hops = hops as f64 / reached as f64;
        }
        s
    }
}
