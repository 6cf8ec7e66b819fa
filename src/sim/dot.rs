//! Human-facing renderings of the trees: Graphviz DOT and a textual diagnosis.

use super::node::SimNode;
use super::simulator::Sim;
use std::fmt::Write;

/// DOT of `root`'s tree: live nodes grouped in `subgraph cluster_N` per cluster (nested in
/// a subgraph per site when the topology has sites), edges parent -> child.
pub(crate) fn render<N: SimNode>(sim: &Sim<N>, root: usize) -> String {
    let net = sim.net();
    let live = sim.live_nodes();
    let reached = |v: usize| -> bool {
        let mut cur = v;
        for _ in 0..=sim.total_nodes() {
            if cur == root {
                return true;
            }
            match sim.parent_of(root, cur) {
                Some(p) if sim.is_alive(p) => cur = p,
                _ => return false,
            }
        }
        false
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "digraph \"{} root {}\" {{\n  label=\"{}: tree of {} (node {root}, cluster {})\";\n  labelloc=t;\n  node [shape=ellipse, fontsize=10];",
        net.name(),
        sim.id(root),
        net.name(),
        sim.id(root),
        net.cluster_name(sim.cluster_of(root))
    );
    let node_line = |out: &mut String, v: usize, indent: &str| {
        let mut attrs = format!("label=\"{}\"", sim.id(v));
        if v == root {
            attrs.push_str(", shape=doublecircle, style=filled, fillcolor=gold, penwidth=2");
        } else if !reached(v) {
            attrs.push_str(", style=dashed, color=red");
        }
        let _ = writeln!(out, "{indent}n{v} [{attrs}];");
    };
    for site in 0..net.sites() {
        let clusters: Vec<usize> = (0..net.clusters())
            .filter(|&c| net.site_of(c) == site)
            .collect();
        let indent = if net.has_sites() {
            let _ = writeln!(
                out,
                "  subgraph cluster_site_{site} {{\n    label=\"site {}\";\n    style=dashed;",
                net.site_name(site)
            );
            "    "
        } else {
            "  "
        };
        for c in clusters {
            let _ = writeln!(
                out,
                "{indent}subgraph cluster_{c} {{\n{indent}  label=\"{}\";",
                net.cluster_name(c)
            );
            for &v in live.iter().filter(|&&v| sim.cluster_of(v) == c) {
                node_line(&mut out, v, &format!("{indent}  "));
            }
            let _ = writeln!(out, "{indent}}}");
        }
        if net.has_sites() {
            let _ = writeln!(out, "  }}");
        }
    }
    for &v in &live {
        if v == root {
            continue;
        }
        if let Some(p) = sim.parent_of(root, v).filter(|&p| sim.is_alive(p)) {
            let wide = sim.cluster_of(p) != sim.cluster_of(v);
            let style = if wide {
                " [penwidth=2, color=blue]"
            } else {
                ""
            };
            let _ = writeln!(out, "  n{p} -> n{v}{style};");
        }
    }
    out.push_str("}\n");
    out
}

/// Text naming what is wrong with up to `max_trees` trees, and the first cycles.
pub(crate) fn explain<N: SimNode>(sim: &Sim<N>, max_trees: usize) -> String {
    let net = sim.net();
    let name = |v: usize| {
        format!(
            "{}#{}@{}",
            sim.id(v),
            v,
            net.cluster_name(sim.cluster_of(v))
        )
    };
    let edges = |e: &[(usize, usize)]| {
        let mut s = e
            .iter()
            .take(6)
            .map(|&(c, p)| format!("{} -> {}", name(c), name(p)))
            .collect::<Vec<_>>()
            .join(", ");
        if e.len() > 6 {
            s.push_str(&format!(", ... {} more", e.len() - 6));
        }
        s
    };
    let mut out = String::new();
    let mut shown = 0;
    let mut bad = 0;
    for r in sim.live_nodes() {
        let d = sim.diagnose(r);
        if d.is_ok() {
            continue;
        }
        bad += 1;
        if shown >= max_trees {
            continue;
        }
        shown += 1;
        let _ = writeln!(out, "tree of {}:", name(r));
        if !d.unreached.is_empty() {
            let list: Vec<String> = d
                .unreached
                .iter()
                .take(12)
                .map(|&v| {
                    let p = sim.parent_of(r, v).map_or("none".to_string(), |p| {
                        format!(
                            "{}{}",
                            name(p),
                            if sim.is_alive(p) { "" } else { " (dead)" }
                        )
                    });
                    format!("{} (parent {p})", name(v))
                })
                .collect();
            let _ = writeln!(
                out,
                "  {} unreached: {}",
                d.unreached.len(),
                list.join("; ")
            );
        }
        for (c, want, e) in &d.bad_clusters {
            let _ = writeln!(
                out,
                "  cluster {} entered by {} edges (want {want}): {}",
                net.group_name(*c),
                e.len(),
                edges(e)
            );
        }
        for (s, want, e) in &d.bad_sites {
            let _ = writeln!(
                out,
                "  site {} entered by {} edges (want {want}): {}",
                net.merged_site_name(*s),
                e.len(),
                edges(e)
            );
        }
    }
    if bad > shown {
        let _ = writeln!(out, "... and {} more trees", bad - shown);
    }
    for c in sim.cycles() {
        let _ = writeln!(out, "cycle {c}");
    }
    if max_trees > 0 && !sim.is_converged() {
        let recent: Vec<_> = sim.recent_parent_changes().collect();
        let shown = &recent[recent.len().saturating_sub(2 * max_trees.max(5))..];
        if !shown.is_empty() {
            let _ = writeln!(
                out,
                "latest parent changes (time: tree of root: node: old -> new):"
            );
        }
        let opt = |p: Option<usize>| p.map_or("none".to_string(), name);
        for c in shown {
            let _ = writeln!(
                out,
                "  {:?}: {}: {}: {} -> {}",
                c.at,
                name(c.root),
                name(c.node),
                opt(c.old),
                opt(c.new)
            );
        }
    }
    out
}
