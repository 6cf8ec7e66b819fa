//! The network-namespace testbed end to end, as an operator drives it: `netns-scripts/up`
//! on das-4 with 3 nodes per cluster (12 namespaces, 4 bridges, a router; WAN latency by
//! netem or, on kernels without it, by the userspace emulator), `run`, then everything is
//! observed through `netns-scripts/exec NODE overlay-node ...`:
//!
//! - the trees converge: every tree spans all 12 nodes and is wide-area optimal;
//! - every RTT the nodes measured between clusters is within +-max(1 ms, 20 %) of twice the
//!   topology's one-way latency (the error is printed);
//! - every node discovers the four clusters from its measured RTTs: the level-1 groups in
//!   `overlay-node status --json` are the topology's clusters (the text status is printed);
//! - a broadcast from one node reaches every node (`overlay-node broadcast --json`);
//! - after `partition Leiden all`, once each side has declared the other dead, the other 9
//!   nodes keep trees spanning the 9 and the 3 Leiden nodes keep trees of their own;
//! - after `heal Leiden all`, every tree spans all 12 nodes again;
//! - the same for Delft with the cut kept 35 s longer, so that no connection from before
//!   the partition survives it;
//! - after `down`, no namespace, link or process of the testbed remains.
//!
//! Root only (namespaces need CAP_SYS_ADMIN): without root it prints why and passes. The
//! testbed is always taken down, also when a step panics. Steps that do not depend on each
//! other (broadcast, partition, heal) are all run and their failures reported together.
//! `cargo test --release --test integration netns -- --nocapture` shows the figures.

use crate::common::{BIN, Output, run_with_timeout};
use overlay::api::NodeStatus;
use overlay::proto::Liveness;
use overlay::testbed::{Plan, check_group, rtt_report};
use overlay::topology::Topology;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Testbed names are `ovt` and the test's pid (every namespace is `ovtPID-...`): distinct
/// from the default `ovn`, so a testbed someone runs by hand is left alone, and from
/// another run of this test on the same machine.
const PREFIX_BASE: &str = "ovt";
const TOPOLOGY: &str = "topologies/das-4.toml";
const NODES_PER_CLUSTER: usize = 3;
/// The cluster cut off from the others and healed as soon as both sides have settled.
const CUT: &str = "Leiden";
/// The cluster cut off for longer: LONG_HOLD after both sides have settled, more than the
/// QUIC idle timeout (30 s) and the longest dial backoff (10 s), so that nothing of the old
/// connections is left when the link comes back.
const LONG_CUT: &str = "Delft";
const LONG_HOLD: Duration = Duration::from_secs(35);
/// RTT margin: |measured - 2 x one-way| <= max(MARGIN_MS, MARGIN_REL x expected).
const MARGIN_MS: f64 = 1.0;
const MARGIN_REL: f64 = 0.2;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn prefix() -> String {
    format!("{PREFIX_BASE}{}", std::process::id())
}

fn state_dir() -> PathBuf {
    PathBuf::from("/run/overlay-netns").join(prefix())
}

/// A testbed script with this test's prefix and binaries.
fn script(name: &str) -> Command {
    script_for(name, &prefix())
}

/// A testbed script for the testbed `prefix`.
fn script_for(name: &str, prefix: &str) -> Command {
    let mut cmd = Command::new(repo().join("netns-scripts").join(name));
    let bin_dir = Path::new(BIN).parent().expect("binary directory");
    cmd.current_dir(repo())
        .env("OVERLAY_NETNS_PREFIX", prefix)
        .env_remove("OVERLAY_NETNS_STATE")
        .env("OVERLAY_BIN_DIR", bin_dir)
        .env_remove("OVERLAY_TOKEN")
        .env("RUST_LOG", "info,quinn=warn,rustls=warn");
    cmd
}

/// Runs a script to completion; panics (with its output) if it fails.
fn run_script(name: &str, args: &[&str], limit: Duration) -> Output {
    let mut cmd = script(name);
    cmd.args(args);
    let out = run_with_timeout(cmd, limit);
    assert!(
        out.status.success(),
        "netns-scripts/{name} {args:?} failed ({}):\n{}{}",
        out.status,
        out.stdout,
        out.stderr
    );
    out
}

/// `exec NODE overlay-node ARGS...`
fn node_cmd(node: &str, args: &[&str], limit: Duration) -> Output {
    let mut cmd = script("exec");
    cmd.arg(node).arg("overlay-node").args(args);
    run_with_timeout(cmd, limit)
}

fn data_dir(node: &str) -> String {
    state_dir().join("data").join(node).display().to_string()
}

/// `overlay-node status --json` of one node, through `exec` in its namespace.
fn status(node: &str) -> Result<NodeStatus, String> {
    let dir = data_dir(node);
    let out = node_cmd(
        node,
        &["status", "--data-dir", &dir, "--json"],
        Duration::from_secs(20),
    );
    if !out.status.success() {
        return Err(format!("status of {node}: {}", out.stderr.trim()));
    }
    serde_json::from_str(&out.stdout).map_err(|e| format!("status of {node}: {e}"))
}

/// The statuses of `nodes`, asked in parallel; the nodes that did not answer are left out.
fn statuses(nodes: &[String]) -> (Vec<NodeStatus>, Vec<String>) {
    let answers: Vec<Result<NodeStatus, String>> = std::thread::scope(|s| {
        let asks: Vec<_> = nodes.iter().map(|n| s.spawn(move || status(n))).collect();
        asks.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("status panicked".into())))
            .collect()
    });
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    for a in answers {
        match a {
            Ok(s) => ok.push(s),
            Err(e) => errors.push(e),
        }
    }
    (ok, errors)
}

/// Polls the statuses of `nodes` until `cond` holds; returns the statuses and how long it
/// took, or the last reason after `limit`.
fn wait_until(
    what: &str,
    nodes: &[String],
    limit: Duration,
    mut cond: impl FnMut(&[NodeStatus]) -> Result<(), String>,
) -> Result<(Vec<NodeStatus>, Duration), String> {
    let start = Instant::now();
    loop {
        let (ss, errors) = statuses(nodes);
        let verdict = if errors.is_empty() {
            cond(&ss)
        } else {
            Err(errors.join("; "))
        };
        match verdict {
            Ok(()) => {
                eprintln!("[{what}: after {} ms]", start.elapsed().as_millis());
                return Ok((ss, start.elapsed()));
            }
            Err(reason) if start.elapsed() >= limit => {
                return Err(format!("{what}: not within {limit:?}; last: {reason}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Names of the links in the root namespace.
fn root_links() -> BTreeSet<String> {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("running ip");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .collect()
}

fn namespaces() -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("running ip");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

fn our_namespaces() -> Vec<String> {
    let mine = format!("{}-", prefix());
    namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&mine))
        .collect()
}

/// Takes down the testbeds left by runs of this test that died without cleaning up (their
/// pid is gone), found by their namespaces and state directories.
fn down_stale_testbeds() {
    let mut names: Vec<String> = namespaces()
        .into_iter()
        .filter_map(|n| n.split_once('-').map(|(p, _)| p.to_string()))
        .collect();
    if let Ok(dir) = std::fs::read_dir("/run/overlay-netns") {
        names.extend(dir.filter_map(|e| e.ok()?.file_name().into_string().ok()));
    }
    names.sort();
    names.dedup();
    for name in names {
        let Some(pid) = name.strip_prefix(PREFIX_BASE) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new(&format!("/proc/{pid}")).exists() {
            let out = run_with_timeout(script_for("down", &name), Duration::from_secs(60));
            eprint!("left by a previous run: {}", out.stdout);
        }
    }
}

fn pid_running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z")
}

/// Every pid the testbed recorded (nodes and emulator).
fn recorded_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(state_dir().join("pids")) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// Prints the end of every log of the testbed (nodes and emulator).
fn dump_logs() {
    let Ok(dir) = std::fs::read_dir(state_dir().join("logs")) else {
        return;
    };
    let mut files: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        eprintln!(
            "---- {} ----\n{}",
            f.display(),
            lines[lines.len().saturating_sub(8)..].join("\n")
        );
    }
}

/// Takes the testbed down when dropped (also on a panic), after printing the ends of the
/// logs if the test is failing.
struct Testbed {
    down: bool,
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if self.down {
            return;
        }
        if std::thread::panicking() {
            dump_logs();
        }
        let _ = script("down").status();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn das4_testbed_in_namespaces() {
    let _alone = crate::common::real_network();
    if !is_root() {
        eprintln!(
            "SKIPPED netns testbed test: it needs root (creating network namespaces, veths and \
             qdiscs needs CAP_SYS_ADMIN and CAP_NET_ADMIN); run `cargo test --release --test \
             integration netns` as root"
        );
        return;
    }
    let t0 = Instant::now();
    let topology = Topology::load(repo().join(TOPOLOGY)).expect("das-4 topology");
    let plan = Plan::new(topology, Some(NODES_PER_CLUSTER)).expect("plan");
    let all: Vec<String> = plan.nodes.iter().map(|n| n.name.clone()).collect();
    assert_eq!(all.len(), 12);

    // Testbeds left by crashed runs of this test go first.
    down_stale_testbeds();
    let links_before = root_links();

    let mut bed = Testbed { down: false };
    let npc = NODES_PER_CLUSTER.to_string();
    let up = run_script(
        "up",
        &[TOPOLOGY, "--nodes-per-cluster", &npc],
        Duration::from_secs(120),
    );
    eprint!("{}", up.stdout);
    assert_eq!(our_namespaces().len(), 12 + 2, "12 nodes, router, switch");
    let t_run = Instant::now();
    let run = run_script("run", &[], Duration::from_secs(60));
    eprint!("{}", run.stdout);

    // Convergence: every tree spans all 12 and is wide-area optimal, every RTT measured.
    let (ss, _) = wait_until(
        "12 wide-area optimal trees, all RTTs measured",
        &all,
        Duration::from_secs(90),
        |ss| {
            let c = check_group(&plan, ss, None);
            let r = rtt_report(&plan, ss, MARGIN_MS, MARGIN_REL);
            if c.optimal() && r.unmeasured == 0 {
                Ok(())
            } else {
                Err(format!("{c:?}; {} RTTs unmeasured", r.unmeasured))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let converged = t_run.elapsed();
    eprintln!("converged {} ms after run started", converged.as_millis());
    let ids: Vec<String> = ss.iter().map(|s| s.id.to_hex()).collect();

    // RTTs against the topology. An estimate is the minimum of its samples, and the first
    // samples are taken while 12 processes start at once on the machine's cores: a pair
    // measured only then can be a few ms high until its next samples come in, so the
    // estimates get a bounded while to settle.
    let (ss, _) = wait_until(
        "every RTT estimate within the margin",
        &all,
        Duration::from_secs(30),
        |ss| {
            let r = rtt_report(&plan, ss, MARGIN_MS, MARGIN_REL);
            if r.outside_margin.is_empty() && r.unmeasured == 0 {
                Ok(())
            } else {
                Err(format!(
                    "RTTs outside +-max({MARGIN_MS} ms, {MARGIN_REL}): {}",
                    r.outside_margin.join(", ")
                ))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let r = rtt_report(&plan, &ss, MARGIN_MS, MARGIN_REL);
    eprintln!(
        "RTT vs 2 x one-way latency: {} inter-cluster pairs, mean |error| {:.3} ms ({:+.1} % on \
         average), max {:.3} ms ({:.1} %); intra-cluster max {:.3} ms over {} pairs",
        r.inter_pairs,
        r.inter_mean_abs_ms,
        r.inter_mean_rel * 100.0,
        r.inter_max_abs_ms,
        r.inter_max_rel * 100.0,
        r.intra_max_ms,
        r.intra_pairs
    );
    assert_eq!(
        r.inter_pairs,
        12 * 9,
        "every node measures every other cluster's nodes"
    );
    assert!(
        r.outside_margin.is_empty(),
        "RTTs outside +-max({MARGIN_MS} ms, {MARGIN_REL}):\n{}",
        r.outside_margin.join("\n")
    );

    // The trees as `overlay-node tree` draws them: one root per cluster, every node in.
    for root in ["VU-1", "Leiden-2", "UvA-3", "Delft-1"] {
        let out = node_cmd(
            "VU-2",
            &["tree", root, "--data-dir", &data_dir("VU-2")],
            Duration::from_secs(20),
        );
        assert!(out.status.success(), "tree {root}: {}", out.stderr);
        for n in &all {
            assert!(
                out.stdout.contains(&format!("{n} (")),
                "{n} missing from:\n{}",
                out.stdout
            );
        }
        assert!(
            !out.stdout.contains("not in the tree"),
            "tree of {root} does not span:\n{}",
            out.stdout
        );
    }
    let tree = node_cmd(
        "VU-2",
        &["tree", "Delft-1", "--data-dir", &data_dir("VU-2")],
        Duration::from_secs(20),
    );
    eprintln!("{}", tree.stdout);

    let mut failures: Vec<String> = Vec::new();

    // Clusters discovered from the measured RTTs: every node's level 1 is the topology's.
    match wait_until(
        "every node's level-1 clusters are das-4's",
        &all,
        Duration::from_secs(30),
        |ss| clusters_verdict(&plan, ss),
    ) {
        Ok(_) => {
            let out = node_cmd(
                "VU-2",
                &["status", "--data-dir", &data_dir("VU-2")],
                Duration::from_secs(20),
            );
            let section: String = out
                .stdout
                .lines()
                .skip_while(|l| !l.starts_with("clusters"))
                .take_while(|l| !l.starts_with("trees"))
                .map(|l| format!("{l}\n"))
                .collect();
            eprint!("{section}");
            if !section.contains("level 1: 4 clusters") {
                failures.push(format!("status shows no 4 clusters:\n{}", out.stdout));
            }
        }
        Err(e) => failures.push(format!("clusters: {e}")),
    }

    // Broadcast from one node: every node delivers it.
    let out = node_cmd(
        "UvA-2",
        &[
            "broadcast",
            "--data-dir",
            &data_dir("UvA-2"),
            "--text",
            "hello from the netns test",
            "--json",
        ],
        Duration::from_secs(30),
    );
    match broadcast_verdict(&out, &ids) {
        Ok(line) => eprintln!("{line}"),
        Err(e) => failures.push(format!("broadcast: {e}")),
    }

    // Partitions: a cluster cut off from every other one, healed as soon as both sides have
    // settled, then another one held well past every timeout of the old connections.
    for (cluster, hold) in [(CUT, Duration::ZERO), (LONG_CUT, LONG_HOLD)] {
        failures.extend(partition_and_heal(&plan, &all, cluster, hold));
    }

    // Down: nothing of the testbed remains.
    let pids = recorded_pids();
    let mode = std::fs::read_to_string(state_dir().join("mode")).unwrap_or_default();
    let emulator = usize::from(mode.trim() == "emulator");
    assert_eq!(
        pids.len(),
        12 + emulator,
        "a pid file per node and the emulator"
    );
    if !failures.is_empty() {
        dump_logs();
    }
    let t_down = Instant::now();
    let out = run_script("down", &[], Duration::from_secs(60));
    bed.down = true;
    eprint!("{}", out.stdout);
    let left_ns = our_namespaces();
    assert!(
        left_ns.is_empty(),
        "namespaces left after down: {left_ns:?}"
    );
    let alive: Vec<u32> = pids.into_iter().filter(|&p| pid_running(p)).collect();
    assert!(alive.is_empty(), "processes left after down: {alive:?}");
    let new_links: Vec<String> = root_links().difference(&links_before).cloned().collect();
    assert!(
        new_links.is_empty(),
        "links left in the root namespace after down: {new_links:?}"
    );
    assert!(!state_dir().exists(), "state directory left after down");
    eprintln!(
        "down: nothing left after {} ms",
        t_down.elapsed().as_millis()
    );

    eprintln!("netns test took {:.1} s", t0.elapsed().as_secs_f64());
    assert!(
        failures.is_empty(),
        "failed steps:\n{}",
        failures.join("\n")
    );
}

/// `Ok` if every status's level-1 groups, by member name, are the plan's clusters.
fn clusters_verdict(plan: &Plan, ss: &[NodeStatus]) -> Result<(), String> {
    let mut want: Vec<BTreeSet<String>> = (0..plan.topology.clusters.len())
        .map(|c| {
            plan.nodes
                .iter()
                .filter(|n| n.cluster == c)
                .map(|n| n.name.clone())
                .collect()
        })
        .collect();
    want.sort();
    for s in ss {
        let mut got: Vec<BTreeSet<String>> = s
            .clusters
            .first()
            .map(|l| {
                l.groups
                    .iter()
                    .map(|g| g.names.iter().cloned().collect())
                    .collect()
            })
            .unwrap_or_default();
        got.sort();
        if got != want {
            return Err(format!("{} sees {got:?}", s.name));
        }
    }
    Ok(())
}

/// Checks `overlay-node broadcast --json` output: `{"op", "delivered": [ids], "missing":
/// [ids], "elapsed_ms"}`; every node id delivered, none missing.
fn broadcast_verdict(out: &Output, ids: &[String]) -> Result<String, String> {
    if !out.status.success() {
        return Err(format!("exited with {}: {}", out.status, out.stderr.trim()));
    }
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .map_err(|e| format!("not JSON ({e}): {}", out.stdout))?;
    let list = |key: &str| -> Result<Vec<String>, String> {
        v.get(key)
            .and_then(|x| x.as_array())
            .ok_or_else(|| format!("no {key:?} list in {v}"))?
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{key}: not a string"))
            })
            .collect()
    };
    let delivered = list("delivered")?;
    let missing = list("missing")?;
    let not_delivered: Vec<&String> = ids.iter().filter(|id| !delivered.contains(id)).collect();
    if !not_delivered.is_empty() || !missing.is_empty() {
        return Err(format!(
            "not delivered to {not_delivered:?}, reported missing {missing:?}"
        ));
    }
    let op = v.get("op").and_then(|x| x.as_str()).ok_or("no \"op\"")?;
    let ms = v
        .get("elapsed_ms")
        .and_then(|x| x.as_f64())
        .ok_or("no \"elapsed_ms\"")?;
    Ok(format!(
        "broadcast {op}: delivered to all {} nodes in {ms} ms",
        ids.len()
    ))
}

/// Cuts `cluster` off from every other cluster; checks that, once each side has declared
/// the other dead, each side's trees span that side; keeps the cut for `hold` more; heals;
/// checks that every tree spans all nodes again. Returns what failed.
fn partition_and_heal(plan: &Plan, all: &[String], cluster: &str, hold: Duration) -> Vec<String> {
    let mut failures = Vec::new();
    let inside: Vec<String> = plan
        .nodes
        .iter()
        .filter(|n| plan.topology.clusters[n.cluster].name == cluster)
        .map(|n| n.name.clone())
        .collect();
    let outside: Vec<String> = all
        .iter()
        .filter(|n| !inside.contains(n))
        .cloned()
        .collect();
    let out = run_script("partition", &[cluster, "all"], Duration::from_secs(30));
    eprint!("{}", out.stdout);
    let t_cut = Instant::now();
    let settled = wait_until(
        &format!(
            "partition of {cluster}: each side declares the other dead; the {} span their own \
             trees, the {} theirs",
            outside.len(),
            inside.len()
        ),
        all,
        Duration::from_secs(60),
        |ss| {
            for (group, other) in [(&outside, &inside), (&inside, &outside)] {
                let c = check_group(plan, ss, Some(group));
                if !c.spanning() {
                    return Err(format!("group of {}: {c:?}", group[0]));
                }
                // Settled: failure detection has run its course on both sides.
                for s in ss.iter().filter(|s| group.contains(&s.name)) {
                    if let Some(m) = s
                        .members
                        .iter()
                        .find(|m| other.contains(&m.name) && m.state != Liveness::Dead)
                    {
                        return Err(format!("{} lists {} as {:?}", s.name, m.name, m.state));
                    }
                }
            }
            Ok(())
        },
    );
    match settled {
        Ok(_) => eprintln!(
            "partition of {cluster}: both sides settled with trees of their own {} ms after the cut",
            t_cut.elapsed().as_millis()
        ),
        Err(e) => failures.push(e),
    }
    if !hold.is_zero() {
        eprintln!("keeping {cluster} cut off for {} s more", hold.as_secs());
        std::thread::sleep(hold);
    }
    let out = run_script("heal", &[cluster, "all"], Duration::from_secs(30));
    eprint!("{}", out.stdout);
    let healed = wait_until(
        &format!(
            "heal of {cluster} after a {} s partition: every tree spans all {} nodes again",
            t_cut.elapsed().as_secs(),
            all.len()
        ),
        all,
        Duration::from_secs(60),
        |ss| {
            let c = check_group(plan, ss, None);
            if c.spanning() {
                Ok(())
            } else {
                Err(format!("{c:?}"))
            }
        },
    );
    match healed {
        Ok((_, took)) => eprintln!(
            "heal of {cluster}: all {} trees span again {} ms after the heal",
            all.len(),
            took.as_millis()
        ),
        Err(e) => failures.push(e),
    }
    failures
}
