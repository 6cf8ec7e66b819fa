//! Observing the nodes from outside, as an operator would: `overlay-node status` and
//! `tree`, the collectives from the command line, and the check of the overlay's state.

use super::N;
use super::fixture::Fixture;
use crate::common::{node_cmd, run_with_timeout};
use overlay::api::NodeStatus;
use overlay::local::check_statuses;
use overlay::proto::{Liveness, NodeId};
use overlay::sim::NetModel;
use std::path::Path;
use std::time::Duration;

/// `overlay-node broadcast`, `gather info` and `reduce count`, each through another node.
pub(super) fn collectives_from_the_cli(fx: &Fixture, ids: &[NodeId]) {
    let cli = |args: &[&str], node: usize| {
        let mut cmd = node_cmd();
        cmd.args(args).arg("--data-dir").arg(&fx.nodes[node].dir);
        let out = run_with_timeout(cmd, Duration::from_secs(30));
        assert!(out.status.success(), "{args:?} failed: {}", out.stderr);
        let v: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?} --json ({e}):\n{}", out.stdout));
        v
    };
    let mut all: Vec<String> = ids.iter().map(|i| i.to_hex()).collect();
    all.sort();

    let b = cli(&["broadcast", "--text", "hello, overlay", "--json"], 0);
    let mut delivered: Vec<String> = serde_json::from_value(b["delivered"].clone()).expect("ids");
    delivered.sort();
    assert_eq!(delivered, all, "broadcast: {b}");
    assert_eq!(b["missing"], serde_json::json!([]), "broadcast: {b}");

    // A streamed payload (above the inline limit) goes through the admin socket as is.
    let file = fx.nodes[1].dir.join("large.bin");
    let large: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &large).expect("write the payload");
    let file = file.to_str().expect("utf-8 path");
    let l = cli(&["broadcast", "--file", file, "--json"], 1);
    let mut got: Vec<String> = serde_json::from_value(l["delivered"].clone()).expect("ids");
    got.sort();
    assert_eq!(got, all, "large broadcast: {l}");
    assert_eq!(
        l["bytes"],
        serde_json::json!(large.len()),
        "large broadcast: {l}"
    );
    admin_refuses_bad_payloads(&fx.nodes[2].dir);

    let g = cli(&["gather", "info", "--json"], 5);
    let nodes = g["nodes"].as_array().expect("nodes");
    let mut names: Vec<&str> = nodes
        .iter()
        .map(|n| n["name"].as_str().expect("name"))
        .collect();
    names.sort();
    let mut want: Vec<&str> = fx.nodes.iter().map(|n| n.name.as_str()).collect();
    want.sort();
    assert_eq!(names, want, "gather info: {g}");
    assert!(
        nodes
            .iter()
            .all(|n| n["uptime_ms"].as_u64().is_some() && n["addr"].is_string())
    );

    let r = cli(&["reduce", "count", "--json"], 11);
    assert_eq!(r["count"], serde_json::json!(N), "reduce count: {r}");
    assert_eq!(r["missing"], serde_json::json!([]), "reduce count: {r}");
    eprintln!(
        "CLI collectives: broadcast to {} in {:.1} ms, gather info of {} in {:.1} ms, \
         reduce count = {} in {:.1} ms",
        delivered.len(),
        b["elapsed_ms"].as_f64().unwrap_or(0.0),
        nodes.len(),
        g["elapsed_ms"].as_f64().unwrap_or(0.0),
        r["count"],
        r["elapsed_ms"].as_f64().unwrap_or(0.0)
    );
}

/// A broadcast request over the limit, or whose payload is cut short, gets an error
/// naming the problem (and the node carries on).
fn admin_refuses_bad_payloads(dir: &Path) {
    use std::io::{Read, Write};
    let ask = |request: &[u8]| {
        let mut s =
            std::os::unix::net::UnixStream::connect(dir.join("admin.sock")).expect("admin socket");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(request).expect("send");
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let mut answer = String::new();
        s.read_to_string(&mut answer).expect("answer");
        answer
    };
    let over = ask(b"{\"Broadcast\":{\"len\":2000000000}}\n");
    assert!(over.contains("exceeds the limit"), "{over}");
    let short = ask(b"{\"Broadcast\":{\"len\":100}}\nonly ten b");
    assert!(short.contains("cut short: 10 of 100"), "{short}");
}

/// `overlay-node status --data-dir DIR --json`, parsed.
pub(super) fn status(dir: &Path) -> Result<NodeStatus, String> {
    let mut cmd = node_cmd();
    cmd.arg("status").arg("--data-dir").arg(dir).arg("--json");
    let out = run_with_timeout(cmd, Duration::from_secs(15));
    if !out.status.success() {
        return Err(format!(
            "status of {} failed: {}",
            dir.display(),
            out.stderr.trim()
        ));
    }
    serde_json::from_str(&out.stdout)
        .map_err(|e| panic!("status --json is not a NodeStatus ({e}):\n{}", out.stdout))
}

/// `overlay-node tree ROOT --data-dir DIR --format FORMAT`.
pub(super) fn tree(dir: &Path, root: &str, format: &str) -> String {
    let mut cmd = node_cmd();
    cmd.arg("tree")
        .arg(root)
        .arg("--data-dir")
        .arg(dir)
        .arg("--format")
        .arg(format);
    let out = run_with_timeout(cmd, Duration::from_secs(15));
    assert!(
        out.status.success(),
        "tree --format {format} failed: {}",
        out.stderr
    );
    out.stdout
}

/// Checks that every one of `statuses` lists exactly the members `alive` as Alive and
/// `dead` as Dead, and that the trees of exactly the `alive` roots span every alive node.
pub(super) fn check_overlay(
    statuses: &[NodeStatus],
    ids: &[NodeId],
    alive: &[NodeId],
    dead: &[NodeId],
    net: &NetModel,
) -> Result<(), String> {
    for s in statuses {
        for id in alive {
            match s.members.iter().find(|m| m.id == *id) {
                Some(m) if m.state == Liveness::Alive => {}
                Some(m) => return Err(format!("{} sees {} as {:?}", s.name, m.name, m.state)),
                None => return Err(format!("{} does not know {}", s.name, id.short())),
            }
        }
        for id in dead {
            match s.members.iter().find(|m| m.id == *id) {
                Some(m) if m.state == Liveness::Dead => {}
                Some(m) => return Err(format!("{} sees {} as {:?}", s.name, m.name, m.state)),
                None => return Err(format!("{} lost the record of {}", s.name, id.short())),
            }
        }
        if s.members.len() != alive.len() + dead.len() {
            return Err(format!(
                "{} lists {} members, expected {}",
                s.name,
                s.members.len(),
                alive.len() + dead.len()
            ));
        }
        let mut roots: Vec<NodeId> = s.trees.iter().map(|t| t.root).collect();
        roots.sort();
        let mut want = alive.to_vec();
        want.sort();
        if roots != want {
            return Err(format!(
                "{} has {} trees, expected one per live node ({})",
                s.name,
                roots.len(),
                want.len()
            ));
        }
    }
    // Spanning: in every live root's tree, every live node's parent chain reaches the root.
    let clusters = vec![0usize; ids.len()];
    let check = check_statuses(statuses, ids, &clusters, net);
    if check.nodes != alive.len()
        || check.trees != alive.len()
        || check.spanning != alive.len()
        || check.full_membership != alive.len()
    {
        return Err(format!("trees not converged: {check:?}"));
    }
    Ok(())
}
