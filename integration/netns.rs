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

use overlay::testbed::{Plan, check_group, rtt_report};
use overlay::topology::Topology;
use std::time::{Duration, Instant};

mod checks;
mod faults;
mod scripts;

use checks::{broadcast_verdict, clusters_verdict, partition_and_heal};
use scripts::{
    Testbed, data_dir, down_stale_testbeds, dump_logs, node_cmd, our_namespaces, pid_running,
    recorded_pids, repo, root_links, run_script, state_dir, wait_until,
};

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
/// The wide-area link given packet loss (5 %, then 20 %).
const LOSSY: (&str, &str) = ("VU", "Leiden");
/// RTT margin: |measured - 2 x one-way| <= max(MARGIN_MS, MARGIN_REL x expected).
const MARGIN_MS: f64 = 1.0;
const MARGIN_REL: f64 = 0.2;

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
    let by_name: std::collections::BTreeMap<String, String> =
        ss.iter().map(|s| (s.name.clone(), s.id.to_hex())).collect();

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
        Ok(r) => eprintln!(
            "broadcast {}: delivered to all {} nodes in {} ms",
            r.op,
            ids.len(),
            r.ms
        ),
        Err(e) => failures.push(format!("broadcast: {e}")),
    }

    // Partitions: a cluster cut off from every other one, healed as soon as both sides have
    // settled, then another one held well past every timeout of the old connections.
    for (cluster, hold) in [(CUT, Duration::ZERO), (LONG_CUT, LONG_HOLD)] {
        failures.extend(partition_and_heal(&plan, &all, &by_name, cluster, hold));
    }

    // Faults: loss on one wide-area link, a parent stopped and continued, 30 % killed (last:
    // those nodes stay dead).
    for pct in ["5", "20"] {
        failures.extend(faults::loss(&all, &ids, LOSSY.0, LOSSY.1, pct));
    }
    failures.extend(faults::stop_parent(&plan, &all));
    failures.extend(faults::kill_many(&plan, &all));

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
