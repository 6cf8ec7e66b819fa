//! The summary of a run.

use super::traffic::KindTraffic;
use std::collections::BTreeMap;
use std::fmt;

/// How long the trees took to span every live node again after one scenario action.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RepairRecord {
    /// The action's kind ("join", "leave", "crash", "heal").
    pub kind: &'static str,
    /// When it happened, in ms of virtual time.
    pub at_ms: f64,
    /// Time from the action to the first snapshot at which every live tree spanned every
    /// live node (`None`: not yet).
    pub repair_ms: Option<f64>,
}

/// Figures of a run, as printed by `examples/sim` (also as JSON).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    /// Topology name.
    pub topology: String,
    /// The simulator's seed.
    pub seed: u64,
    /// Live nodes.
    pub nodes: usize,
    /// Live trees (one per live node).
    pub trees: usize,
    /// Trees spanning every live node.
    pub spanning: usize,
    /// Wide-area optimal trees.
    pub wide_area_optimal: usize,
    /// Site-optimal trees (equal to `wide_area_optimal` when the topology has no sites).
    pub site_optimal: usize,
    /// Whether the topology has sites.
    pub has_sites: bool,
    /// Parent changes that closed a cycle in some tree (must be 0).
    pub cycles_seen: u64,
    /// First convergence: the earliest snapshot time from which every tree stayed spanning
    /// and optimal with no parent change for `stable_for` (ms since start).
    pub converged_ms: Option<f64>,
    /// Since when every tree had been spanning and optimal, without a break, at first
    /// convergence, parents still moving inside clusters or not (ms since start).
    pub optimal_ms: Option<f64>,
    /// When every tree was first spanning and optimal, whatever came after (ms since
    /// start; never later than `optimal_ms`).
    pub first_all_optimal_ms: Option<f64>,
    /// Snapshots at which every tree had been optimal and one no longer was (a cluster's
    /// entry handed over, a tree that flaps), over the whole run.
    pub optimal_breaks: usize,
    /// Start of the current stable period, if it has lasted `stable_for` (after churn this
    /// is the re-convergence time).
    pub last_converged_ms: Option<f64>,
    /// Control bytes sent per live node per second, over the whole run.
    pub control_bytes_per_node_per_s: f64,
    /// The same since the current stable period began, when the run is converged.
    pub steady_control_bytes_per_node_per_s: Option<f64>,
    /// Messages, bytes and entries sent over the whole run, by message kind; kind `train`
    /// counts packet-train datagrams, which no control figure includes.
    pub traffic: BTreeMap<String, KindTraffic>,
    /// [`Report::control_bytes_per_node_per_s`] by message kind.
    pub control_bytes_per_node_per_s_by_kind: BTreeMap<String, f64>,
    /// [`Report::steady_control_bytes_per_node_per_s`] by message kind.
    pub steady_control_bytes_per_node_per_s_by_kind: Option<BTreeMap<String, f64>>,
    /// Control messages sent per live node per second since the current stable period
    /// began, when the run is converged: on real nodes each is a datagram, and datagrams,
    /// not bytes, are what an idle node's CPU goes on.
    pub steady_messages_per_node_per_s: Option<f64>,
    /// Packet-train datagram bytes sent per live node per second, over the whole run:
    /// bandwidth measurement, kept out of the control figures so they stay comparable
    /// with runs without trains.
    pub train_bytes_per_node_per_s: f64,
    /// Largest tree depth (hops).
    pub max_depth: u32,
    /// Mean tree depth over trees.
    pub mean_depth: f64,
    /// Mean hop count from a node to a root.
    pub mean_hops: f64,
    /// Largest number of children of a node in a tree.
    pub max_fanout: u32,
    /// Virtual time simulated, ms.
    pub sim_ms: f64,
    /// Messages sent.
    pub messages: u64,
    /// Control bytes sent (sum of encoded message sizes).
    pub control_bytes: u64,
    /// Messages dropped (loss, partition, dead destination, unknown destination).
    pub dropped: u64,
    /// ParentChanged events seen.
    pub parent_changes: u64,
    /// Of those, changes from one parent in the node's own cluster to another one there
    /// (they do not affect wide-area optimality but do delay convergence).
    pub parent_changes_intra_cluster: u64,
    /// Joins, leaves and crashes executed.
    pub joins: u64,
    /// Graceful leaves executed.
    pub leaves: u64,
    /// Crashes executed.
    pub crashes: u64,
    /// Actions whose repair was measured (see [`RepairRecord`]).
    pub repairs: usize,
    /// Of those, how many have not been repaired yet.
    pub unrepaired: usize,
    /// Longest measured repair, ms.
    pub repair_ms_max: Option<f64>,
    /// Mean measured repair, ms.
    pub repair_ms_mean: Option<f64>,
    /// Share of the live nodes' time spent on the modelled per-message CPU costs (above 1.0
    /// the nodes cannot keep up with their traffic).
    pub cpu_utilization: f64,
    /// Largest backlog seen at a snapshot: how far a node's CPU was booked beyond the
    /// current time, ms (large values mean overloaded nodes and delayed messages).
    pub max_backlog_ms: f64,
    /// When that backlog was seen, ms.
    pub max_backlog_at_ms: f64,
    /// The node (index) that had that backlog.
    pub max_backlog_node: usize,
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.1} ms"))
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "topology            {} (seed {})",
            self.topology, self.seed
        )?;
        writeln!(f, "nodes / trees       {} / {}", self.nodes, self.trees)?;
        write!(
            f,
            "spanning            {}/{}\nwide-area optimal   {}/{}\n",
            self.spanning, self.trees, self.wide_area_optimal, self.trees
        )?;
        if self.has_sites {
            writeln!(
                f,
                "site optimal        {}/{}",
                self.site_optimal, self.trees
            )?;
        }
        writeln!(f, "cycles seen         {}", self.cycles_seen)?;
        writeln!(
            f,
            "every tree optimal  {} (first at {}, then broken at {} checks)",
            opt_ms(self.optimal_ms),
            opt_ms(self.first_all_optimal_ms),
            self.optimal_breaks
        )?;
        writeln!(f, "converged           {}", opt_ms(self.converged_ms))?;
        if self.last_converged_ms != self.converged_ms {
            writeln!(f, "re-converged        {}", opt_ms(self.last_converged_ms))?;
        }
        writeln!(
            f,
            "control bytes       {:.0} B/node/s overall, {} steady",
            self.control_bytes_per_node_per_s,
            self.steady_control_bytes_per_node_per_s
                .map_or_else(|| "-".to_string(), |x| format!("{x:.0} B/node/s"))
        )?;
        if let Some(m) = self.steady_messages_per_node_per_s {
            writeln!(f, "steady messages     {m:.1} /node/s")?;
        }
        let by_kind = self
            .steady_control_bytes_per_node_per_s_by_kind
            .as_ref()
            .unwrap_or(&self.control_bytes_per_node_per_s_by_kind);
        let mut kinds: Vec<(&String, &f64)> = by_kind.iter().collect();
        kinds.sort_by(|a, b| b.1.total_cmp(a.1));
        let kinds: Vec<String> = kinds.iter().map(|(k, v)| format!("{k} {v:.0}")).collect();
        writeln!(
            f,
            "  by kind ({})  {}",
            if self.steady_control_bytes_per_node_per_s_by_kind.is_some() {
                "steady"
            } else {
                "overall"
            },
            kinds.join(", ")
        )?;
        if self.train_bytes_per_node_per_s > 0.0 {
            writeln!(
                f,
                "packet trains       {:.0} B/node/s (not in control bytes)",
                self.train_bytes_per_node_per_s
            )?;
        }
        writeln!(
            f,
            "depth               max {}, mean {:.2} (mean hops {:.2})",
            self.max_depth, self.mean_depth, self.mean_hops
        )?;
        writeln!(f, "max fan-out         {}", self.max_fanout)?;
        writeln!(
            f,
            "cpu                 {:.1}% busy on average, max backlog {:.1} ms (node {} at {:.0} ms)",
            self.cpu_utilization * 100.0,
            self.max_backlog_ms,
            self.max_backlog_node,
            self.max_backlog_at_ms
        )?;
        writeln!(
            f,
            "messages            {} sent, {} dropped, {} parent changes ({} inside a cluster)",
            self.messages, self.dropped, self.parent_changes, self.parent_changes_intra_cluster
        )?;
        if self.repairs > 0 {
            writeln!(
                f,
                "churn               {} joins, {} leaves, {} crashes; repair max {}, mean {}, {} unrepaired",
                self.joins,
                self.leaves,
                self.crashes,
                opt_ms(self.repair_ms_max),
                opt_ms(self.repair_ms_mean),
                self.unrepaired
            )?;
        }
        write!(f, "simulated           {:.0} ms", self.sim_ms)
    }
}
