//! Driving a running daemon: health, listen and broadcast, leave, published values.

use super::Daemon;
use crate::common::{Proc, TempDir, node_cmd, real_network, run_with_timeout};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn health_exits_0_for_a_working_node_and_1_otherwise() {
    let _net = real_network();
    let base = TempDir::new("health");
    let missing = base.path().join("nobody");
    let mut cmd = node_cmd();
    cmd.arg("health").arg("--data-dir").arg(&missing);
    let out = run_with_timeout(cmd, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1), "no node: {}", out.stderr);
    assert!(out.stderr.contains("unhealthy"), "{}", out.stderr);

    let a = Daemon::start(base.path(), "a", &["--listen", "127.0.0.1:0"]);
    let a_addr = a.members_json()[0]["addr"]
        .as_str()
        .expect("addr")
        .to_string();
    let token_file = base.path().join("token.txt");
    std::fs::write(&token_file, format!("{}\n", a.token())).expect("token file");
    let mut b = Daemon::start(
        base.path(),
        "b",
        &[
            "--listen",
            "127.0.0.1:0",
            "--join",
            &a_addr,
            "--token-file",
            token_file.to_str().unwrap(),
        ],
    );
    a.wait_alive(2);
    let ok = a.cli(&["health"]);
    assert_eq!(ok.status.code(), Some(0), "{} {}", ok.stdout, ok.stderr);
    assert!(ok.stdout.starts_with("healthy"), "{}", ok.stdout);
    // Its only peer dies: the node answers but is cut off.
    b.proc.kill();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let out = a.cli(&["health"]);
        if out.status.code() == Some(1) {
            assert!(out.stderr.contains("alive"), "{}", out.stderr);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still healthy 40 s after its only peer died"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn listen_receives_a_5_mib_file_broadcast_from_another_node_intact() {
    let _net = real_network();
    let base = TempDir::new("listen");
    let (payload, sha) = pseudo_random(5 << 20);
    let got = send_file_to_listener(base.path(), &payload, &[], &[]);
    assert_eq!(got["bytes"], 5 << 20, "{got}");
    assert_eq!(got["sha256"], sha.as_str(), "{got}");
    assert_eq!(got["kind"], "broadcast");
    println!("listen got {} bytes, sha256 {sha}", got["bytes"]);
}

/// A file above the piece size goes as several broadcasts and comes out whole: the same
/// mechanism as a file of several GiB with the default 256 MiB pieces, at a test's size.
#[test]
fn a_file_sent_piece_by_piece_is_put_together_by_listen() {
    let _net = real_network();
    let base = TempDir::new("pieces");
    let (payload, sha) = pseudo_random((5 << 20) / 2);
    let out = base.path().join("received");
    let out_arg = out.to_str().expect("utf-8 path");
    let got = send_file_to_listener(
        base.path(),
        &payload,
        &["--piece-size", "1048576"],
        &["--out-dir", out_arg],
    );
    assert_eq!(got["kind"], "file", "{got}");
    assert_eq!(got["pieces"], 3, "{got}");
    assert_eq!(got["bytes"], payload.len(), "{got}");
    assert_eq!(got["sha256"], sha.as_str(), "{got}");
    let written = std::fs::read(got["file"].as_str().expect("a file")).expect("the file");
    assert!(written == payload, "the file on disk differs");
    let left: Vec<_> = std::fs::read_dir(&out).expect("out dir").collect();
    assert_eq!(left.len(), 1, "part files left behind: {left:?}");
}

/// `len` pseudo-random bytes and their SHA-256 in hex.
fn pseudo_random(len: usize) -> (Vec<u8>, String) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let payload: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let sha = hex(ring::digest::digest(&ring::digest::SHA256, &payload).as_ref());
    (payload, sha)
}

/// Two daemons; `listen --count 1 LISTEN_ARGS` on the second while the first runs
/// `broadcast --file F SEND_ARGS`; returns the listener's one JSON line.
fn send_file_to_listener(
    base: &std::path::Path,
    payload: &[u8],
    send_args: &[&str],
    listen_args: &[&str],
) -> serde_json::Value {
    let a = Daemon::start(base, "a", &["--listen", "127.0.0.1:0"]);
    let a_addr = a.members_json()[0]["addr"]
        .as_str()
        .expect("addr")
        .to_string();
    let token = a.token();
    let b = Daemon::start_with(
        base,
        "b",
        &["--listen", "127.0.0.1:0", "--join", &a_addr],
        |c| {
            c.env("OVERLAY_TOKEN", &token);
        },
    );
    a.wait_alive(2);
    b.wait_alive(2);
    let file = base.join("payload.bin");
    std::fs::write(&file, payload).expect("payload file");

    let listen_log = base.join("listen.out");
    let listen_err = base.join("listen.err");
    let mut cmd = node_cmd();
    cmd.args(["listen", "--count", "1"])
        .args(listen_args)
        .arg("--data-dir")
        .arg(&b.dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&listen_log).expect("out"))
        .stderr(std::fs::File::create(&listen_err).expect("err"));
    let mut listener = Proc::new("listen", cmd.spawn().expect("spawning listen"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&listen_err)
        .unwrap_or_default()
        .contains("listening")
    {
        assert!(Instant::now() < deadline, "listen never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut args = vec!["broadcast", "--file", file.to_str().unwrap(), "--json"];
    args.extend(send_args);
    let sent = a.cli(&args);
    assert!(sent.status.success(), "broadcast: {}", sent.stderr);
    let report: serde_json::Value = serde_json::from_str(sent.stdout.trim()).expect("JSON report");
    assert_eq!(
        report["missing"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );
    assert_eq!(
        report["delivered"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = listener.exited() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "listen did not report the delivery within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "listen failed: {}",
        std::fs::read_to_string(&listen_err).unwrap()
    );
    let line = std::fs::read_to_string(&listen_log).expect("listen output");
    serde_json::from_str(line.trim()).expect("one JSON line")
}

#[test]
fn leave_ends_the_node_and_its_dead_tree_is_an_error() {
    let _net = real_network();
    let base = TempDir::new("leave");
    let a = Daemon::start(
        base.path(),
        "a",
        &["--listen", "127.0.0.1:0", "--name", "a"],
    );
    let a_addr = a.members_json()[0]["addr"]
        .as_str()
        .expect("addr")
        .to_string();
    let token = a.token();
    let mut b = Daemon::start_with(
        base.path(),
        "b",
        &["--listen", "127.0.0.1:0", "--join", &a_addr, "--name", "b"],
        |c| {
            c.env("OVERLAY_TOKEN", &token);
        },
    );
    a.wait_alive(2);
    assert!(a.cli(&["tree", "b"]).status.success());
    let out = b.cli(&["leave"]);
    assert!(out.status.success(), "leave: {}", out.stderr);
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = b.proc.exited() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the node did not exit after leave"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit after leave: {status}");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = a.cli(&["tree", "b"]);
        if !out.status.success() {
            assert!(out.stderr.contains("left"), "{}", out.stderr);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the tree of a node that left still printed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn published_values_are_gathered_and_reduced_from_the_command_line() {
    let _net = real_network();
    let base = TempDir::new("values");
    let a = Daemon::start(
        base.path(),
        "a",
        &["--listen", "127.0.0.1:0", "--name", "a"],
    );
    let a_addr = a.members_json()[0]["addr"]
        .as_str()
        .expect("addr")
        .to_string();
    let token = a.token();
    let join = ["--listen", "127.0.0.1:0", "--join", &a_addr];
    let b = Daemon::start_with(base.path(), "b", &join, |c| {
        c.env("OVERLAY_TOKEN", &token);
    });
    let c = Daemon::start_with(base.path(), "c", &join, |c| {
        c.env("OVERLAY_TOKEN", &token);
    });
    a.wait_alive(3);
    assert!(a.cli(&["publish", "load", "2"]).status.success());
    assert!(b.cli(&["publish", "load", "4.5"]).status.success());
    // c publishes nothing: it is reported as without a value, not missing.
    let _ = &c;
    let sum = c.cli(&["reduce", "load", "--json"]);
    assert!(sum.status.success(), "{}", sum.stderr);
    let sum: serde_json::Value = serde_json::from_str(&sum.stdout).expect("JSON");
    assert_eq!(sum["value"].as_f64(), Some(6.5), "{sum}");
    assert_eq!(
        sum["contributors"].as_array().map(Vec::len),
        Some(2),
        "{sum}"
    );
    assert_eq!(sum["declined"].as_array().map(Vec::len), Some(1), "{sum}");
    let max = c.cli(&["reduce", "load", "--op", "max", "--json"]);
    let max: serde_json::Value = serde_json::from_str(&max.stdout).expect("JSON");
    assert_eq!(max["value"].as_f64(), Some(4.5), "{max}");
    let all = c.cli(&["gather", "load", "--json"]);
    let all: serde_json::Value = serde_json::from_str(&all.stdout).expect("JSON");
    let mut got: Vec<f64> = all["values"]
        .as_array()
        .expect("values")
        .iter()
        .map(|pair| pair[1].as_f64().expect("a number"))
        .collect();
    got.sort_by(f64::total_cmp);
    assert_eq!(got, vec![2.0, 4.5], "{all}");
    let count = c.cli(&["reduce", "count", "--json"]);
    let count: serde_json::Value = serde_json::from_str(&count.stdout).expect("JSON");
    assert_eq!(count["count"], 3, "{count}");
}
