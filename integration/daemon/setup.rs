//! Setting a daemon up: its data directory (lock, modes, default, stored settings), its
//! address (advertised, IPv6), its config, and joins that fail fast.

use super::{Daemon, free_port};
use crate::common::{Output, Proc, TempDir, node_cmd, real_network, run_with_timeout};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// `overlay-node config print ARGS`, within 20 s.
fn config_print(args: &[&str]) -> Output {
    let mut cmd = node_cmd();
    cmd.args(["config", "print"]).args(args);
    run_with_timeout(cmd, Duration::from_secs(20))
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
    assert_eq!(
        printed["threads"].as_integer(),
        Some(1),
        "one thread by default"
    );
    // A node needs a thread: zero from a flag or from the file is refused, clearly.
    let out = config_print(&["--threads", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--threads"), "{}", out.stderr);
    std::fs::write(&config, "threads = 0\n").expect("config file");
    let out = config_print(&["--config", config.to_str().unwrap()]);
    assert!(
        !out.status.success() && out.stderr.contains("at least one thread"),
        "{}",
        out.stderr
    );
    // An unknown key is an error naming the file, not silently ignored.
    std::fs::write(&config, "listne = \"127.0.0.1:1\"\n").expect("config file");
    let out = config_print(&["--config", config.to_str().unwrap()]);
    assert!(
        !out.status.success() && out.stderr.contains("node.toml"),
        "{}",
        out.stderr
    );
}

#[test]
fn commands_find_the_node_through_the_config_files_data_dir() {
    let _net = real_network();
    let base = TempDir::new("config-dir");
    let a = Daemon::start(base.path(), "a", &["--listen", "127.0.0.1:0"]);
    let config = base.path().join("node.toml");
    let dir = a.dir.to_str().expect("utf-8 path");
    std::fs::write(&config, format!("data_dir = {dir:?}\n")).expect("config file");
    for command in [&["status", "--json"][..], &["members"], &["health"]] {
        let mut cmd = node_cmd();
        cmd.args(command)
            .arg("--config")
            .arg(&config)
            .env_remove("OVERLAY_DATA_DIR")
            .env("HOME", base.path().join("no-home"))
            .env_remove("XDG_STATE_HOME");
        let out = run_with_timeout(cmd, Duration::from_secs(20));
        assert!(
            out.status.success(),
            "{command:?} --config did not reach the node: {}",
            out.stderr
        );
    }
    // The flag still wins over the file.
    let mut cmd = node_cmd();
    cmd.args(["status", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(base.path().join("nobody"));
    let out = run_with_timeout(cmd, Duration::from_secs(20));
    assert!(
        !out.status.success(),
        "--data-dir did not win over --config"
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
