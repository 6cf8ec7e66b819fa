//! Waiting for the real-QUIC run's trees to converge, with progress lines that say why
//! they have not yet: RTT errors against the topology, and the trees that enter a cluster
//! more than once.

use crate::api::{NodeStatus, TreeInfo};
use crate::local::LocalOverlay;
use crate::proto::NodeId;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// [`LocalOverlay::wait_optimal`], with progress lines every 10 s.
pub(super) async fn wait(
    overlay: &LocalOverlay,
    timeout: Duration,
    stable: Duration,
    d: u32,
    progress: &impl Fn(&str),
) -> (crate::local::OverlayCheck, Option<Duration>) {
    let mut next_report = Instant::now() + Duration::from_secs(10);
    // Asking every node for its status costs them CPU too: once a second.
    let poll = Duration::from_secs(1);
    let report = |statuses: &[NodeStatus], check: &crate::local::OverlayCheck| {
        if Instant::now() < next_report {
            return;
        }
        next_report += Duration::from_secs(10);
        let (mut alive, mut suspect, mut down) = (0, 0, 0);
        for m in statuses.iter().flat_map(|s| &s.members) {
            match m.state {
                crate::proto::Liveness::Alive => alive += 1,
                crate::proto::Liveness::Suspect => suspect += 1,
                _ => down += 1,
            }
        }
        let conns: usize = statuses.iter().map(|s| s.connections).sum();
        progress(&rtt_errors(overlay, statuses, d));
        for line in double_entries(overlay, statuses) {
            progress(&line);
        }
        progress(&format!(
            "quic: {:.0} s: {}/{} trees spanning, {} wide-area optimal, {} nodes know all; \
             member views {alive} alive / {suspect} suspect / {down} down; {:.1} connections per node",
            overlay.started.elapsed().as_secs_f64(),
            check.spanning,
            check.trees,
            check.wide_area_optimal,
            check.full_membership,
            conns as f64 / statuses.len().max(1) as f64
        ));
    };
    overlay
        .wait_optimal_observed(timeout, stable, poll, report)
        .await
}

/// One root's tree as the statuses tell it, by node index: each node's parent and state.
struct TreeSnapshot<'a> {
    parent_of: HashMap<usize, usize>,
    info: HashMap<usize, &'a TreeInfo>,
}

impl<'a> TreeSnapshot<'a> {
    fn of(root: NodeId, statuses: &'a [NodeStatus], index: &HashMap<NodeId, usize>) -> Self {
        let mut snap = TreeSnapshot {
            parent_of: HashMap::new(),
            info: HashMap::new(),
        };
        for s in statuses {
            let Some(&me) = index.get(&s.id) else {
                continue;
            };
            if let Some(t) = s.trees.iter().find(|t| t.root == root) {
                snap.info.insert(me, t);
                if let Some(&p) = t.parent.and_then(|p| index.get(&p)) {
                    snap.parent_of.insert(me, p);
                }
            }
        }
        snap
    }

    /// Per cluster, the nodes whose parent is in another cluster (the tree's entries).
    fn entries(&self, clusters: &[usize]) -> HashMap<usize, Vec<usize>> {
        let mut entries: HashMap<usize, Vec<usize>> = HashMap::new();
        for (&v, &p) in &self.parent_of {
            if clusters[v] != clusters[p] {
                entries.entry(clusters[v]).or_default().push(v);
            }
        }
        entries
    }
}

/// How far the measured RTTs are from the topology's, and how many trees enter a cluster
/// more than once (a progress line).
fn rtt_errors(overlay: &LocalOverlay, statuses: &[NodeStatus], d: u32) -> String {
    // 2 ms in the topology's time: far above any of its in-cluster RTTs.
    let far_ms = 2.0 * f64::from(d.max(1));
    let index = overlay.index_by_id();
    let topo = overlay.map.topology();
    let rtt = |a: usize, b: usize| {
        let (ca, cb) = (overlay.clusters[a], overlay.clusters[b]);
        (topo.latency(ca, cb) + topo.latency(cb, ca)).as_secs_f64() * 1e3
    };
    let mut errors = Vec::new();
    let mut far_in_cluster = 0;
    for s in statuses {
        let Some(&me) = index.get(&s.id) else {
            continue;
        };
        for m in &s.members {
            if let (Some(&peer), Some(ms)) = (index.get(&m.id), m.rtt_ms) {
                errors.push(ms - rtt(me, peer));
                if overlay.clusters[me] == overlay.clusters[peer] && ms > far_ms {
                    far_in_cluster += 1;
                }
            }
        }
    }
    errors.sort_by(f64::total_cmp);
    let extra: usize = (statuses.iter())
        .map(|root| {
            let tree = TreeSnapshot::of(root.id, statuses, &index);
            (tree.entries(&overlay.clusters).values())
                .map(|es| es.len() - 1)
                .sum::<usize>()
        })
        .sum();
    format!(
        "quic: RTT error over {} measured pairs: median {:+.2} ms, 90% {:+.2} ms, max {:+.2} ms; \
         {far_in_cluster} in-cluster pairs above {far_ms} ms; {extra} extra cluster entries over all trees",
        errors.len(),
        super::quantile(&errors, 0.5),
        super::quantile(&errors, 0.9),
        errors.last().copied().unwrap_or(f64::NAN),
    )
}

/// Progress lines on up to three trees that enter a cluster more than once: per entry its
/// node, parent, dist, serial and subtree size, and which entries measured each other (for
/// finding why two entries do not merge).
fn double_entries(overlay: &LocalOverlay, statuses: &[NodeStatus]) -> Vec<String> {
    let index = overlay.index_by_id();
    let cl = &overlay.clusters;
    let mut lines = Vec::new();
    for root in statuses {
        let Some(&r) = index.get(&root.id) else {
            continue;
        };
        let tree = TreeSnapshot::of(root.id, statuses, &index);
        let (parent_of, info) = (&tree.parent_of, &tree.info);
        for (c, mut es) in (tree.entries(cl).into_iter()).filter(|(_, es)| es.len() > 1) {
            es.sort_unstable();
            let below = |e: usize| {
                (0..cl.len())
                    .filter(|&v| {
                        let mut x = v;
                        for _ in 0..cl.len() {
                            if x == e {
                                return true;
                            }
                            match parent_of.get(&x) {
                                Some(&p) => x = p,
                                None => return false,
                            }
                        }
                        false
                    })
                    .count()
            };
            let rtt = |a: usize, b: usize| {
                statuses
                    .iter()
                    .find(|s| index.get(&s.id) == Some(&a))
                    .and_then(|s| s.members.iter().find(|m| index.get(&m.id) == Some(&b)))
                    .and_then(|m| m.rtt_ms)
            };
            let desc: Vec<String> = es
                .iter()
                .map(|&e| {
                    let t = info[&e];
                    let seen: Vec<String> = es
                        .iter()
                        .filter(|&&o| o != e)
                        .map(|&o| {
                            format!(
                                "rtt to {o} {}",
                                rtt(e, o).map_or("unmeasured".into(), |x| format!("{x:.2} ms"))
                            )
                        })
                        .collect();
                    format!(
                        "{e} under {} (cluster {}), dist {:.2} ms, serial {}, subtree {}, {}",
                        parent_of[&e],
                        cl[parent_of[&e]],
                        t.dist_ms,
                        t.serial,
                        below(e),
                        seen.join(", ")
                    )
                })
                .collect();
            lines.push(format!(
                "quic: tree of {r} enters cluster {c} {} times: {}",
                es.len(),
                desc.join("; ")
            ));
            if lines.len() >= 3 {
                return lines;
            }
        }
    }
    lines
}
