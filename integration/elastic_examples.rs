//! The two elastic applications in examples/ run as a user runs them, with their churn:
//! the work farm (workers leave and join between rounds, one leaves holding an item) and
//! the data-parallel loop (a worker leaves mid-step, a new one joins; every survivor ends
//! with the exact result). `cargo test` builds the examples beside the test binary.

use crate::common::run_with_timeout;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The built example `name`, next to this test's binary.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    dir.join("examples").join(name)
}

fn run(name: &str, args: &[&str]) -> String {
    let path = example(name);
    assert!(path.exists(), "{} not built", path.display());
    let mut cmd = Command::new(&path);
    cmd.args(args);
    let out = run_with_timeout(cmd, Duration::from_secs(240));
    assert!(
        out.status.success(),
        "{name} failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

#[test]
fn the_elastic_data_parallel_loop_ends_exact_after_a_leave_and_a_join() {
    let _net = crate::common::real_network();
    let out = run("elastic_train", &[]);
    println!("{out}");
    assert!(out.contains("worker left at step"), "{out}");
    assert!(out.contains("a new worker"), "{out}");
    assert!(
        out.contains("not committed"),
        "a step was lost and run again: {out}"
    );
    assert!(out.contains("3 workers finished every step with the exact result"));
}

#[test]
fn the_elastic_work_farm_counts_every_chunk_once_with_workers_coming_and_going() {
    let _net = crate::common::real_network();
    let out = run("elastic_work", &["--limit", "300000", "--chunks", "12"]);
    println!("{out}");
}
