//! README.md's operator commands run as written: the block between `<!-- readme-test:
//! operator -->` and `<!-- /readme-test -->` is turned into a shell script and run with
//! the built `overlay-node` on the path. Only the data-directory root (`/tmp/overlay`) and
//! the two ports are swapped for fresh ones, so that parallel runs cannot collide; every
//! command line is otherwise the README's own. A line that starts a node runs in the
//! background (the README says: each in its own terminal) and the script waits until it
//! answers; a line ending in `&` gets a second to get ready.

use crate::common::{BIN, TempDir, free_udp_ports, real_network, run_with_timeout};
use std::process::Command;
use std::time::Duration;

/// The indented command lines of the README's operator block.
fn operator_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find("<!-- readme-test: operator -->")
        .expect("README.md has the operator block marker");
    let end = readme[start..]
        .find("<!-- /readme-test -->")
        .expect("the operator block is closed")
        + start;
    readme[start..end]
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .map(str::to_string)
        .collect()
}

/// The script: each README line, with the waits a person at a terminal does by eye.
fn script(lines: &[String], root: &str, ports: &[u16]) -> String {
    let mut out = String::from("set -euo pipefail\n");
    for (n, line) in lines.iter().enumerate() {
        let line = line
            .replace("/tmp/overlay", root)
            .replace(":7400", &format!(":{}", ports[0]))
            .replace(":7401", &format!(":{}", ports[1]));
        out.push_str(&format!("echo '$ {}'\n", line.replace('\'', "'\\''")));
        if line.starts_with("overlay-node --") {
            let dir = line
                .split_whitespace()
                .skip_while(|w| *w != "--data-dir")
                .nth(1)
                .expect("a node line gives --data-dir");
            out.push_str(&format!("{line} > {root}/node-{n}.log 2>&1 &\n"));
            out.push_str(&format!("echo $! >> {root}/pids\n"));
            out.push_str(&format!(
                "for _ in $(seq 150); do overlay-node status --data-dir {dir} >/dev/null 2>&1 && break; sleep 0.2; done\n"
            ));
            out.push_str(&format!(
                "overlay-node status --data-dir {dir} > /dev/null\n"
            ));
        } else if line.ends_with('&') {
            out.push_str(&format!("{line}\necho $! >> {root}/pids\nsleep 1\n"));
        } else {
            out.push_str(&format!("{line}\n"));
        }
    }
    // The background listener exits by itself after its one delivery.
    out.push_str("wait %?listen 2>/dev/null || true\n");
    out
}

#[test]
fn the_readme_operator_commands_run_as_written() {
    let _net = real_network();
    let lines = operator_commands();
    assert!(
        lines.len() >= 8,
        "the README's operator block lost its commands: {lines:?}"
    );
    let base = TempDir::new("readme");
    let root = base.path().join("overlay");
    std::fs::create_dir_all(&root).expect("root");
    let root_s = root.to_str().expect("utf-8 path").to_string();
    let ports = free_udp_ports(2);
    let text = script(&lines, &root_s, &ports);
    let bin_dir = std::path::Path::new(BIN).parent().expect("bin dir");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(&text)
        .env("PATH", path)
        .env_remove("OVERLAY_TOKEN")
        .env_remove("OVERLAY_DATA_DIR")
        .env("RUST_LOG", "info");
    let out = run_with_timeout(cmd, Duration::from_secs(120));
    // Whatever happened, no node outlives the test.
    for pid in std::fs::read_to_string(root.join("pids"))
        .unwrap_or_default()
        .lines()
    {
        let _ = Command::new("kill").arg(pid.trim()).status();
    }
    assert!(
        out.status.success(),
        "the README's commands failed:\nscript:\n{text}\nstdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    println!("{}", out.stdout);
    let heard = std::fs::read_to_string(root.join("heard.jsonl")).expect("listen wrote its file");
    assert!(heard.contains("hello, overlay"), "listen heard: {heard}");
    assert!(
        out.stdout.contains("0.75"),
        "the reduce of 0.25 and 0.5: {}",
        out.stdout
    );
    assert!(out.stdout.contains("healthy"), "{}", out.stdout);
    assert!(out.stdout.contains("is leaving"), "{}", out.stdout);
}
