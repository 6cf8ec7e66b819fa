//! Drawing a tree snapshot as indented text or Graphviz DOT.

use crate::api::TreeSnapshot;
use crate::proto::NodeId;
use std::fmt::Write as _;

/// A tree as indented text: each member under its parent, with its distance to the root.
pub fn render_text(tree: &TreeSnapshot) -> String {
    let mut out = String::new();
    let name = |id: NodeId| {
        tree.nodes
            .iter()
            .find(|n| n.id == id)
            .map(|n| format!("{} ({})", n.name, id.short()))
            .unwrap_or_else(|| id.short())
    };
    fn walk(
        tree: &TreeSnapshot,
        id: NodeId,
        depth: usize,
        out: &mut String,
        seen: &mut Vec<NodeId>,
        name: &dyn Fn(NodeId) -> String,
    ) {
        if seen.contains(&id) || depth > tree.nodes.len() {
            return;
        }
        seen.push(id);
        let dist = tree
            .nodes
            .iter()
            .find(|n| n.id == id)
            .and_then(|n| n.dist_ms)
            .map(|d| format!("  {d:.1} ms"))
            .unwrap_or_default();
        let _ = writeln!(out, "{}{}{}", "  ".repeat(depth), name(id), dist);
        for child in tree.nodes.iter().filter(|n| n.parent == Some(id)) {
            walk(tree, child.id, depth + 1, out, seen, name);
        }
    }
    let mut seen = Vec::new();
    let _ = writeln!(out, "tree of {}", name(tree.root));
    walk(tree, tree.root, 0, &mut out, &mut seen, &name);
    let detached: Vec<String> = tree
        .nodes
        .iter()
        .filter(|n| !seen.contains(&n.id))
        .map(|n| {
            if n.answered {
                format!("{} (not connected)", name(n.id))
            } else {
                format!("{} (no answer)", name(n.id))
            }
        })
        .collect();
    if !detached.is_empty() {
        let _ = writeln!(out, "not in the tree: {}", detached.join(", "));
    }
    out
}

/// A tree as Graphviz DOT: an edge from every parent to its child.
pub fn render_dot(tree: &TreeSnapshot) -> String {
    let mut out = String::from("digraph tree {\n  rankdir=TB;\n");
    for n in &tree.nodes {
        let shape = if n.id == tree.root {
            "doublecircle"
        } else {
            "ellipse"
        };
        let _ = writeln!(
            out,
            "  \"{}\" [label=\"{}\\n{}\" shape={shape}];",
            n.id.short(),
            n.name.replace('"', "'"),
            n.id.short()
        );
    }
    for n in &tree.nodes {
        if let Some(p) = n.parent {
            let label = n
                .dist_ms
                .map(|d| format!(" [label=\"{d:.1} ms\"]"))
                .unwrap_or_default();
            let _ = writeln!(out, "  \"{}\" -> \"{}\"{label};", p.short(), n.id.short());
        }
    }
    out.push_str("}\n");
    out
}
