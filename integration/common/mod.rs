//! Helpers shared by the process-level tests: a child-process guard that kills on drop, a
//! temporary directory removed on drop, free loopback ports, and running a short command
//! with a time limit.

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The `overlay-node` binary built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_overlay-node");

/// A child process that is killed (SIGKILL) and reaped when dropped, also on panic.
pub struct Proc {
    pub name: String,
    pub child: Option<Child>,
}

impl Proc {
    pub fn new(name: impl Into<String>, child: Child) -> Proc {
        Proc {
            name: name.into(),
            child: Some(child),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Kills with SIGKILL and reaps the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process has exited (and how).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A fresh directory under the system temp dir, removed with everything in it on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        // Short: admin sockets live in here and Unix socket paths are limited to 108 bytes.
        let dir = std::env::temp_dir().join(format!(
            "ovl-{tag}-{}-{nanos:x}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("creating a temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `n` distinct free UDP ports on 127.0.0.1 (all sockets held until every port is known).
pub fn free_udp_ports(n: usize) -> Vec<u16> {
    let sockets: Vec<std::net::UdpSocket> = (0..n)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").expect("binding a UDP socket"))
        .collect();
    sockets
        .iter()
        .map(|s| s.local_addr().expect("local addr").port())
        .collect()
}

/// What a finished short command produced.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` to completion with its output captured; kills it and panics after `limit`.
pub fn run_with_timeout(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let mut guard = Proc::new("command", child);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = guard.exited() {
            break status;
        }
        if Instant::now() >= deadline {
            guard.kill();
            panic!("{shown} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    guard.child = None;
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// A command for the node binary with a clean environment for the token and the HTTP
/// endpoints.
pub fn node_cmd() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("OVERLAY_TOKEN")
        .env_remove("OVERLAY_METRICS")
        .env_remove("OVERLAY_HTTP")
        .env("RUST_LOG", "info,quinn=warn,rustls=warn");
    cmd
}

/// Taken by every test over a real network (QUIC on loopback, processes, namespaces) so
/// that no two of them overlap: in one test binary they would otherwise share the two
/// cores of a CI machine and time each other out. Simulator tests run beside them.
pub fn real_network() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it must not fail the others.
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `calls` (one per node of `overlay`), crashes node `victim` 1.5 s in, so the crash
/// lands mid-transfer, and waits for every call, 150 s at most (a hang fails the test).
/// Prints how long after the crash the others finished, under `what`.
pub async fn crash_during<T: Send + 'static>(
    overlay: &overlay::local::LocalOverlay,
    victim: usize,
    what: &str,
    calls: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let all = tokio::spawn(calls);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let start = Instant::now();
    overlay.crash(victim);
    let results = tokio::time::timeout(Duration::from_secs(150), all)
        .await
        .expect("no hang")
        .expect("joined");
    println!(
        "crash of node {victim} {what}: the others finished {:?} later",
        start.elapsed()
    );
    results
}

/// A member that is neither `root` nor the planner (the smallest id): crashing it tests
/// the transfers, not the hand-over of the plan.
pub fn victim_of(nodes: &[overlay::Node], root: overlay::NodeId) -> usize {
    let planner = nodes.iter().map(overlay::Node::id).min().expect("nodes");
    (0..nodes.len())
        .rev()
        .find(|i| nodes[*i].id() != planner && nodes[*i].id() != root)
        .expect("a member that neither roots nor plans")
}

/// The crashed member is named exactly once in `report`: a contributor when its part was
/// through before the crash (a loaded machine may be that slow), missing otherwise; every
/// other member is a contributor.
pub fn victim_named_once(
    report: &overlay::bulk::BulkReport,
    victim: overlay::NodeId,
    n: usize,
    who: &str,
) {
    let contributed = report.contributors.contains(&victim);
    assert_ne!(
        contributed,
        report.missing.contains(&victim),
        "{who}: {report:?}"
    );
    let want = if contributed { n } else { n - 1 };
    assert_eq!(report.contributors.len(), want, "{who}: {report:?}");
    println!(
        "{who}: {} contributors, the crashed member {}, {} attempt(s), {:?}",
        report.contributors.len(),
        if contributed { "among them" } else { "missing" },
        report.attempts,
        report.elapsed
    );
}
