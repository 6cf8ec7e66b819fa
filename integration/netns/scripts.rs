//! Driving the testbed: its scripts, `overlay-node` in a namespace, node statuses, waiting
//! for a condition, and what the testbed leaves on the host.

use super::PREFIX_BASE;
use crate::common::{BIN, Output, run_with_timeout};
use overlay::api::NodeStatus;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub(super) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn prefix() -> String {
    format!("{PREFIX_BASE}{}", std::process::id())
}

pub(super) fn state_dir() -> PathBuf {
    PathBuf::from("/run/overlay-netns").join(prefix())
}

/// A testbed script with this test's prefix and binaries.
fn script(name: &str) -> Command {
    script_for(name, &prefix())
}

/// A testbed script for the testbed `prefix`.
fn script_for(name: &str, prefix: &str) -> Command {
    let mut cmd = Command::new(repo().join("netns-scripts").join(name));
    let bin_dir = Path::new(BIN).parent().expect("binary directory");
    cmd.current_dir(repo())
        .env("OVERLAY_NETNS_PREFIX", prefix)
        .env_remove("OVERLAY_NETNS_STATE")
        .env("OVERLAY_BIN_DIR", bin_dir)
        .env_remove("OVERLAY_TOKEN")
        .env("RUST_LOG", "info,quinn=warn,rustls=warn");
    cmd
}

/// Runs a script to completion; panics (with its output) if it fails.
pub(super) fn run_script(name: &str, args: &[&str], limit: Duration) -> Output {
    let mut cmd = script(name);
    cmd.args(args);
    let out = run_with_timeout(cmd, limit);
    assert!(
        out.status.success(),
        "netns-scripts/{name} {args:?} failed ({}):\n{}{}",
        out.status,
        out.stdout,
        out.stderr
    );
    out
}

/// `exec NODE overlay-node ARGS...`, not started (the script execs the command, so the
/// child's pid is `overlay-node`'s).
pub(super) fn node_command(node: &str, args: &[&str]) -> Command {
    let mut cmd = script("exec");
    cmd.arg(node).arg("overlay-node").args(args);
    cmd
}

/// `exec NODE overlay-node ARGS...`, run to completion within `limit`.
pub(super) fn node_cmd(node: &str, args: &[&str], limit: Duration) -> Output {
    run_with_timeout(node_command(node, args), limit)
}

/// The pid of a node's `overlay-node` process, from the pid file `run` wrote.
pub(super) fn node_pid(node: &str) -> i32 {
    let file = state_dir().join("pids").join(format!("{node}.pid"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Sends `signal` to `pid`; panics if it cannot.
pub(super) fn signal(pid: i32, signal: libc::c_int) {
    // SAFETY: kill takes two integers and touches no memory of ours.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {signal}): {}",
        std::io::Error::last_os_error()
    );
}

pub(super) fn data_dir(node: &str) -> String {
    state_dir().join("data").join(node).display().to_string()
}

/// `overlay-node status --json` of one node, through `exec` in its namespace.
fn status(node: &str) -> Result<NodeStatus, String> {
    let dir = data_dir(node);
    let out = node_cmd(
        node,
        &["status", "--data-dir", &dir, "--json"],
        Duration::from_secs(20),
    );
    if !out.status.success() {
        return Err(format!("status of {node}: {}", out.stderr.trim()));
    }
    serde_json::from_str(&out.stdout).map_err(|e| format!("status of {node}: {e}"))
}

/// The statuses of `nodes`, asked in parallel; the nodes that did not answer are left out.
pub(super) fn statuses(nodes: &[String]) -> (Vec<NodeStatus>, Vec<String>) {
    let answers: Vec<Result<NodeStatus, String>> = std::thread::scope(|s| {
        let asks: Vec<_> = nodes.iter().map(|n| s.spawn(move || status(n))).collect();
        asks.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("status panicked".into())))
            .collect()
    });
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    for a in answers {
        match a {
            Ok(s) => ok.push(s),
            Err(e) => errors.push(e),
        }
    }
    (ok, errors)
}

/// Polls the statuses of `nodes` until `cond` holds; returns the statuses and how long it
/// took, or the last reason after `limit`. While it waits, it prints the reason every
/// [`PROGRESS_EVERY`] when it changed, so a slow step shows where it stood.
pub(super) fn wait_until(
    what: &str,
    nodes: &[String],
    limit: Duration,
    mut cond: impl FnMut(&[NodeStatus]) -> Result<(), String>,
) -> Result<(Vec<NodeStatus>, Duration), String> {
    const PROGRESS_EVERY: Duration = Duration::from_secs(5);
    let start = Instant::now();
    let mut shown = (start, String::new());
    loop {
        let (ss, errors) = statuses(nodes);
        let verdict = if errors.is_empty() {
            cond(&ss)
        } else {
            Err(errors.join("; "))
        };
        match verdict {
            Ok(()) => {
                eprintln!("[{what}: after {} ms]", start.elapsed().as_millis());
                return Ok((ss, start.elapsed()));
            }
            Err(reason) if start.elapsed() >= limit => {
                return Err(format!("{what}: not within {limit:?}; last: {reason}"));
            }
            Err(reason) => {
                if shown.0.elapsed() >= PROGRESS_EVERY && reason != shown.1 {
                    eprintln!(
                        "[{what}: still waiting after {} ms: {reason}]",
                        start.elapsed().as_millis()
                    );
                    shown = (Instant::now(), reason);
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

/// Names of the links in the root namespace.
pub(super) fn root_links() -> BTreeSet<String> {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("running ip");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

fn namespaces() -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("running ip");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

pub(super) fn our_namespaces() -> Vec<String> {
    let mine = format!("{}-", prefix());
    namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&mine))
        .collect()
}

/// Takes down the testbeds left by runs of this test that died without cleaning up (their
/// pid is gone), found by their namespaces and state directories.
pub(super) fn down_stale_testbeds() {
    let mut names: Vec<String> = namespaces()
        .into_iter()
        .filter_map(|n| n.split_once('-').map(|(p, _)| p.to_string()))
        .collect();
    if let Ok(dir) = std::fs::read_dir("/run/overlay-netns") {
        names.extend(dir.filter_map(|e| e.ok()?.file_name().into_string().ok()));
    }
    names.sort();
    names.dedup();
    for name in names {
        let Some(pid) = name.strip_prefix(PREFIX_BASE) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new(&format!("/proc/{pid}")).exists() {
            let out = run_with_timeout(script_for("down", &name), Duration::from_secs(60));
            eprint!("left by a previous run: {}", out.stdout);
        }
    }
}

pub(super) fn pid_running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z")
}

/// Every pid the testbed recorded (nodes and emulator).
pub(super) fn recorded_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(state_dir().join("pids")) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// Prints the end of every log of the testbed (nodes and emulator).
pub(super) fn dump_logs() {
    let Ok(dir) = std::fs::read_dir(state_dir().join("logs")) else {
        return;
    };
    let mut files: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        eprintln!(
            "---- {} ----\n{}",
            f.display(),
            lines[lines.len().saturating_sub(8)..].join("\n")
        );
    }
}

/// Takes the testbed down when dropped (also on a panic), after printing the ends of the
/// logs if the test is failing.
pub(super) struct Testbed {
    pub(super) down: bool,
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if self.down {
            return;
        }
        if std::thread::panicking() {
            dump_logs();
        }
        let _ = script("down").status();
    }
}
