//! The crate's import graph has no cycle: imports flow one way, proto <- {net, sim} <- api
//! <- {admin, local} <- {bench, testbed} <- bin. Reads every source file under `src/`,
//! collects its `crate::<module>` paths (code only, comments left out) and fails on an
//! import that runs from a module to one of the same or a higher layer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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

/// The top-level module a file under `src/` belongs to (`None`: the crate root or a binary).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    if first == "bin" || first == "lib.rs" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_string())
}

/// Every module named by a `crate::<name>` path in the code of `text` (comments left out).
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `crate::{a, b}` names several modules at once.
            if after.starts_with('{') {
                let group = after[1..].split('}').next().unwrap_or("");
                for part in group.split(',') {
                    let head: String = part
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !head.is_empty() {
                        found.insert(head);
                    }
                }
            } else if !name.is_empty() {
                found.insert(name);
            }
            rest = after;
        }
    }
    found
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
        let Some(from) = module_of(&src, file) else {
            continue;
        };
        let from_layer = layer(&from).unwrap_or_else(|| {
            panic!(
                "{}: module `{from}` is not in LAYERS; give it a layer",
                file.display()
            )
        });
        let text = std::fs::read_to_string(file).expect("read source");
        for to in crate_paths(&text) {
            let Some(to_layer) = layer(&to) else {
                continue; // a crate-root item, not a module
            };
            if to == from {
                continue;
            }
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

#[test]
fn the_scan_sees_a_back_edge() {
    let text = "use crate::api::Node; // crate::sim in a comment\nuse crate::{net, proto};";
    let found = crate_paths(text);
    assert_eq!(
        found,
        ["api", "net", "proto"]
            .map(String::from)
            .into_iter()
            .collect()
    );
}
