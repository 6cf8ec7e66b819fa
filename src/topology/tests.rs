//! Unit tests of the topology loader.

use super::*;
use std::path::Path;

#[test]
fn scaled_keeps_the_matrix_and_multiplies_the_nodes() {
    let t = Topology::builtin("phoenix-27").expect("shipped");
    let d = t.scaled(2.0);
    assert_eq!(d.node_count(), 2 * t.node_count());
    assert_eq!(d.clusters.len(), t.clusters.len());
    for a in 0..t.clusters.len() {
        for b in 0..t.clusters.len() {
            assert_eq!(d.latency(a, b), t.latency(a, b));
        }
    }
    assert!(d.name.ends_with("-x2"), "{}", d.name);
    assert!(t.scaled(0.01).clusters.iter().all(|c| c.nodes == 1));
}

#[test]
fn dilated_multiplies_every_latency_and_divides_every_bandwidth() {
    let t = Topology::builtin("phoenix-27").expect("shipped");
    let d = t.dilated(10);
    assert_eq!(d.node_count(), t.node_count());
    assert_eq!(d.node_clusters(), t.node_clusters());
    for a in 0..t.clusters.len() {
        for b in 0..t.clusters.len() {
            assert_eq!(d.latency(a, b), t.latency(a, b) * 10);
            let (bw, dbw) = (t.bandwidth_mbit(a, b), d.bandwidth_mbit(a, b));
            assert_eq!(bw.is_some(), dbw.is_some());
            if let (Some(x), Some(y)) = (bw, dbw) {
                assert!((x / 10.0 - y).abs() < 1e-9, "{x} {y}");
            }
        }
        assert_eq!(d.clusters[a].latency, t.clusters[a].latency * 10);
    }
    assert!(d.name.ends_with("-dilated-x10"), "{}", d.name);
    // 0 and 1 leave it as it is.
    assert_eq!(t.dilated(1), t);
    assert_eq!(t.dilated(0), t);
}

fn ms(x: f64) -> Duration {
    Duration::from_secs_f64(x / 1000.0)
}

/// Parses `text` expecting an error; returns it.
fn err(text: &str) -> TopologyError {
    match Topology::parse(text, "test.toml") {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e,
    }
}

/// Asserts the error is at `line` and its message contains every one of `words`.
fn assert_err(text: &str, line: usize, words: &[&str]) {
    let e = err(text);
    let shown = e.to_string();
    assert_eq!(e.file, "test.toml", "{shown}");
    assert_eq!(e.line, line, "wrong line in: {shown}");
    assert!(
        shown.starts_with(&format!("test.toml:{line}: ")),
        "bad format: {shown}"
    );
    for w in words {
        assert!(shown.contains(w), "{shown:?} does not mention {w:?}");
    }
}

const HEAD: &str = "name = \"t\"\nsource = \"s\"\n";

/// Two clusters A (2 nodes) and B (3 nodes) and one link, after HEAD (lines 3..).
fn two() -> String {
    format!(
        "{HEAD}[[cluster]]\nname = \"A\"\nnodes = 2\nlatency_ms = 0.1\n\
             [[cluster]]\nname = \"B\"\nnodes = 3\nlatency_ms = 0.2\n"
    )
}

#[test]
fn shipped_topologies_parse() {
    let expected = [
        ("fig2-shortcut", 3, 3),
        ("phoenix-27", 3, 27),
        ("phoenix-168", 3, 168),
        ("das-4", 4, 40),
        ("sites-64", 8, 64),
        ("scale-1000", 10, 1000),
        ("split-site", 5, 40),
        ("field-station", 3, 10),
    ];
    assert_eq!(Topology::builtin_names().count(), expected.len());
    for (name, clusters, nodes) in expected {
        let t = Topology::builtin(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(t.name, name);
        assert!(!t.source.is_empty());
        assert_eq!(t.clusters.len(), clusters, "{name}");
        assert_eq!(t.node_count(), nodes, "{name}");
        assert_eq!(t.node_clusters().len(), nodes, "{name}");
        // Also through load(), from the repository's file.
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("topologies")
            .join(format!("{name}.toml"));
        let loaded = Topology::load(&path).unwrap();
        assert_eq!(loaded, t);
    }
    assert!(Topology::builtin("nope").is_none());
}

#[test]
fn cluster_sizes_and_node_numbering() {
    let t = Topology::builtin("phoenix-168").unwrap();
    let sizes: Vec<usize> = t.clusters.iter().map(|c| c.nodes).collect();
    assert_eq!(sizes, [100, 65, 3]);
    let nc = t.node_clusters();
    assert_eq!(nc[0], 0);
    assert_eq!(nc[99], 0);
    assert_eq!(nc[100], 1);
    assert_eq!(nc[164], 1);
    assert_eq!(nc[165], 2);
    assert_eq!(nc[167], 2);
    let t = Topology::builtin("phoenix-27").unwrap();
    let sizes: Vec<usize> = t.clusters.iter().map(|c| c.nodes).collect();
    assert_eq!(sizes, [3, 12, 12]);
}

#[test]
fn das4_asymmetric_links() {
    let t = Topology::builtin("das-4").unwrap();
    let vu = t.cluster_index("VU").unwrap();
    let leiden = t.cluster_index("Leiden").unwrap();
    let uva = t.cluster_index("UvA").unwrap();
    let delft = t.cluster_index("Delft").unwrap();
    // Latency is the same both ways in the paper; bandwidth differs.
    assert_eq!(t.latency(vu, leiden), ms(3.5));
    assert_eq!(t.latency(leiden, vu), ms(3.5));
    assert_eq!(t.bandwidth_mbit(vu, leiden), Some(5.0));
    assert_eq!(t.bandwidth_mbit(leiden, vu), Some(3.5));
    assert_eq!(t.bandwidth_mbit(uva, delft), Some(7.5));
    assert_eq!(t.bandwidth_mbit(delft, uva), Some(6.5));
    assert_eq!(t.latency(leiden, delft), ms(4.0));
    // Intra-cluster.
    assert_eq!(t.latency(vu, vu), ms(0.02));
    assert_eq!(t.bandwidth_mbit(vu, vu), Some(400.0));
}

#[test]
fn one_direction_is_symmetric() {
    let t = Topology::builtin("phoenix-168").unwrap();
    let (a, b, c) = (0, 1, 2);
    assert_eq!(t.latency(a, b), ms(15.0));
    assert_eq!(t.latency(b, a), ms(15.0));
    assert_eq!(t.latency(c, a), ms(25.0));
    assert_eq!(t.latency(c, b), ms(20.0));
    assert_eq!(t.bandwidth_mbit(b, a), Some(100.0));
    assert_eq!(t.latency(a, a), ms(0.1));
    assert_eq!(t.bandwidth_mbit(c, c), Some(1000.0));
}

#[test]
fn both_directions_use_their_own_numbers() {
    let text = format!(
        "{}[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 10\nbandwidth_mbit = 50\n\
             [[link]]\nfrom = \"B\"\nto = \"A\"\nlatency_ms = 12.5\n",
        two()
    );
    let t = Topology::parse(&text, "x").unwrap();
    assert_eq!(t.latency(0, 1), ms(10.0));
    assert_eq!(t.latency(1, 0), ms(12.5));
    assert_eq!(t.bandwidth_mbit(0, 1), Some(50.0));
    assert_eq!(t.bandwidth_mbit(1, 0), None);
    assert_eq!(t.latency(1, 1), ms(0.2));
    assert_eq!(t.bandwidth_mbit(0, 0), None);
    assert_eq!(t.node_clusters(), [0, 0, 1, 1, 1]);
}

#[test]
fn sites() {
    let t = Topology::builtin("sites-64").unwrap();
    assert!(t.has_sites());
    assert_eq!(t.site_count(), 4);
    let sites: Vec<usize> = (0..8).map(|c| t.site_of(c)).collect();
    assert_eq!(sites, [0, 0, 1, 1, 2, 2, 3, 3]);
    assert_eq!(t.clusters[2].site.as_deref(), Some("ANL"));

    let t = Topology::builtin("phoenix-27").unwrap();
    assert!(!t.has_sites());
    assert_eq!(t.site_count(), 3);
    let sites: Vec<usize> = (0..3).map(|c| t.site_of(c)).collect();
    assert_eq!(sites, [0, 1, 2]);
}

#[test]
fn clusters_without_site_are_their_own_site() {
    let mut text = String::from(HEAD);
    for (name, site) in [("A", Some("x")), ("B", None), ("C", Some("x")), ("D", None)] {
        text += &format!("[[cluster]]\nname = \"{name}\"\nnodes = 1\nlatency_ms = 0\n");
        if let Some(s) = site {
            text += &format!("site = \"{s}\"\n");
        }
    }
    for (a, b) in [
        ("A", "B"),
        ("A", "C"),
        ("A", "D"),
        ("B", "C"),
        ("B", "D"),
        ("C", "D"),
    ] {
        text += &format!("[[link]]\nfrom = \"{a}\"\nto = \"{b}\"\nlatency_ms = 1\n");
    }
    let t = Topology::parse(&text, "x").unwrap();
    assert!(t.has_sites());
    let sites: Vec<usize> = (0..4).map(|c| t.site_of(c)).collect();
    assert_eq!(sites, [0, 1, 0, 2]);
    assert_eq!(t.site_count(), 3);
}

#[test]
fn single_cluster_needs_no_links() {
    let text = format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 4\nlatency_ms = 0.5\n");
    let t = Topology::parse(&text, "x").unwrap();
    assert_eq!(t.node_count(), 4);
    assert_eq!(t.latency(0, 0), ms(0.5));
}

// ---- errors, one test per kind ----

#[test]
fn error_missing_file_names_path() {
    let e = Topology::load("no/such/dir/missing.toml").unwrap_err();
    let shown = e.to_string();
    assert_eq!(e.file, "no/such/dir/missing.toml");
    assert_eq!(e.line, 0);
    assert!(shown.starts_with("no/such/dir/missing.toml:0: cannot read file: "));
    assert!(shown.to_lowercase().contains("no such file"), "{shown}");
}

#[test]
fn error_toml_syntax() {
    assert_err(
        &format!("{HEAD}[[cluster]]\nname = \"A\nnodes = 1\n"),
        4,
        &[],
    );
    assert_err(&format!("{HEAD}[[cluster]\n"), 3, &[]);
}

#[test]
fn error_missing_field() {
    assert_err(
        &format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\n"),
        3,
        &["missing field", "latency_ms"],
    );
    assert_err(
        "source = \"s\"\n[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\n",
        1,
        &["missing field", "name"],
    );
    assert_err(
        &format!("{}[[link]]\nfrom = \"A\"\nlatency_ms = 1\n", two()),
        11,
        &["missing field", "to"],
    );
}

#[test]
fn error_unknown_field() {
    assert_err(
        &format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency = 1\n"),
        6,
        &["unknown field", "latency"],
    );
    assert_err(
        &format!("{HEAD}colour = \"red\"\n[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\n"),
        3,
        &["unknown field", "colour"],
    );
    assert_err(
        &format!(
            "{}[[links]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 1\n",
            two()
        ),
        11,
        &["unknown field", "links"],
    );
}

#[test]
fn error_wrong_type() {
    assert_err(
        &format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = \"many\"\nlatency_ms = 1\n"),
        5,
        &["invalid type"],
    );
    assert_err(
        &format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1.5\nlatency_ms = 1\n"),
        5,
        &["invalid type"],
    );
}

#[test]
fn error_duplicate_cluster() {
    let text = format!(
        "{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\n\
             [[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\n"
    );
    assert_err(&text, 8, &["duplicate cluster", "\"A\"", "line 4"]);
}

#[test]
fn error_link_unknown_cluster() {
    let text = format!(
        "{}[[link]]\nfrom = \"A\"\nto = \"Z\"\nlatency_ms = 1\n",
        two()
    );
    assert_err(&text, 13, &["unknown cluster", "\"Z\""]);
    let text = format!(
        "{}[[link]]\nfrom = \"Y\"\nto = \"B\"\nlatency_ms = 1\n",
        two()
    );
    assert_err(&text, 12, &["unknown cluster", "\"Y\""]);
}

#[test]
fn error_link_to_itself() {
    let text = format!(
        "{}[[link]]\nfrom = \"A\"\nto = \"A\"\nlatency_ms = 1\n",
        two()
    );
    assert_err(&text, 13, &["A -> A", "two different clusters"]);
}

#[test]
fn error_duplicate_link() {
    let text = format!(
        "{}[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 1\n\
             [[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 2\n",
        two()
    );
    assert_err(&text, 15, &["duplicate link A -> B", "line 11"]);
}

#[test]
fn error_bad_latency() {
    for (value, word) in [
        ("-1.0", "-1"),
        ("nan", "NaN"),
        ("inf", "inf"),
        ("-inf", "-inf"),
    ] {
        let text = format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = {value}\n");
        assert_err(&text, 6, &["cluster \"A\"", "latency_ms", word]);
        let text = format!(
            "{}[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = {value}\n",
            two()
        );
        assert_err(&text, 14, &["link A -> B", "latency_ms", word]);
    }
    let text = format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1e300\n");
    assert_err(&text, 6, &["too large"]);
}

#[test]
fn error_bad_bandwidth() {
    for value in ["-5", "0", "nan", "inf"] {
        let text = format!(
            "{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\nbandwidth_mbit = {value}\n"
        );
        assert_err(&text, 7, &["cluster \"A\"", "bandwidth_mbit"]);
        let text = format!(
            "{}[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 1\nbandwidth_mbit = {value}\n",
            two()
        );
        assert_err(&text, 15, &["link A -> B", "bandwidth_mbit"]);
    }
}

#[test]
fn error_bad_node_count() {
    for value in ["0", "-3"] {
        let text = format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = {value}\nlatency_ms = 1\n");
        assert_err(
            &text,
            5,
            &["cluster \"A\"", "nodes must be at least 1", value],
        );
    }
    let text =
        format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 9223372036854775807\nlatency_ms = 1\n");
    assert_err(&text, 5, &["too many nodes"]);
}

#[test]
fn error_empty_names() {
    let text = format!("{HEAD}[[cluster]]\nname = \"\"\nnodes = 1\nlatency_ms = 1\n");
    assert_err(&text, 4, &["name must not be empty"]);
    let text = format!("{HEAD}[[cluster]]\nname = \"A\"\nnodes = 1\nlatency_ms = 1\nsite = \"\"\n");
    assert_err(&text, 7, &["site must not be empty"]);
}

#[test]
fn error_no_clusters() {
    assert_err(HEAD, 0, &["no clusters"]);
    assert_err(&format!("{HEAD}cluster = []\n"), 0, &["no clusters"]);
}

#[test]
fn error_missing_pair() {
    assert_err(&two(), 0, &["missing link", "\"A\"", "\"B\""]);
    let mut text = String::from(HEAD);
    for name in ["A", "B", "C"] {
        text += &format!("[[cluster]]\nname = \"{name}\"\nnodes = 1\nlatency_ms = 0\n");
    }
    text += "[[link]]\nfrom = \"A\"\nto = \"B\"\nlatency_ms = 1\n";
    text += "[[link]]\nfrom = \"C\"\nto = \"A\"\nlatency_ms = 1\n";
    assert_err(&text, 0, &["missing link", "\"B\" and \"C\""]);
}

#[test]
fn never_panics_on_damaged_input() {
    // Every prefix of every shipped file, and files with bytes overwritten by a cheap
    // deterministic generator: parse must return, never panic.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let junk = b"[]=\"\n.-0123456789e#ABnaif ,{}";
    for (_, text) in BUILTIN {
        let bytes = text.as_bytes();
        for cut in (0..bytes.len()).step_by(7) {
            if let Ok(prefix) = std::str::from_utf8(&bytes[..cut]) {
                let _ = Topology::parse(prefix, "cut");
            }
        }
        for _ in 0..200 {
            let mut damaged = bytes.to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() % damaged.len() as u64) as usize;
                damaged[at] = junk[(next() % junk.len() as u64) as usize];
            }
            if let Ok(s) = std::str::from_utf8(&damaged) {
                let _ = Topology::parse(s, "damaged");
            }
        }
    }
}
