//! The admin socket under abuse by local clients: it keeps serving after the node ran out
//! of descriptors, tells clients beyond its cap that it is busy, and output piped into
//! `head` ends quietly.

use super::Daemon;
use crate::common::{TempDir, node_cmd, real_network};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Opens `n` admin connections that send nothing.
fn idle_clients(d: &Daemon, n: usize) -> Vec<UnixStream> {
    let path = overlay::admin::socket_path(&d.dir);
    (0..n)
        .filter_map(|_| UnixStream::connect(&path).ok())
        .collect()
}

#[test]
fn the_admin_socket_serves_again_after_the_node_ran_out_of_descriptors() {
    let _net = real_network();
    let base = TempDir::new("admin-fds");
    let mut d = Daemon::start_with(base.path(), "a", &["--listen", "127.0.0.1:0"], |cmd| {
        // SAFETY: only setrlimit, which is async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 128,
                    rlim_max: 128,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    // More than the node has descriptors: accept() fails with EMFILE for a while.
    let idle = idle_clients(&d, 300);
    assert!(idle.len() > 128, "only {} connected", idle.len());
    std::thread::sleep(Duration::from_secs(1));
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = d.cli(&["status"]);
        if out.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "status still fails 20 s after the idle clients left: {}\n{}",
            out.stderr,
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        d.log_text().contains("admin socket cannot accept"),
        "the node never ran out of descriptors: the test proves nothing\n{}",
        d.log_text()
    );
    assert!(d.proc.exited().is_none(), "the node is still running");
}

#[test]
fn clients_beyond_the_cap_are_told_the_node_is_busy() {
    let _net = real_network();
    let base = TempDir::new("admin-cap");
    let d = Daemon::start(base.path(), "a", &["--listen", "127.0.0.1:0"]);
    let idle = idle_clients(&d, overlay::admin::MAX_ADMIN_CONNECTIONS + 20);
    std::thread::sleep(Duration::from_millis(500));
    let busy = d.cli(&["status"]);
    assert!(!busy.status.success(), "status answered past the cap");
    assert!(busy.stderr.contains("busy"), "{}", busy.stderr);
    drop(idle);
    // The closed clients' slots come back as the node reads their end of file.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ok = d.cli(&["status"]);
        if ok.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {}", ok.stderr);
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn status_piped_into_head_ends_quietly() {
    let _net = real_network();
    let base = TempDir::new("admin-pipe");
    let d = Daemon::start(base.path(), "a", &["--listen", "127.0.0.1:0"]);
    let mut cmd = node_cmd();
    cmd.args(["status", "--json", "--data-dir"]).arg(&d.dir);
    // A reader that closes at once: every write after that is a broken pipe.
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
