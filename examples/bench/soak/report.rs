//! The soak's figures: per node at the start and the end, growth, lost and duplicated
//! deliveries, and the verdict against the goals (growth under 10 %, nothing lost or
//! duplicated).

use super::{OpKey, Record, SoakArgs};
use overlay::proto::NodeId;
use serde::Serialize;
use std::collections::BTreeMap;

/// The most a figure may grow from the first minute to the last.
pub const MAX_GROWTH: f64 = 0.10;

/// One node's figures at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub node: String,
    /// Minutes since the load started.
    pub minute: f64,
    /// Resident set, bytes.
    pub rss: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Tokio tasks alive.
    pub tasks: u64,
    /// Bytes sent and received over QUIC since the node started.
    pub bytes: u64,
}

/// One stable node's figures in the first and the last minute.
#[derive(Clone, Debug, Serialize)]
pub struct NodeRow {
    pub node: String,
    pub rss_start: u64,
    pub rss_end: u64,
    pub fds_start: u64,
    pub fds_end: u64,
    pub tasks_start: u64,
    pub tasks_end: u64,
    /// Bytes per second (in + out) over the first and the last minute.
    pub bytes_per_s_start: f64,
    pub bytes_per_s_end: f64,
}

/// What `bench soak` measured.
#[derive(Clone, Debug, Serialize)]
pub struct SoakReport {
    pub minutes: u64,
    pub stable_nodes: usize,
    pub churners: usize,
    pub churn_events: u64,
    pub broadcasts: usize,
    pub broadcast_errors: Vec<String>,
    /// (broadcast, stable member) pairs the member's listener never saw.
    pub lost: usize,
    /// (broadcast, stable member) pairs delivered more than once.
    pub duplicated: usize,
    pub collectives: u64,
    pub collective_misses: Vec<String>,
    pub rows: Vec<NodeRow>,
    /// Largest growth from the first minute to the last, over every node: RSS, fds, tasks.
    pub max_rss_growth: f64,
    pub max_fds_growth: f64,
    pub max_tasks_growth: f64,
    pub samples: Vec<Sample>,
}

impl SoakReport {
    /// Whether every goal is met.
    pub fn passed(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.broadcast_errors.is_empty()
            && self.collective_misses.is_empty()
            && self.max_rss_growth < MAX_GROWTH
            && self.max_fds_growth < MAX_GROWTH
            && self.max_tasks_growth < MAX_GROWTH
    }

    /// The table and the verdict, as printed.
    pub fn text(&self) -> String {
        let mut o = format!(
            "soak: {} min, {} stable members + {} churning ({} churn events), {} broadcasts, \
             {} collectives\n\n",
            self.minutes,
            self.stable_nodes,
            self.churners,
            self.churn_events,
            self.broadcasts,
            self.collectives
        );
        o += "| node | RSS MiB (min 1 -> end) | open fds | tokio tasks | bytes/s (first -> last minute) |\n";
        o += "|---|---|---|---|---|\n";
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        for r in &self.rows {
            o += &format!(
                "| {} | {:.1} -> {:.1} | {} -> {} | {} -> {} | {:.0} -> {:.0} |\n",
                r.node,
                mib(r.rss_start),
                mib(r.rss_end),
                r.fds_start,
                r.fds_end,
                r.tasks_start,
                r.tasks_end,
                r.bytes_per_s_start,
                r.bytes_per_s_end
            );
        }
        o += "\nper sample (about every minute), RSS MiB / tokio tasks, runs of equal values as VALUExCOUNT:\n";
        let mut by_node: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
        for s in &self.samples {
            by_node.entry(&s.node).or_default().push(s);
        }
        for (node, ss) in by_node {
            let rss: Vec<String> = ss.iter().map(|s| format!("{:.1}", mib(s.rss))).collect();
            let tasks: Vec<String> = ss.iter().map(|s| s.tasks.to_string()).collect();
            o += &format!("  {node}: {} / {}\n", runs(&rss), runs(&tasks));
        }
        o += &format!(
            "\nlargest growth: RSS {:+.1} %, fds {:+.1} %, tasks {:+.1} % (goal: under {:.0} %)\n",
            self.max_rss_growth * 100.0,
            self.max_fds_growth * 100.0,
            self.max_tasks_growth * 100.0,
            MAX_GROWTH * 100.0
        );
        o += &format!(
            "members alive throughout: {} deliveries lost, {} duplicated (goal: 0 and 0); \
             {} broadcasts failed; {} collectives left one out\n",
            self.lost,
            self.duplicated,
            self.broadcast_errors.len(),
            self.collective_misses.len()
        );
        for e in self
            .broadcast_errors
            .iter()
            .chain(&self.collective_misses)
            .take(10)
        {
            o += &format!("  {e}\n");
        }
        o += if self.passed() {
            "soak: PASSED\n"
        } else {
            "soak: FAILED\n"
        };
        o
    }
}

/// `a a a b` as `ax3 b`.
fn runs(values: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let n = values[i..].iter().take_while(|v| **v == values[i]).count();
        out.push(if n > 1 {
            format!("{}x{n}", values[i])
        } else {
            values[i].clone()
        });
        i += n;
    }
    out.join(" ")
}

/// (end - start) / start, 0 when start is 0.
fn growth(start: u64, end: u64) -> f64 {
    if start == 0 {
        0.0
    } else {
        (end as f64 - start as f64) / start as f64
    }
}

pub(super) fn build(
    args: &SoakArgs,
    ids: &[NodeId],
    samples: Vec<Sample>,
    seen: &BTreeMap<NodeId, Vec<OpKey>>,
    record: Record,
) -> SoakReport {
    // Rows: the sample nearest one minute in (the start, once buffers and tables have
    // filled) and the last one; rates over the first and the last interval.
    let mut by_node: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in &samples {
        by_node.entry(&s.node).or_default().push(s);
    }
    let rate = |a: &Sample, b: &Sample| {
        let dt = (b.minute - a.minute) * 60.0;
        if dt > 0.0 {
            (b.bytes.saturating_sub(a.bytes)) as f64 / dt
        } else {
            0.0
        }
    };
    let mut rows = Vec::new();
    for (node, ss) in &by_node {
        let start = ss.get(1).unwrap_or(&ss[0]);
        let end = ss[ss.len() - 1];
        let n = ss.len();
        rows.push(NodeRow {
            node: node.to_string(),
            rss_start: start.rss,
            rss_end: end.rss,
            fds_start: start.fds,
            fds_end: end.fds,
            tasks_start: start.tasks,
            tasks_end: end.tasks,
            bytes_per_s_start: if n > 1 { rate(ss[0], ss[1]) } else { 0.0 },
            bytes_per_s_end: if n > 1 {
                rate(ss[n - 2], ss[n - 1])
            } else {
                0.0
            },
        });
    }
    rows.sort_by_key(|r| r.node[1..].parse::<u32>().unwrap_or(u32::MAX));
    let max = |f: &dyn Fn(&NodeRow) -> f64| rows.iter().map(f).fold(f64::MIN, f64::max).max(0.0);
    let max_rss_growth = max(&|r| growth(r.rss_start, r.rss_end));
    let max_fds_growth = max(&|r| growth(r.fds_start, r.fds_end));
    let max_tasks_growth = max(&|r| growth(r.tasks_start, r.tasks_end));

    // Exactly once at every stable member.
    let mut count: BTreeMap<(NodeId, OpKey), usize> = BTreeMap::new();
    for (&member, ops) in seen {
        for &op in ops {
            *count.entry((member, op)).or_default() += 1;
        }
    }
    let (mut lost, mut duplicated) = (0, 0);
    for (op, _, _) in &record.broadcasts {
        for &member in ids {
            match count.get(&(member, *op)).copied().unwrap_or(0) {
                0 => lost += 1,
                1 => {}
                _ => duplicated += 1,
            }
        }
    }
    SoakReport {
        minutes: args.minutes,
        stable_nodes: args.nodes,
        churners: args.churners,
        churn_events: record.churn_events,
        broadcasts: record.broadcasts.len(),
        broadcast_errors: record.broadcast_errors,
        lost,
        duplicated,
        collectives: record.collectives,
        collective_misses: record.collective_misses,
        rows,
        max_rss_growth,
        max_fds_growth,
        max_tasks_growth,
        samples,
    }
}
