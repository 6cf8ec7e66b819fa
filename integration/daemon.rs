//! `overlay-node` as an operator runs it: the data directory locked and private, a restart
//! with nothing but the data directory, `--advertise`, the config file, `health`, `token
//! show`, `leave`, `listen` receiving a `broadcast --file`, and joins that fail fast.

use crate::common::{Output, Proc, TempDir, node_cmd, real_network, run_with_timeout};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A running daemon and where it keeps its state.
struct Daemon {
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

fn free_port() -> u16 {
    crate::common::free_udp_ports(1)[0]
}

#[test]
fn a_second_node_on_a_data_dir_in_use_is_refused_with_the_holders_pid() {
    let _net = real_network();
    let base = TempDir::new("lock");
    let a = Daemon::start(base.path(), "a", &["--listen", "127.0.0.1:0"]);
    let mut cmd = node_cmd();
    cmd.args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&a.dir);
    let out = run_with_timeout(cmd, Duration::from_secs(20));
    assert!(!out.status.success());
    let pid = a.proc.pid().to_string();
    assert!(
        out.stderr.contains("in use") && out.stderr.contains(&pid),
        "the refusal does not name the holder {pid}: {}",
        out.stderr
    );
    // The running node kept its admin socket and still answers.
    assert!(
        a.cli(&["status"]).status.success(),
        "the running node was disturbed"
    );
}

#[test]
fn a_restart_with_only_the_data_dir_keeps_id_address_and_name() {
    let _net = real_network();
    let base = TempDir::new("restart");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut a = Daemon::start(base.path(), "a", &["--listen", &listen, "--name", "alpha"]);
    let before = a.members_json();
    a.proc.kill();
    let a2 = Daemon::start(base.path(), "a", &[]);
    let after = a2.members_json();
    let me = |v: &serde_json::Value| v.as_array().expect("array")[0].clone();
    assert_eq!(me(&before)["id"], me(&after)["id"], "the id changed");
    assert_eq!(me(&after)["addr"], listen.as_str(), "the address changed");
    assert_eq!(me(&after)["name"], "alpha", "the name changed");
    assert!(
        !a2.log_text().contains("to join this overlay"),
        "a restart printed a new overlay's join line:\n{}",
        a2.log_text()
    );
}

#[test]
fn a_node_listening_on_any_address_gossips_the_advertised_one() {
    let _net = real_network();
    let base = TempDir::new("advert");
    let a = Daemon::start(
        base.path(),
        "a",
        &["--listen", "127.0.0.1:0", "--name", "a"],
    );
    let token = a.token();
    let a_addr = a.members_json()[0]["addr"]
        .as_str()
        .expect("addr")
        .to_string();
    // Without --advertise and without --join there is nothing to pick the address from.
    let mut cmd = node_cmd();
    cmd.args(["--listen", "0.0.0.0:0", "--data-dir"])
        .arg(base.path().join("lonely"));
    let out = run_with_timeout(cmd, Duration::from_secs(20));
    assert!(
        !out.status.success() && out.stderr.contains("--advertise"),
        "{}",
        out.stderr
    );
    // With it, the others are told the advertised address, never 0.0.0.0.
    let port = free_port();
    let b = Daemon::start_with(
        base.path(),
        "b",
        &[
            "--listen",
            &format!("0.0.0.0:{port}"),
            "--advertise",
            &format!("127.0.0.1:{port}"),
            "--join",
            &a_addr,
            "--name",
            "b",
        ],
        |c| {
            c.env("OVERLAY_TOKEN", &token);
        },
    );
    b.wait_alive(2);
    a.wait_alive(2);
    let seen = a.members_json();
    let b_seen = seen
        .as_array()
        .expect("array")
        .iter()
        .find(|m| m["name"] == "b")
        .expect("a knows b")
        .clone();
    assert_eq!(b_seen["addr"], format!("127.0.0.1:{port}").as_str());
}

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
    let a = Daemon::start(base.path(), "a", &["--listen", "127.0.0.1:0"]);
    let a_addr = a.members_json()[0]["addr"]
        .as_str()
        .expect("addr")
        .to_string();
    let token = a.token();
    let b = Daemon::start_with(
        base.path(),
        "b",
        &["--listen", "127.0.0.1:0", "--join", &a_addr],
        |c| {
            c.env("OVERLAY_TOKEN", &token);
        },
    );
    a.wait_alive(2);
    b.wait_alive(2);

    let file = base.path().join("payload.bin");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let payload: Vec<u8> = (0..5 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&file, &payload).expect("payload file");
    let sha = hex(ring::digest::digest(&ring::digest::SHA256, &payload).as_ref());

    let listen_log = base.path().join("listen.out");
    let listen_err = base.path().join("listen.err");
    let mut cmd = node_cmd();
    cmd.args(["listen", "--count", "1", "--data-dir"])
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
    let sent = a.cli(&["broadcast", "--file", file.to_str().unwrap(), "--json"]);
    assert!(sent.status.success(), "broadcast: {}", sent.stderr);
    let report: serde_json::Value = serde_json::from_str(sent.stdout.trim()).expect("JSON report");
    assert_eq!(
        report["missing"].as_array().map(Vec::len),
        Some(0),
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
    let got: serde_json::Value = serde_json::from_str(line.trim()).expect("one JSON line");
    assert_eq!(got["bytes"], 5 << 20, "{got}");
    assert_eq!(got["sha256"], sha.as_str(), "{got}");
    assert_eq!(got["kind"], "broadcast");
    println!("listen got {} bytes, sha256 {sha}", got["bytes"]);
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

#[test]
fn joining_a_closed_port_fails_within_seconds_naming_the_address() {
    let base = TempDir::new("closed");
    let port = free_port();
    let token = format!("ovl1-{}", "ab".repeat(32));
    let mut cmd = node_cmd();
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--join",
        &format!("127.0.0.1:{port}"),
        "--token",
        &token,
    ])
    .arg("--data-dir")
    .arg(base.path().join("d"));
    let t0 = Instant::now();
    let out = run_with_timeout(cmd, Duration::from_secs(30));
    let took = t0.elapsed();
    assert!(!out.status.success());
    let last = out.stderr.lines().last().unwrap_or("");
    assert!(
        last.contains(&format!("127.0.0.1:{port}")) && last.contains("closed"),
        "{last}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    println!("a join to a closed port failed after {took:?}: {last}");
}

#[test]
fn config_file_env_and_flags_merge_with_flags_winning() {
    let base = TempDir::new("config");
    let config = base.path().join("node.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:7600\"\nname = \"from-file\"\njoin = [\"127.0.0.1:7601\"]\nlog_format = \"json\"\n",
    )
    .expect("config file");
    let mut cmd = node_cmd();
    cmd.args([
        "config",
        "print",
        "--config",
        config.to_str().unwrap(),
        "--name",
        "from-flag",
    ])
    .arg("--data-dir")
    .arg(base.path().join("d"))
    .env("OVERLAY_LISTEN", "127.0.0.1:7602");
    let out = run_with_timeout(cmd, Duration::from_secs(20));
    assert!(out.status.success(), "{}", out.stderr);
    let printed: toml::Table = out.stdout.parse().expect("config print writes TOML");
    assert_eq!(printed["name"].as_str(), Some("from-flag"));
    assert_eq!(printed["listen"].as_str(), Some("127.0.0.1:7602"));
    assert_eq!(printed["log_format"].as_str(), Some("json"));
    assert_eq!(printed["join"].as_array().map(Vec::len), Some(1));
    // An unknown key is an error naming the file, not silently ignored.
    std::fs::write(&config, "listne = \"127.0.0.1:1\"\n").expect("config file");
    let mut cmd = node_cmd();
    cmd.args(["config", "print", "--config", config.to_str().unwrap()]);
    let out = run_with_timeout(cmd, Duration::from_secs(20));
    assert!(
        !out.status.success() && out.stderr.contains("node.toml"),
        "{}",
        out.stderr
    );
}

#[test]
fn data_dir_files_and_admin_socket_are_private_under_umask_000() {
    let _net = real_network();
    let base = TempDir::new("umask");
    let a = Daemon::start_with(base.path(), "a", &["--listen", "127.0.0.1:0"], |c| {
        let program = c.get_program().to_owned();
        let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
        *c = Command::new("sh");
        c.arg("-c")
            .arg("umask 000 && exec \"$0\" \"$@\"")
            .arg(program)
            .args(args)
            .env_remove("OVERLAY_TOKEN")
            .env("RUST_LOG", "info");
    });
    // Files are written once the node has joined; peers.json needs a member, not checked.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: PathBuf| std::fs::metadata(&p).map(|m| m.permissions().mode() & 0o777);
    assert_eq!(mode(a.dir.clone()).unwrap(), 0o700);
    for f in ["node.key", "token", "node.json", "lock", "admin.sock"] {
        assert_eq!(mode(a.dir.join(f)).unwrap(), 0o600, "{f}");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_data_dir_defaults_to_the_state_dir_and_follows_overlay_data_dir() {
    let _net = real_network();
    let base = TempDir::new("defdir");
    let home = base.path().join("home");
    let with_home = |cmd: &mut Command| {
        cmd.env("HOME", &home)
            .env_remove("XDG_STATE_HOME")
            .env_remove("OVERLAY_DATA_DIR");
    };
    let mut cmd = node_cmd();
    cmd.args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    with_home(&mut cmd);
    let _node = Proc::new("default-dir", cmd.spawn().expect("spawn"));
    let expected = home.join(".local/state/overlay-node");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut status = node_cmd();
        status.arg("status");
        with_home(&mut status);
        if run_with_timeout(status, Duration::from_secs(20))
            .status
            .success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no node answered in the default data dir"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        expected.join("node.key").exists(),
        "no key in {}",
        expected.display()
    );
    // OVERLAY_DATA_DIR points every command at a directory.
    let mut status = node_cmd();
    status
        .arg("status")
        .env("OVERLAY_DATA_DIR", &expected)
        .env_remove("HOME");
    let out = run_with_timeout(status, Duration::from_secs(20));
    assert!(out.status.success(), "{}", out.stderr);
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

#[test]
fn nodes_join_over_ipv6_and_any_address_advertises_the_routed_one() {
    if std::net::UdpSocket::bind("[::1]:0").is_err() {
        println!("skipped: this machine has no IPv6 loopback");
        return;
    }
    let _net = real_network();
    let base = TempDir::new("ipv6");
    let a = Daemon::start(base.path(), "a", &["--listen", "[::1]:0"]);
    let a_addr = a.members_json()[0]["addr"]
        .as_str()
        .expect("addr")
        .to_string();
    assert!(a_addr.starts_with("[::1]:"), "{a_addr}");
    let token = a.token();
    let b = Daemon::start_with(
        base.path(),
        "b",
        &["--listen", "[::]:0", "--join", &a_addr, "--name", "b"],
        |c| {
            c.env("OVERLAY_TOKEN", &token);
        },
    );
    a.wait_alive(2);
    let seen = a.members_json();
    let b_seen = seen
        .as_array()
        .expect("array")
        .iter()
        .find(|m| m["name"] == "b")
        .expect("a knows b")
        .clone();
    let addr = b_seen["addr"].as_str().expect("addr");
    assert!(
        addr.starts_with("[::1]:"),
        "b advertised {addr}, not the routed [::1]"
    );
    let _ = b;
}
