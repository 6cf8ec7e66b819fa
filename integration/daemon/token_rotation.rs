//! Rotating the overlay's join token on real daemons: every member gets the new token and
//! stays, a member that was down comes back with the old one and is given the new one, a
//! newcomer needs the new one.

use super::{Daemon, trio};
use crate::common::{TempDir, node_cmd, real_network, run_with_timeout};
use std::time::{Duration, Instant};

/// Polls `done` every 200 ms for up to `limit`; panics with `what` if it never holds.
fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what} not within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    start.elapsed()
}

#[test]
fn a_rotated_token_reaches_every_member_and_only_it_admits_newcomers() {
    let _net = real_network();
    let base = TempDir::new("rotate");
    let [a, mut b, mut c] = trio(base.path());
    let old = a.token();
    // b is down while the token changes.
    b.proc.kill();
    let out = a.cli(&["token", "rotate"]);
    assert!(out.status.success(), "token rotate: {}", out.stderr);
    let new = out.stdout.trim().to_string();
    assert!(new.starts_with("ovl1-") && new != old, "{new:?}");
    let spread = wait_for(Duration::from_secs(20), "the new token at c", || {
        a.token() == new && c.token() == new
    });
    println!("the new token reached the other running member in {spread:?}");

    // A newcomer with the old token is refused, through a member that did not rotate.
    let c_addr = c.addr().to_string();
    let mut cmd = node_cmd();
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--join",
        &c_addr,
        "--join-timeout",
        "10",
    ])
    .arg("--data-dir")
    .arg(base.path().join("stranger"))
    .env("OVERLAY_TOKEN", &old);
    let out = run_with_timeout(cmd, Duration::from_secs(30));
    assert!(
        !out.status.success() && out.stderr.contains("token"),
        "a newcomer with the old token was not refused: {}",
        out.stderr
    );

    // A newcomer with the new token joins through that member.
    let d = Daemon::start_with(
        base.path(),
        "d",
        &["--listen", "127.0.0.1:0", "--join", &c_addr],
        |cmd| {
            cmd.env("OVERLAY_TOKEN", &new);
        },
    );
    // b restarts from its data directory, which holds the old token: a member is let in
    // and given the new one, which it keeps.
    let b2 = Daemon::start(base.path(), "b", &[]);
    let caught_up = wait_for(Duration::from_secs(30), "the new token at b", || {
        b2.token() == new
    });
    println!("the restarted member held the new token {caught_up:?} after answering");
    for node in [&a, &b2, &c, &d] {
        node.wait_alive(4);
    }

    // c restarts with the original token given again (as a config file or the
    // environment would): the rotated token in its data directory wins.
    c.proc.kill();
    let old_file = base.path().join("old-token.txt");
    std::fs::write(&old_file, format!("{old}\n")).expect("token file");
    let a_addr = a.addr().to_string();
    let old_arg = old_file.to_str().expect("utf-8");
    let c2 = Daemon::start(
        base.path(),
        "c",
        &[
            "--listen",
            "127.0.0.1:0",
            "--join",
            &a_addr,
            "--token-file",
            old_arg,
        ],
    );
    assert_eq!(
        c2.token(),
        new,
        "a restart with the original token rolled back"
    );
    for node in [&a, &b2, &c2, &d] {
        node.wait_alive(4);
    }
}
