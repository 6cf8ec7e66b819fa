//! A daemon whose seed is not up yet does not exit: it keeps trying, says so now and then,
//! answers `status` with what it waits for, and joins once the seed starts.

use super::{Daemon, free_port};
use crate::common::{Proc, TempDir, node_cmd, real_network, run_with_timeout};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn a_daemon_waits_for_a_silent_seed_and_joins_when_it_comes_up() {
    let _net = real_network();
    let base = TempDir::new("slow-seed");
    let port = free_port();
    // Something holds the port and never answers: a host that is up but not serving yet
    // (no ICMP port-unreachable, so nothing says "closed").
    let silent = std::net::UdpSocket::bind(("127.0.0.1", port)).expect("bind");
    let token = format!("ovl1-{}", "cd".repeat(32));
    let b_dir = base.path().join("b");
    let b_log = base.path().join("b.log");
    let out = std::fs::File::create(&b_log).expect("log file");
    let mut cmd = node_cmd();
    cmd.args(["--listen", "127.0.0.1:0", "--name", "b", "--join"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--token", &token, "--data-dir"])
        .arg(&b_dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log handle"))
        .stderr(out);
    let mut b = Proc::new("b", cmd.spawn().expect("spawn"));
    let waited = Duration::from_secs(15);
    std::thread::sleep(waited);
    let log = std::fs::read_to_string(&b_log).unwrap_or_default();
    assert!(
        b.exited().is_none(),
        "the daemon exited while its seed was silent:\n{log}"
    );
    let lines = log
        .lines()
        .filter(|l| l.contains("join attempt failed"))
        .count();
    assert!(
        (1..=4).contains(&lines),
        "it says it waits, a few times, not at every attempt ({lines} lines):\n{log}"
    );
    // Its admin socket says what it waits for.
    let mut status = node_cmd();
    status.arg("status").arg("--data-dir").arg(&b_dir);
    let out = run_with_timeout(status, Duration::from_secs(20));
    assert!(
        !out.status.success()
            && out.stderr.contains("still joining")
            && out.stderr.contains(&format!("127.0.0.1:{port}")),
        "status while joining: {}{}",
        out.stdout,
        out.stderr
    );
    println!("status while joining: {}", out.stderr.trim());

    // The seed comes up on that address with that token.
    drop(silent);
    let t = Instant::now();
    let a = Daemon::start(
        base.path(),
        "a",
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--name",
            "a",
            "--token",
            &token,
        ],
    );
    a.wait_alive(2);
    println!(
        "silent seed for {waited:?} ({lines} log lines); joined {:.1} s after the seed came up",
        t.elapsed().as_secs_f64()
    );
    b.kill();
}
