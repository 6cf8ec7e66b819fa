//! The `overlay-node` command line refuses bad input with a non-zero exit and a message
//! that says what is wrong: joining without a token, malformed tokens and addresses,
//! unknown flags, a missing data directory, and asking a node that does not run.

use crate::common::{Output, TempDir, node_cmd, run_with_timeout};
use std::time::Duration;

/// Runs `overlay-node ARGS` (OVERLAY_TOKEN, HOME and the data-directory variables unset)
/// and expects a failure whose stderr
/// contains every one of `needles`.
fn fails(args: &[&str], needles: &[&str]) -> Output {
    let mut cmd = node_cmd();
    // No default data directory either: a command that needs one must say so.
    cmd.args(args)
        .env_remove("HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("OVERLAY_DATA_DIR");
    let out = run_with_timeout(cmd, Duration::from_secs(20));
    assert!(
        !out.status.success(),
        "overlay-node {args:?} succeeded; stdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "overlay-node {args:?}: stderr does not mention {needle:?}:\n{}",
            out.stderr
        );
    }
    eprintln!(
        "overlay-node {args:?} -> {} : {}",
        out.status,
        out.stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
    );
    out
}

#[test]
fn joining_without_a_token_fails_clearly() {
    let dir = TempDir::new("cli");
    let data = dir.path().join("fresh");
    let data = data.to_str().expect("utf-8 path");
    let out = fails(
        &[
            "--listen",
            "127.0.0.1:0",
            "--join",
            "127.0.0.1:9",
            "--data-dir",
            data,
        ],
        &["token", "--token", "OVERLAY_TOKEN"],
    );
    assert!(out.stderr.contains("error"), "{}", out.stderr);
    // Nothing was admitted, so no token must have been stored for the next run.
    assert!(
        !std::path::Path::new(data).join("token").exists(),
        "a token file was written although none was given"
    );
}

#[test]
fn malformed_tokens_are_refused_before_anything_starts() {
    let dir = TempDir::new("cli");
    let data = dir.path().join("d");
    let data = data.to_str().expect("utf-8 path");
    let base = [
        "--listen",
        "127.0.0.1:0",
        "--join",
        "127.0.0.1:9",
        "--data-dir",
        data,
    ];
    let mut args = base.to_vec();
    args.extend(["--token", "abc"]);
    fails(&args, &["--token", "ovl1-"]);
    let short = format!("ovl1-{}", "ab".repeat(10));
    let mut args = base.to_vec();
    args.extend(["--token", &short]);
    fails(&args, &["--token", "64 hex digits"]);
    let nonhex = format!("ovl1-{}", "zz".repeat(32));
    let mut args = base.to_vec();
    args.extend(["--token", &nonhex]);
    fails(&args, &["--token", "64 hex digits"]);
    // The same through the environment.
    let mut cmd = node_cmd();
    cmd.args(base).env("OVERLAY_TOKEN", "abc");
    let out = run_with_timeout(cmd, Duration::from_secs(20));
    assert!(!out.status.success(), "OVERLAY_TOKEN=abc was accepted");
    assert!(out.stderr.contains("ovl1-"), "{}", out.stderr);
}

#[test]
fn bad_arguments_exit_non_zero_with_a_message() {
    let dir = TempDir::new("cli");
    let data = dir.path().to_str().expect("utf-8 path");
    fails(
        &["--listen", "notanaddr", "--data-dir", data],
        &["invalid value", "notanaddr", "--listen"],
    );
    fails(
        &["--listen", "127.0.0.1:0", "--data-dir", data, "--bogus"],
        &["unexpected argument", "--bogus"],
    );
    fails(&["--listen", "127.0.0.1:0"], &["--data-dir"]);
    fails(
        &[
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data,
            "--join",
            "no-port",
        ],
        &["--join", "no-port"],
    );
    fails(&["tree"], &["ROOT"]);
    fails(&["status", "--data-dir", data], &["no running node"]);
}

#[test]
fn collective_commands_refuse_bad_input() {
    let dir = TempDir::new("cli-collectives");
    let d = dir.path().to_str().expect("utf-8 path");
    let big = dir.path().join("big.bin");
    // Sparse: one byte over the largest single broadcast without writing it. It goes in
    // pieces, so the first piece is what finds no node.
    std::fs::File::create(&big)
        .and_then(|f| f.set_len((1 << 30) + 1))
        .expect("write");
    let big = big.to_str().expect("utf-8 path");
    fails(
        &["broadcast", "--data-dir", d, "--file", big],
        &["piece 1 of 65", "no running node answers"],
    );
    fails(
        &[
            "broadcast",
            "--data-dir",
            d,
            "--file",
            big,
            "--piece-size",
            "10",
        ],
        &["--piece-size", "1024"],
    );
    fails(
        &["broadcast", "--data-dir", d, "--file", "/nonexistent/file"],
        &["cannot read /nonexistent/file"],
    );
    fails(&["broadcast", "--data-dir", d], &["--file", "--text"]);
    fails(
        &["broadcast", "--data-dir", d, "--text", "hi"],
        &["no running node answers"],
    );
    fails(
        &["gather", "everything", "--data-dir", d],
        &["no running node answers"],
    );
    fails(
        &["publish", "load", "not json", "--data-dir", d],
        &["not JSON"],
    );
    fails(
        &["reduce", "load", "--op", "median", "--data-dir", d],
        &["invalid value", "median"],
    );
    fails(&["reduce", "count"], &["--data-dir"]);
}
