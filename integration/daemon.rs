//! `overlay-node` as an operator runs it: the data directory locked and private, a restart
//! with nothing but the data directory, `--advertise`, the config file, `health`, `token
//! show`, `leave`, `listen` receiving a `broadcast --file`, and joins that fail fast.

mod admin_limits;
mod commands;
mod connection_flood;
mod log_flood;
mod malicious_member;
mod relay_flood;
mod setup;
mod slow_seed;
mod token_rotation;

use crate::common::{Output, Proc, node_cmd, run_with_timeout};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A running daemon and where it keeps its state.
pub(super) struct Daemon {
    dir: PathBuf,
    log: PathBuf,
    proc: Proc,
}

impl Daemon {
    /// Starts `overlay-node ARGS --data-dir DIR` and waits until its admin socket answers.
    fn start(base: &Path, name: &str, args: &[&str]) -> Daemon {
        Self::start_with(base, name, args, |_| {})
    }

    fn start_with(
        base: &Path,
        name: &str,
        args: &[&str],
        edit: impl FnOnce(&mut Command),
    ) -> Daemon {
        let dir = base.join(name);
        let log = base.join(format!("{name}.log"));
        let mut cmd = node_cmd();
        cmd.args(args).arg("--data-dir").arg(&dir);
        edit(&mut cmd);
        let out = std::fs::File::create(&log).expect("log file");
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out);
        let proc = Proc::new(name, cmd.spawn().expect("spawning overlay-node"));
        let mut d = Daemon { dir, log, proc };
        d.wait_answering();
        d
    }

    fn wait_answering(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.proc.exited() {
                panic!(
                    "{} exited with {status}:\n{}",
                    self.proc.name,
                    self.log_text()
                );
            }
            if self.cli(&["status"]).status.success() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{} did not answer within 30 s:\n{}",
            self.proc.name,
            self.log_text()
        );
    }

    /// Runs `overlay-node SUBCOMMAND ... --data-dir DIR`.
    fn cli(&self, args: &[&str]) -> Output {
        let mut cmd = node_cmd();
        cmd.args(args).arg("--data-dir").arg(&self.dir);
        run_with_timeout(cmd, Duration::from_secs(60))
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The address this node gossips, as its own `members` entry shows it.
    fn addr(&self) -> std::net::SocketAddr {
        let out = self.cli(&["status", "--json"]);
        assert!(out.status.success(), "status: {}", out.stderr);
        let status: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
        let members = self.members_json();
        let me = members
            .as_array()
            .expect("an array")
            .iter()
            .find(|m| m["id"] == status["id"])
            .expect("this node among its members");
        me["addr"]
            .as_str()
            .expect("addr")
            .parse()
            .expect("a socket address")
    }

    /// Run flags that join this node: a loopback listen address, `--join` its address and
    /// `--token-file` a copy of its token written under `base`.
    fn join_args(&self, base: &Path) -> Vec<String> {
        let token_file = base.join("token.txt");
        std::fs::write(&token_file, format!("{}\n", self.token())).expect("token file");
        let token_file = token_file.to_str().expect("utf-8").to_string();
        let addr = self.addr().to_string();
        [
            "--listen",
            "127.0.0.1:0",
            "--join",
            &addr,
            "--token-file",
            &token_file,
        ]
        .map(String::from)
        .to_vec()
    }

    fn token(&self) -> String {
        let out = self.cli(&["token", "show"]);
        assert!(out.status.success(), "token show: {}", out.stderr);
        out.stdout.trim().to_string()
    }

    fn members_json(&self) -> serde_json::Value {
        let out = self.cli(&["members", "--json"]);
        assert!(out.status.success(), "members: {}", out.stderr);
        serde_json::from_str(&out.stdout).expect("members --json is JSON")
    }

    /// Waits until this node sees `n` members alive.
    fn wait_alive(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let alive = self
                .members_json()
                .as_array()
                .map_or(0, |m| m.iter().filter(|m| m["state"] == "alive").count());
            if alive == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{alive} of {n} members alive after 30 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub(super) fn free_port() -> u16 {
    crate::common::free_udp_ports(1)[0]
}

/// Three daemons on loopback: "a", then "b" and "c" joined through it, all seeing the
/// three alive.
pub(super) fn trio(base: &Path) -> [Daemon; 3] {
    let a = Daemon::start(base, "a", &["--listen", "127.0.0.1:0"]);
    let args = a.join_args(base);
    let join: Vec<&str> = args.iter().map(String::as_str).collect();
    let b = Daemon::start(base, "b", &join);
    let c = Daemon::start(base, "c", &join);
    for d in [&a, &b, &c] {
        d.wait_alive(3);
    }
    [a, b, c]
}

/// Resident set size of a process, MiB.
pub(super) fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// The median of some times (zero if there are none).
pub(super) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}
