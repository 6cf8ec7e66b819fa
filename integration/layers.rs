//! The crate's import graph has no cycle: imports flow one way, proto <- {net, sim} <- api
//! <- {admin, local} <- {bench, testbed} <- bin. Parses every source file under `src/` with
//! `syn`, resolves each path that leaves its module (`crate::`, `super::`, in `use` trees,
//! types, expressions, visibilities and macro bodies) to the top-level module it lands in,
//! and fails on an edge from a module to one of the same or a higher layer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// Top-level modules by layer: a module may use only modules of a lower layer.
const LAYERS: &[(&str, u32)] = &[
    ("proto", 0),
    ("topology", 0),
    ("net", 1),
    ("sim", 1),
    ("api", 2),
    ("admin", 3),
    ("local", 3),
    ("bench", 4),
    ("testbed", 4),
];

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src/` (`net/driver/report.rs` is `net::driver::report`,
/// `net/mod.rs` is `net`); `None` for the crate root and the binaries.
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin" || p == "lib.rs") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// Collects the top-level modules that the paths of one file land in.
struct Landings {
    /// The module the visitor is in: the file's module path plus inline `mod`s.
    here: Vec<String>,
    found: BTreeSet<String>,
}

impl Landings {
    /// Resolves a path's leading segments (`crate`, `super`, `self`, a name) from `here`.
    fn land(&mut self, segments: &[String]) {
        let Some(first) = segments.first() else {
            return;
        };
        let mut at = self.here.clone();
        let rest = match first.as_str() {
            "crate" => {
                at.clear();
                &segments[1..]
            }
            "super" => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                at.truncate(at.len().saturating_sub(ups));
                &segments[ups..]
            }
            "self" => &segments[1..],
            // A plain name is a local item, an extern crate or a prelude item: it does not
            // leave the module through a path.
            _ => return,
        };
        let top = match (at.first(), rest.first()) {
            (Some(top), _) => top.clone(),
            (None, Some(name)) => name.clone(),
            (None, None) => return,
        };
        self.found.insert(top);
    }

    /// Every path a `use` tree spells out, each as its list of segments.
    fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                Self::use_paths(&p.tree, prefix, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) => out.push(with(prefix, n.ident.to_string())),
            syn::UseTree::Rename(r) => out.push(with(prefix, r.ident.to_string())),
            syn::UseTree::Glob(_) => out.push(with(prefix, "*".to_string())),
            syn::UseTree::Group(g) => {
                for item in &g.items {
                    Self::use_paths(item, prefix, out);
                }
            }
        }
    }

    /// `crate :: name` and `super :: name` inside a macro's tokens (`format!`, `select!`).
    fn macro_paths(&mut self, tokens: proc_macro2::TokenStream) {
        let flat = flatten(tokens);
        for (i, tt) in flat.iter().enumerate() {
            let proc_macro2::TokenTree::Ident(id) = tt else {
                continue;
            };
            if id != "crate" && id != "super" {
                continue;
            }
            let mut segments = vec![id.to_string()];
            let mut j = i + 1;
            while let (
                Some(proc_macro2::TokenTree::Punct(a)),
                Some(proc_macro2::TokenTree::Punct(b)),
            ) = (flat.get(j), flat.get(j + 1))
            {
                if a.as_char() != ':' || b.as_char() != ':' {
                    break;
                }
                let Some(proc_macro2::TokenTree::Ident(next)) = flat.get(j + 2) else {
                    break;
                };
                segments.push(next.to_string());
                j += 3;
            }
            if segments.len() > 1 {
                self.land(&segments);
            }
        }
    }
}

fn with(prefix: &[String], last: String) -> Vec<String> {
    let mut path = prefix.to_vec();
    path.push(last);
    path
}

fn flatten(tokens: proc_macro2::TokenStream) -> Vec<proc_macro2::TokenTree> {
    let mut out = Vec::new();
    for tt in tokens {
        match tt {
            proc_macro2::TokenTree::Group(g) => out.extend(flatten(g.stream())),
            other => out.push(other),
        }
    }
    out
}

impl<'ast> Visit<'ast> for Landings {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        Landings::use_paths(&item.tree, &mut Vec::new(), &mut paths);
        for path in paths {
            self.land(&path);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.land(&segments);
        syn::visit::visit_path(self, path);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        self.here.push(item.ident.to_string());
        syn::visit::visit_item_mod(self, item);
        self.here.pop();
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.macro_paths(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// The top-level modules that the code of `text`, the source of module `here`, reaches.
fn landings(here: &[&str], text: &str) -> BTreeSet<String> {
    let file = syn::parse_file(text).unwrap_or_else(|e| panic!("parse {here:?}: {e}"));
    let mut visitor = Landings {
        here: here.iter().map(|s| s.to_string()).collect(),
        found: BTreeSet::new(),
    };
    visitor.visit_file(&file);
    visitor.found
}

#[test]
fn imports_flow_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut back_edges = Vec::new();
    let mut edges = BTreeSet::new();
    for file in &files {
        let Some(here) = module_path(&src, file) else {
            continue;
        };
        let from = here[0].clone();
        let from_layer = layer(&from).unwrap_or_else(|| {
            panic!(
                "{}: module `{from}` is not in LAYERS; give it a layer",
                file.display()
            )
        });
        let text = std::fs::read_to_string(file).expect("read source");
        let here: Vec<&str> = here.iter().map(String::as_str).collect();
        for to in landings(&here, &text) {
            if to == from {
                continue;
            }
            let Some(to_layer) = layer(&to) else {
                continue; // a crate-root item, not a module
            };
            edges.insert((from.clone(), to.clone()));
            if to_layer >= from_layer {
                back_edges.push(format!(
                    "{} ({from}, layer {from_layer}) uses crate::{to} (layer {to_layer})",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    for (from, to) in &edges {
        println!("{from} -> {to}");
    }
    assert!(
        back_edges.is_empty(),
        "imports that run against the layers:\n{}",
        back_edges.join("\n")
    );
    assert!(
        edges.len() >= 10,
        "the scan found too few imports: {edges:?}"
    );
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn the_scan_sees_every_spelling_of_a_path() {
    let text = r#"
        // use crate::sim::Sim; (a comment is not code)
        use crate::{
            api::Node,
            net::{driver::Driver, view},
        };
        use super::super::super::admin::Client;
        fn f() -> crate::bench::Report {
            let s = "crate::testbed";
            tracing::info!("{}", crate::local::NAME);
            todo!()
        }
    "#;
    assert_eq!(
        landings(&["proto", "collective", "engine"], text),
        set(&["api", "net", "admin", "bench", "local"])
    );
}

#[test]
fn super_and_self_resolve_from_the_module_they_are_in() {
    // `super` from `net::driver` is `net`; two of them reach the crate root.
    assert_eq!(
        landings(&["net", "driver"], "use super::links::Links;"),
        set(&["net"])
    );
    assert_eq!(
        landings(&["net", "driver"], "use super::super::api::Node;"),
        set(&["api"])
    );
    // Inside an inline module, `super` is the file's own module.
    let inline = "mod tests { use super::super::sim::Sim; }";
    assert_eq!(landings(&["net", "driver"], inline), set(&["net"]));
    assert_eq!(landings(&["net"], inline), set(&["sim"]));
    assert_eq!(
        landings(&["net"], "pub(in crate::proto) struct X;"),
        set(&["proto"])
    );
}
