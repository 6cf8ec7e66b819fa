//! `--timeline`: the trees second by second, and why the last ones are not optimal.

use overlay::proto::Time;
use overlay::sim::{Sim, SimNode};
use std::time::Duration;

/// Runs second by second until the run converges or `max` passes, printing the state of
/// the trees after each second.
pub(crate) fn print_timeline<N: SimNode>(sim: &mut Sim<N>, max: Duration, heard: bool) {
    let end = sim.now() + max;
    let mut moves_before = (0, 0);
    let mut reasons_before = switch_reasons(sim);
    let mut breaks_printed = 0;
    while sim.now() < end && !sim.is_converged() {
        let second_began = sim.now();
        sim.run_for(Duration::from_secs(1));
        let moves = sim.parent_change_counts();
        let (moved, moved_inside) = (moves.0 - moves_before.0, moves.1 - moves_before.1);
        moves_before = moves;
        let reasons = switch_reasons(sim);
        let [rules, shortcut, repair, flatten, root_asks] =
            std::array::from_fn(|k| reasons[k].saturating_sub(reasons_before[k]));
        reasons_before = reasons;
        let mut extra = 0;
        let mut leaves = 0;
        for r in sim.live_nodes() {
            let mut has_children = vec![false; sim.total_nodes()];
            for v in 0..sim.total_nodes() {
                if let Some(p) = sim.parent_of(r, v) {
                    has_children[p] = true;
                }
            }
            for (_, want, edges) in sim.diagnose(r).bad_clusters {
                extra += edges.len().saturating_sub(want);
                leaves += edges.iter().filter(|(c, _)| !has_children[*c]).count();
            }
        }
        let s = sim.snapshot();
        eprintln!(
            "t={:>5.1}s trees={} knows_all={} spanning={} wide_area_optimal={} \
             extra_entries={extra} leaf_entries={leaves} parent_changes={moved} \
             of_which_inside_a_cluster={moved_inside} by_rules={rules} \
             by_shortcut={shortcut} by_repair={repair} by_flatten={flatten} \
             root_asks={root_asks} \
             trees_per_node={:.0}",
            s.at.as_micros() as f64 / 1e6,
            s.trees,
            knowing_all(sim),
            s.spanning,
            s.wide_area_optimal,
            trees_per_node(sim)
        );
        breaks_printed = print_breaks(sim, breaks_printed);
        if s.trees - s.wide_area_optimal <= 12 && s.wide_area_optimal < s.trees {
            eprintln!("{}", sim.explain(12));
            explain_entries(sim, heard);
        } else if s.wide_area_optimal == s.trees && moved > 0 {
            // Optimal but not settled: what still moves.
            print_recent_moves(sim, second_began);
        }
    }
}

/// The switches of every live node by reason (rules, shortcut, repair, flatten), and the
/// roots asked for their state: the counters since the start.
fn switch_reasons<N: SimNode>(sim: &Sim<N>) -> [u64; 5] {
    let mut sum = [0; 5];
    for i in sim.live_nodes() {
        if let Some(s) = sim.node(i).core().map(|c| c.stats()) {
            let each = [
                s.switches_rules,
                s.switches_shortcut,
                s.switches_repair,
                s.switches_flatten,
                s.root_asks,
            ];
            for (total, n) in sum.iter_mut().zip(each) {
                *total += n;
            }
        }
    }
    sum
}

/// How many live nodes track the tree of every live node they should (with shared trees,
/// those of their cluster and the representatives of the others): the members they know.
fn knowing_all<N: SimNode>(sim: &Sim<N>) -> usize {
    let live = sim.live_nodes();
    let ids: std::collections::HashSet<_> = live.iter().map(|&i| sim.id(i)).collect();
    let knows_all = |i: usize| {
        sim.node(i).core().is_some_and(|c| {
            let known = c.roots().into_iter().filter(|r| ids.contains(r)).count();
            known == ids.iter().filter(|r| c.tracks_tree(**r)).count()
        })
    };
    live.iter().filter(|&&i| knows_all(i)).count()
}

/// The trees a live node tracks, on average.
fn trees_per_node<N: SimNode>(sim: &Sim<N>) -> f64 {
    let live = sim.live_nodes();
    let tracked: usize = (live.iter())
        .filter_map(|&i| sim.node(i).core().map(|c| c.roots().len()))
        .sum();
    tracked as f64 / live.len().max(1) as f64
}

/// The breaks of "every tree optimal" after the first `printed`, each with the clusters
/// its trees entered the wrong number of times; returns how many are printed now.
fn print_breaks<N: SimNode>(sim: &Sim<N>, printed: usize) -> usize {
    let name = |i: usize| format!("{i}@c{}", sim.cluster_of(i));
    let (kept, _) = sim.optimal_breaks();
    for b in kept.iter().skip(printed) {
        let mut what = Vec::new();
        for d in &b.trees {
            for (cluster, want, edges) in &d.bad_clusters {
                let edges: Vec<String> = (edges.iter())
                    .map(|(c, p)| format!("{}->{}", name(*c), name(*p)))
                    .collect();
                what.push(format!(
                    "root {}: c{cluster} entered {} times (want {want}): {}",
                    name(d.root),
                    edges.len(),
                    edges.join(", ")
                ));
            }
            if !d.unreached.is_empty() {
                what.push(format!(
                    "root {}: {} unreached",
                    name(d.root),
                    d.unreached.len()
                ));
            }
        }
        eprintln!(
            "  every tree optimal broken at {:.3}s: {}",
            b.at.as_micros() as f64 / 1e6,
            what.join("; ")
        );
    }
    kept.len()
}

/// The parent changes since `since` among the last 32: time, root, node, old and new
/// parent, each with its cluster.
fn print_recent_moves<N: SimNode>(sim: &Sim<N>, since: Time) {
    let name =
        |i: Option<usize>| i.map_or("none".into(), |i| format!("{i}@c{}", sim.cluster_of(i)));
    for c in sim.recent_parent_changes().filter(|c| c.at >= since) {
        eprintln!(
            "  {:.3}s root {}: {}: {} -> {}",
            c.at.as_micros() as f64 / 1e6,
            name(Some(c.root)),
            name(Some(c.node)),
            name(c.old),
            name(c.new)
        );
    }
}

/// For each tree that enters a cluster more than once (twelve at most), how each entry
/// judges each other entry as a parent.
fn explain_entries<N: SimNode>(sim: &Sim<N>, heard: bool) {
    let bad = sim.live_nodes().into_iter().filter_map(|r| {
        let d = sim.diagnose(r);
        (!d.bad_clusters.is_empty()).then_some((r, d))
    });
    for (r, d) in bad.take(12) {
        for (_, want, edges) in &d.bad_clusters {
            if *want == 0 {
                // The root's own cluster entered from outside: how the entry judges the
                // members of its own cluster.
                explain_cluster_mates(sim, r, edges);
            }
            for (a, _) in edges {
                for (b, _) in edges.iter().filter(|(b, _)| b != a) {
                    let Some(core) = sim.node(*a).core() else {
                        return;
                    };
                    let why = core.explain_candidate(sim.id(r), sim.id(*b));
                    let mates = core.discovered_cluster().contains(&sim.id(*b));
                    eprintln!(
                        "  root {r}: entry {a} on entry {b}: {}; discovered together: {mates}",
                        why.unwrap_or_else(|| "tree not tracked".into())
                    );
                }
                if heard {
                    explain_heard(sim, r, *a);
                    print_ancestry(sim, r, *a);
                }
            }
        }
    }
}

/// For each edge entering the root's own cluster, how its lower end judges the members of
/// that cluster (at most eight of them, the root first).
fn explain_cluster_mates<N: SimNode>(sim: &Sim<N>, r: usize, edges: &[(usize, usize)]) {
    for (a, _) in edges {
        let Some(core) = sim.node(*a).core() else {
            return;
        };
        let mut mates: Vec<usize> = (sim.live_nodes().into_iter())
            .filter(|&b| b != *a && sim.cluster_of(b) == sim.cluster_of(*a))
            .collect();
        mates.sort_by_key(|&b| (b != r, b));
        for b in mates.into_iter().take(8) {
            let why = core.explain_candidate(sim.id(r), sim.id(b));
            eprintln!(
                "  root {r}: entry {a} on cluster mate {b}: {}",
                why.unwrap_or_else(|| "tree not tracked".into())
            );
        }
    }
}

/// What entry `a` heard in the tree of root `r` from each member of its cluster that told
/// it anything, and how it judges them.
fn explain_heard<N: SimNode>(sim: &Sim<N>, r: usize, a: usize) {
    let Some(core) = sim.node(a).core() else {
        return;
    };
    for m in sim.live_nodes() {
        if m == a || sim.cluster_of(m) != sim.cluster_of(a) {
            continue;
        }
        if let Some(why) = core.explain_candidate(sim.id(r), sim.id(m))
            && !why.contains("heard nothing")
        {
            eprintln!("    {a} hears {m}: {why}");
        }
    }
}

/// The path from `a` up to root `r`: each node's serial, dist and whether its parent
/// counts it as a child (a stale serial shows where the root's last one stopped).
fn print_ancestry<N: SimNode>(sim: &Sim<N>, r: usize, a: usize) {
    let root = sim.id(r);
    let mut line = format!("    path of {a}:");
    let mut at = Some(a);
    for _ in 0..16 {
        let Some(i) = at else { break };
        let Some(t) = sim.node(i).core().and_then(|c| c.tree(root)) else {
            line += &format!(" {i}(untracked)");
            break;
        };
        let parent = t.parent.and_then(|p| sim.index_of(p));
        let listed = parent
            .and_then(|p| sim.node(p).core().and_then(|c| c.tree(root)))
            .is_some_and(|pt| pt.children.contains(&sim.id(i)));
        line += &format!(
            " {i}(s{} {}us{}{})",
            t.serial,
            t.dist.as_micros(),
            if t.connected { "" } else { " disconnected" },
            if parent.is_some() && !listed {
                " NOT-A-CHILD"
            } else {
                ""
            }
        );
        at = parent;
    }
    eprintln!("{line}");
}
