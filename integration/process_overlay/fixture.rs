//! The node processes: spawning them, watching that they run, signalling them, and
//! reading their logs and their use of memory and CPU.

use super::observe::status;
use super::{ENV_TOKEN_NODE, N};
use crate::common::{Proc, TempDir, node_cmd};
use overlay::api::NodeStatus;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A node process and where it keeps its state.
pub(super) struct NodeProc {
    pub(super) name: String,
    pub(super) port: u16,
    pub(super) dir: PathBuf,
    pub(super) log: PathBuf,
    pub(super) proc: Option<Proc>,
}

/// The whole test fixture. Processes are killed before the directory is removed (field
/// order is drop order).
pub(super) struct Fixture {
    pub(super) nodes: Vec<NodeProc>,
    pub(super) seed_port: u16,
    pub(super) token: String,
    /// Removed last, after every process is gone.
    pub(super) _base: TempDir,
}

impl Fixture {
    /// Spawns node `i` joining the seed (stdout and stderr go to its log file).
    pub(super) fn spawn_joiner(&mut self, i: usize) {
        self.spawn(i, true);
    }

    /// Spawns node `i`; with `join`, through the seed with the token, else (a restart) with
    /// nothing but its data directory.
    pub(super) fn spawn(&mut self, i: usize, join: bool) {
        let seed_port = self.seed_port;
        let token = self.token.clone();
        let n = &mut self.nodes[i];
        let mut cmd = node_cmd();
        cmd.arg("--listen")
            .arg(format!("127.0.0.1:{}", n.port))
            .arg("--data-dir")
            .arg(&n.dir)
            .arg("--name")
            .arg(&n.name);
        if join {
            cmd.arg("--join").arg(format!("127.0.0.1:{seed_port}"));
            if i == ENV_TOKEN_NODE {
                cmd.env("OVERLAY_TOKEN", &token);
            } else {
                cmd.arg("--token").arg(&token);
            }
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log)
            .expect("opening a log file");
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log);
        let child = cmd.spawn().expect("spawning overlay-node");
        n.proc = Some(Proc::new(n.name.clone(), child));
    }

    pub(super) fn running(&self) -> Vec<usize> {
        (0..N).filter(|&i| self.nodes[i].proc.is_some()).collect()
    }

    /// Panics if a node that should be running has exited.
    pub(super) fn check_alive(&mut self) {
        for n in &mut self.nodes {
            if let Some(p) = n.proc.as_mut()
                && let Some(status) = p.exited()
            {
                let name = n.name.clone();
                let log = tail(&n.log, 30);
                panic!("{name} exited on its own ({status}); its log ends with:\n{log}");
            }
        }
    }

    /// Prints the end of every log (on a failure).
    pub(super) fn dump_logs(&self) {
        for n in &self.nodes {
            eprintln!("---- {} ----\n{}", n.name, tail(&n.log, 15));
        }
    }

    /// Polls `status --json` on the nodes `which` until `cond` accepts the statuses (in the
    /// order of `which`); returns how long it took. Panics with the last reason after `limit`.
    pub(super) fn wait_until(
        &mut self,
        what: &str,
        which: &[usize],
        limit: Duration,
        mut cond: impl FnMut(&[NodeStatus]) -> Result<(), String>,
    ) -> Duration {
        let start = Instant::now();
        let mut rounds = 0u32;
        loop {
            rounds += 1;
            self.check_alive();
            let statuses: Result<Vec<NodeStatus>, String> =
                which.iter().map(|&i| status(&self.nodes[i].dir)).collect();
            let last = match statuses.and_then(|s| cond(&s)) {
                Ok(()) => {
                    let took = start.elapsed();
                    eprintln!(
                        "[{what}: reached after {} ms, {rounds} polling rounds of {} nodes]",
                        took.as_millis(),
                        which.len()
                    );
                    return took;
                }
                Err(reason) => reason,
            };
            if start.elapsed() >= limit {
                self.dump_logs();
                panic!("{what}: not reached within {limit:?}; last: {last}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Sends a signal (`-STOP`, `-TERM`, ...) to a process.
pub(super) fn signal(pid: u32, sig: &str) {
    let sent = std::process::Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .expect("running kill");
    assert!(sent.success(), "kill {sig} {pid} failed");
}

/// The last `n` lines of a file.
pub(super) fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Resident set size (kB) and CPU time (clock ticks) of a process, from /proc.
pub(super) fn proc_usage(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start with the state (3rd).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 here (0-based 11, 12).
    (rss_kb, ticks(11) + ticks(12))
}

/// Linux reports process times in USER_HZ, 100 on every mainstream architecture.
pub(super) const TICKS_PER_SEC: f64 = 100.0;
