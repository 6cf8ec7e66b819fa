//! Snapshots, the parent-view cross-check, convergence, repair and the report.

use super::{Sim, ms};
use crate::proto::Time;
use crate::sim::invariants::ParentView;
use crate::sim::metrics::{Layout, Scratch, Snapshot, TreeDiagnosis, TreeMetrics};
use crate::sim::node::SimNode;
use crate::sim::report::{RepairRecord, Report};
use crate::sim::traffic::TrafficByKind;
use crate::sim::{metrics, traffic};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// A snapshot at which every live tree had been spanning and wide-area optimal and one no
/// longer was: a cold start's late improvements (a cluster's entry handed over) or a tree
/// that flaps. Between two checks a break goes unseen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptimalBreak {
    /// The snapshot's time.
    pub at: Time,
    /// What was wrong with the first trees found not optimal (four at most).
    pub trees: Vec<TreeDiagnosis>,
}

/// The breaks of "every tree optimal" (see [`OptimalBreak`]).
#[derive(Default)]
pub(super) struct Breaks {
    /// When every live tree was first spanning and wide-area optimal.
    first_all_optimal: Option<Time>,
    /// The first [`BREAKS_KEPT`] breaks.
    kept: Vec<OptimalBreak>,
    /// Breaks seen in all.
    seen: usize,
}

/// How many breaks are kept for diagnosis (all are counted).
const BREAKS_KEPT: usize = 256;

impl<N: SimNode> Sim<N> {
    pub(super) fn layout(&self) -> Layout<'_> {
        Layout {
            alive: &self.alive,
            cluster_of: &self.cluster_of,
            net: &self.net,
            live_per_cluster: &self.live_per_cluster,
            live_per_site: &self.live_per_site,
            live: self.live,
        }
    }

    pub(super) fn take_snapshot(&mut self) {
        let lay = Layout {
            alive: &self.alive,
            cluster_of: &self.cluster_of,
            net: &self.net,
            live_per_cluster: &self.live_per_cluster,
            live_per_site: &self.live_per_site,
            live: self.live,
        };
        let reps = shared_reps(
            self.cfg.core.shared_trees_from,
            self.live,
            &self.alive,
            &self.cluster_of,
            &self.ids,
        );
        if reps != self.reps {
            self.dirty_all = true;
            self.reps = reps;
        }
        for r in 0..self.nodes.len() {
            let rep = self.reps.get(r).copied().unwrap_or(r);
            if self.alive[r] && (self.dirty_all || self.dirty[r] || self.dirty[rep]) {
                let row = tree_row(&self.view, &self.reps, &self.cluster_of, r);
                self.tree_cache[r] = Some(metrics::tree_metrics(r, &row, &lay, &mut self.scratch));
            }
        }
        self.dirty.iter_mut().for_each(|d| *d = false);
        self.dirty_all = false;
        let trees = (0..self.nodes.len())
            .filter(|&r| self.alive[r])
            .filter_map(|r| self.tree_cache[r].as_ref());
        self.snap = Snapshot::from_trees(self.snap.seq + 1, self.now, self.live, trees);
        for v in 0..self.nodes.len() {
            if self.alive[v] {
                let backlog = self.clocks[v].busy_until - self.now;
                if backlog > self.stats.max_backlog {
                    self.stats.max_backlog = backlog;
                    self.stats.max_backlog_at = self.now;
                    self.stats.max_backlog_node = v;
                }
            }
        }
        self.cross_check_sample();

        if self.snap.trees > 0 && self.snap.all_optimal(self.net.has_sites()) {
            self.optimal_since.get_or_insert(self.now);
            self.breaks.first_all_optimal.get_or_insert(self.now);
            if self.good_since.is_none() {
                self.good_since = Some(self.now);
                self.good_mark = (self.stats.bytes, self.node_us_now());
                self.good_traffic = self.stats.traffic.clone();
            }
        } else {
            if self.optimal_since.is_some() {
                self.note_break();
            }
            self.good_since = None;
            self.optimal_since = None;
        }
        if self.snap.all_spanning() {
            for r in self.repairs.iter_mut().filter(|r| r.done.is_none()) {
                r.done = Some(self.now);
            }
        }
        if self.first_converged.is_none() && self.is_converged() {
            self.first_converged = self.good_since;
            self.first_optimal = self.optimal_since;
        }
    }

    /// Notes a break of "every tree optimal" with what is wrong with the trees.
    fn note_break(&mut self) {
        self.breaks.seen += 1;
        if self.breaks.kept.len() >= BREAKS_KEPT {
            return;
        }
        // `site_optimal` is wide-area optimality and, with sites, site optimality too.
        let bad: Vec<usize> = (0..self.nodes.len())
            .filter(|&r| self.alive[r])
            .filter(|&r| self.tree_cache[r].as_ref().is_some_and(|t| !t.site_optimal))
            .take(4)
            .collect();
        let trees = bad.into_iter().map(|r| self.diagnose(r)).collect();
        let at = self.now;
        self.breaks.kept.push(OptimalBreak { at, trees });
    }

    /// When every live tree was first spanning and wide-area optimal (and site optimal
    /// with sites), whatever came after.
    pub fn first_all_optimal_at(&self) -> Option<Time> {
        self.breaks.first_all_optimal
    }

    /// The breaks of "every tree optimal" seen since it first held (the first 256; see
    /// [`OptimalBreak`]), and how many were seen in all.
    pub fn optimal_breaks(&self) -> (&[OptimalBreak], usize) {
        (&self.breaks.kept, self.breaks.seen)
    }

    /// Compares a rotating sample of (node, root) pairs of the parent view with the cores.
    pub(super) fn cross_check_sample(&mut self) {
        let n = self.nodes.len();
        if self.cfg.cross_check_budget == 0 || self.live == 0 {
            return;
        }
        let (mut used, mut visited) = (0, 0);
        while used < self.cfg.cross_check_budget && visited < n {
            let v = self.cross_cursor % n;
            self.cross_cursor = self.cross_cursor.wrapping_add(1);
            visited += 1;
            if self.alive[v] {
                self.cross_check_node(v);
                used += self.live;
            }
        }
    }

    pub(super) fn cross_check_node(&self, v: usize) {
        for r in 0..self.nodes.len() {
            if !self.alive[r] {
                continue;
            }
            let core = self.nodes[v].parent(self.ids[r]);
            let view = self.view.parent(r, v).map(|i| self.ids[i]);
            assert!(
                core == view,
                "parent view out of sync at {:?}: node {v} ({}) in the tree of node {r} ({}): \
                 its ParentChanged events say {view:?}, core.parent() says {core:?}",
                self.now,
                self.ids[v],
                self.ids[r],
            );
        }
    }

    /// Checks that the global parent view equals every live node's `parent()` for every
    /// live root.
    ///
    /// # Panics
    /// With a message naming the node, the root and both answers, on the first difference.
    pub fn cross_check_all(&self) {
        for v in 0..self.nodes.len() {
            if self.alive[v] {
                self.cross_check_node(v);
            }
        }
    }

    /// `root`'s tree as parents by node (see [`ParentView::row`]): with shared trees, its
    /// own tree inside its cluster and its representative's outside.
    pub fn tree_row(&self, root: usize) -> Cow<'_, [u32]> {
        tree_row(&self.view, &self.reps, &self.cluster_of, root)
    }

    /// Metrics of `root`'s tree, computed now.
    pub fn tree_metrics(&self, root: usize) -> TreeMetrics {
        metrics::tree_metrics(
            root,
            &self.tree_row(root),
            &self.layout(),
            &mut Scratch::default(),
        )
    }

    /// What is wrong with `root`'s tree, computed now.
    pub fn diagnose(&self, root: usize) -> TreeDiagnosis {
        metrics::diagnose(
            root,
            &self.tree_row(root),
            &self.layout(),
            &mut Scratch::default(),
        )
    }

    /// A readable account of up to `max_trees` live trees that are not spanning and optimal:
    /// unreached nodes, clusters and sites entered by the wrong number of edges (with the
    /// edges), the first cycles seen, and, when the run is not converged, the latest parent
    /// changes. Empty when everything is fine.
    pub fn explain(&self, max_trees: usize) -> String {
        crate::sim::dot::explain(self, max_trees)
    }

    /// Graphviz DOT of `root`'s tree (live nodes, grouped by site and cluster; the root is
    /// highlighted, wide-area edges are drawn bold, unreached nodes dashed).
    pub fn dot(&self, root: usize) -> String {
        crate::sim::dot::render(self, root)
    }

    // ----- convergence and figures -----------------------------------------------------

    /// Whether the run is converged: every snapshot since [`Sim::converged_at`] showed every
    /// live tree spanning and wide-area optimal (and site optimal with sites), no parent
    /// changed since, that has lasted `stable_for`, and no scenario action or membership
    /// notice is still pending.
    pub fn is_converged(&self) -> bool {
        self.queue.external() == 0
            && self
                .good_since
                .is_some_and(|g| self.now - g >= self.cfg.stable_for)
    }

    /// The start of the current stable period, when [`Sim::is_converged`].
    pub fn converged_at(&self) -> Option<Time> {
        if self.is_converged() {
            self.good_since
        } else {
            None
        }
    }

    /// The start of the first stable period that lasted `stable_for`.
    pub fn first_converged_at(&self) -> Option<Time> {
        self.first_converged
    }

    /// Since when every live tree had been spanning and wide-area optimal, without a
    /// break, when the run first converged: parent moves that keep every tree optimal
    /// (inside a cluster) do not count, as they do for [`Sim::first_converged_at`], so
    /// this is never later.
    pub fn first_optimal_at(&self) -> Option<Time> {
        self.first_optimal
    }

    /// Repair measurements of the joins, leaves, crashes and heals executed so far.
    pub fn repairs(&self) -> Vec<RepairRecord> {
        self.repairs
            .iter()
            .map(|r| RepairRecord {
                kind: r.kind,
                at_ms: ms(r.at - Time::ZERO),
                repair_ms: r.done.map(|d| ms(d - r.at)),
            })
            .collect()
    }

    /// The figures of the run so far.
    pub fn report(&self) -> Report {
        let s = &self.snap;
        let node_us = self.node_us_now();
        let per_node_s = |bytes: u64, us: u128| {
            if us == 0 {
                0.0
            } else {
                bytes as f64 / (us as f64 / 1e6)
            }
        };
        let steady = self.converged_at().map(|_| {
            let (b0, us0) = self.good_mark;
            per_node_s(self.stats.bytes - b0, node_us - us0)
        });
        // Train datagrams are not control messages: they have their own figure.
        let per_kind = |t: &TrafficByKind, us: u128| -> BTreeMap<String, f64> {
            t.iter()
                .filter(|(k, _)| **k != traffic::TRAIN)
                .map(|(k, v)| (k.to_string(), per_node_s(v.bytes, us)))
                .collect()
        };
        let steady_by_kind = self.converged_at().map(|_| {
            let d = traffic::since(&self.stats.traffic, &self.good_traffic);
            per_kind(&d, node_us - self.good_mark.1)
        });
        let steady_messages = self.converged_at().map(|_| {
            let d = traffic::since(&self.stats.traffic, &self.good_traffic);
            let messages = (d.iter())
                .filter(|(k, _)| **k != traffic::TRAIN)
                .map(|(_, v)| v.messages)
                .sum();
            per_node_s(messages, node_us - self.good_mark.1)
        });
        let repairs = self.repairs();
        let done: Vec<f64> = repairs.iter().filter_map(|r| r.repair_ms).collect();
        Report {
            topology: self.net.name().to_string(),
            seed: self.cfg.seed,
            nodes: self.live,
            trees: s.trees,
            spanning: s.spanning,
            wide_area_optimal: s.wide_area_optimal,
            site_optimal: s.site_optimal,
            has_sites: self.net.has_sites(),
            cycles_seen: self.cycles_seen,
            converged_ms: self.first_converged.map(|t| ms(t - Time::ZERO)),
            optimal_ms: self.first_optimal.map(|t| ms(t - Time::ZERO)),
            first_all_optimal_ms: self.breaks.first_all_optimal.map(|t| ms(t - Time::ZERO)),
            optimal_breaks: self.breaks.seen,
            last_converged_ms: self.converged_at().map(|t| ms(t - Time::ZERO)),
            control_bytes_per_node_per_s: per_node_s(self.stats.bytes, node_us),
            steady_control_bytes_per_node_per_s: steady,
            traffic: self
                .stats
                .traffic
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            control_bytes_per_node_per_s_by_kind: per_kind(&self.stats.traffic, node_us),
            steady_control_bytes_per_node_per_s_by_kind: steady_by_kind,
            steady_messages_per_node_per_s: steady_messages,
            train_bytes_per_node_per_s: per_node_s(
                self.stats
                    .traffic
                    .get(traffic::TRAIN)
                    .map_or(0, |k| k.bytes),
                node_us,
            ),
            max_depth: s.max_depth,
            mean_depth: s.mean_depth,
            mean_hops: s.mean_hops,
            max_fanout: s.max_fanout,
            sim_ms: ms(self.now - Time::ZERO),
            messages: self.stats.messages,
            control_bytes: self.stats.bytes,
            dropped: self.messages_dropped(),
            parent_changes: self.stats.parent_changes,
            parent_changes_intra_cluster: self.stats.parent_changes_intra,
            joins: self.stats.joins,
            leaves: self.stats.leaves,
            crashes: self.stats.crashes,
            repairs: repairs.len(),
            unrepaired: repairs.len() - done.len(),
            repair_ms_max: done.iter().copied().reduce(f64::max),
            repair_ms_mean: (!done.is_empty())
                .then(|| done.iter().sum::<f64>() / done.len() as f64),
            cpu_utilization: if node_us == 0 {
                0.0
            } else {
                self.stats.cpu_us as f64 / node_us as f64
            },
            max_backlog_ms: ms(self.stats.max_backlog),
            max_backlog_at_ms: ms(self.stats.max_backlog_at - Time::ZERO),
            max_backlog_node: self.stats.max_backlog_node,
        }
    }
}

/// With shared trees on (`from` members or more), the representative of every node's
/// cluster: its live member of smallest id, as discovery names a cluster (the topology's
/// clusters stand for the discovered ones). Empty when trees are not shared.
fn shared_reps(
    from: Option<usize>,
    live: usize,
    alive: &[bool],
    cluster_of: &[usize],
    ids: &[crate::proto::NodeId],
) -> Vec<usize> {
    if from.is_none_or(|n| live < n) {
        return Vec::new();
    }
    let clusters = cluster_of.iter().max().map_or(0, |m| m + 1);
    let mut rep: Vec<Option<usize>> = vec![None; clusters];
    let mut count = vec![0usize; clusters];
    for v in (0..alive.len()).filter(|&v| alive[v]) {
        let c = cluster_of[v];
        count[c] += 1;
        if rep[c].is_none_or(|r| ids[v] < ids[r]) {
            rep[c] = Some(v);
        }
    }
    (0..alive.len())
        .map(|v| {
            let c = cluster_of[v];
            match rep[c] {
                Some(r) if count[c] > 1 => r,
                _ => v,
            }
        })
        .collect()
}

/// The tree whose row holds `node`'s parent in `r`'s tree: `r`'s own, or with shared trees
/// (`reps` not empty) and `node` outside `r`'s cluster, its representative's.
pub(super) fn row_holding(reps: &[usize], cluster_of: &[usize], r: usize, node: usize) -> usize {
    let rep = reps.get(r).copied().unwrap_or(r);
    if rep != r && cluster_of[node] != cluster_of[r] {
        rep
    } else {
        r
    }
}

/// `r`'s tree as parents by node (see [`row_holding`]).
fn tree_row<'a>(
    view: &'a ParentView,
    reps: &[usize],
    cluster_of: &[usize],
    r: usize,
) -> Cow<'a, [u32]> {
    if reps.get(r).is_none_or(|&rep| rep == r) {
        return Cow::Borrowed(view.row(r));
    }
    let row = (0..view.row(r).len()).map(|x| view.row(row_holding(reps, cluster_of, r, x))[x]);
    Cow::Owned(row.collect())
}
