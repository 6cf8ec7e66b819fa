//! Twelve real `overlay-node` processes on 127.0.0.1: they form one overlay, every tree
//! spans every node; two are killed with SIGKILL and the survivors declare them dead and
//! repair their trees; one comes back with its data directory and the same arguments and
//! rejoins with its old id, the other with nothing but its data directory.
//!
//! Everything is observed from outside, as an operator would: `overlay-node status --json`
//! and `overlay-node tree` against each node's admin socket. The figures (convergence,
//! failure detection and rejoin times, RSS and idle CPU per process) are printed; run with
//! `cargo test --release --test integration process_overlay -- --nocapture` to see them.

use crate::common::{Proc, TempDir, free_udp_ports, node_cmd, run_with_timeout};
use overlay::proto::{Liveness, NodeId};
use overlay::sim::NetModel;
use overlay::topology::Topology;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod fixture;
mod observe;

use fixture::{Fixture, NodeProc, TICKS_PER_SEC, proc_usage, signal};
use observe::{check_overlay, collectives_from_the_cli, status, tree};

const N: usize = 12;
/// Nodes killed with SIGKILL (never the seed); the first one is restarted.
const KILLED: [usize; 2] = [3, 8];
/// This node reads its token from OVERLAY_TOKEN instead of --token.
const ENV_TOKEN_NODE: usize = 3;

/// One cluster of twelve nodes: everything on loopback is one LAN.
const TOPOLOGY: &str = r#"
name = "loopback-12"
source = "twelve processes on 127.0.0.1"
[[cluster]]
name = "lo"
nodes = 12
latency_ms = 0.05
"#;

#[test]
fn twelve_processes_converge_survive_two_crashes_and_a_rejoin() {
    let _alone = crate::common::real_network();
    let topology = Topology::parse(TOPOLOGY, "loopback-12").expect("topology");
    assert_eq!(topology.node_clusters().len(), N);
    let net = NetModel::from_topology(&topology);

    let base = TempDir::new("proc");
    let ports = free_udp_ports(N);
    let nodes = (0..N)
        .map(|i| {
            let dir = base.path().join(format!("n{i}"));
            std::fs::create_dir_all(&dir).expect("data dir");
            NodeProc {
                name: format!("n{i}"),
                port: ports[i],
                log: base.path().join(format!("n{i}.log")),
                dir,
                proc: None,
            }
        })
        .collect();
    let mut fx = Fixture {
        nodes,
        seed_port: ports[0],
        token: String::new(),
        _base: base,
    };

    // The seed: starts the overlay and prints the join command with the token.
    let t0 = Instant::now();
    let mut cmd = node_cmd();
    cmd.arg("--listen")
        .arg(format!("127.0.0.1:{}", fx.seed_port))
        .arg("--data-dir")
        .arg(&fx.nodes[0].dir)
        .arg("--name")
        .arg("n0");
    let log = std::fs::File::create(&fx.nodes[0].log).expect("log file");
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
    let mut child = cmd.spawn().expect("spawning the seed");
    let stdout = child.stdout.take().expect("piped stdout");
    fx.nodes[0].proc = Some(Proc::new("n0", child));
    let (line_tx, line_rx) = mpsc::channel::<String>();
    // Keeps draining the seed's stdout until it exits, so it can never block on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = line_tx.send(line);
        }
    });
    let join_hint = "to join this overlay: OVERLAY_TOKEN=";
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    let token = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match line_rx.recv_timeout(left) {
            Ok(line) => {
                if let Some((_, after)) = line.split_once(join_hint) {
                    let join = format!("--join 127.0.0.1:{} ", fx.seed_port);
                    assert!(line.contains(&join), "{line:?} does not join the seed");
                    assert!(!line.contains("--token"), "{line:?} puts the token in argv");
                    break after
                        .split_whitespace()
                        .next()
                        .expect("a token after OVERLAY_TOKEN=")
                        .to_string();
                }
                seen.push(line);
            }
            Err(_) => {
                fx.dump_logs();
                panic!("the seed printed no join command within 20 s; stdout: {seen:?}");
            }
        }
    };
    assert!(token.starts_with("ovl1-"), "unexpected token {token:?}");
    fx.token = token;
    eprintln!("seed up after {} ms", t0.elapsed().as_millis());

    for i in 1..N {
        fx.spawn_joiner(i);
    }

    // Every node's id, as it reports itself.
    let all: Vec<usize> = (0..N).collect();
    let mut ids: Vec<NodeId> = Vec::new();
    fx.wait_until("every node answers", &all, Duration::from_secs(60), |s| {
        ids = s.iter().map(|s| s.id).collect();
        Ok(())
    });
    for (i, s) in ids.iter().enumerate() {
        assert!(!ids[..i].contains(s), "two nodes with one id");
    }

    let converge = fx.wait_until(
        "12 members alive everywhere, 12 spanning trees",
        &all,
        Duration::from_secs(90),
        |s| check_overlay(s, &ids, &ids, &[], &net),
    );
    let converged_at = t0.elapsed();
    eprintln!(
        "converged: {N} processes, every member alive everywhere and all {N} trees spanning \
         {} ms after the seed was started ({} ms of polling after every node answered)",
        converged_at.as_millis(),
        converge.as_millis()
    );

    // The tree of n0, drawn by n0 from every member's answer.
    let dot = tree(&fx.nodes[0].dir, "n0", "dot");
    assert!(dot.starts_with("digraph"), "not DOT:\n{dot}");
    assert!(
        dot.contains("doublecircle"),
        "the root is not marked:\n{dot}"
    );
    assert_eq!(
        dot.matches(" -> ").count(),
        N - 1,
        "a spanning tree of {N} nodes has {} edges:\n{dot}",
        N - 1
    );
    let text = tree(&fx.nodes[0].dir, "n0", "text");
    assert!(
        text.starts_with("tree of n0 ("),
        "unexpected text tree:\n{text}"
    );
    for n in &fx.nodes {
        assert!(
            text.contains(&format!("{} (", n.name)),
            "{} missing from the tree:\n{text}",
            n.name
        );
    }
    assert!(
        !text.contains("no answer"),
        "a member did not answer:\n{text}"
    );
    eprintln!("tree of n0 as n0 draws it:\n{text}");

    // Idle cost: RSS and CPU over a quiet window (nothing polls the nodes meanwhile).
    let window = Duration::from_secs(5);
    let before: Vec<(u64, u64)> = fx
        .nodes
        .iter()
        .map(|n| proc_usage(n.proc.as_ref().expect("running").pid()))
        .collect();
    let w0 = Instant::now();
    std::thread::sleep(window);
    let secs = w0.elapsed().as_secs_f64();
    let mut rss_total = 0;
    let mut cpu_total = 0.0;
    for (i, n) in fx.nodes.iter().enumerate() {
        let (rss, ticks) = proc_usage(n.proc.as_ref().expect("running").pid());
        assert!(rss > 0, "no VmRSS for {}", n.name);
        let cpu = (ticks - before[i].1) as f64 / TICKS_PER_SEC / secs * 100.0;
        rss_total += rss;
        cpu_total += cpu;
        eprintln!(
            "  {:<4} RSS {:>6} kB   idle CPU {:>5.2} % of one core",
            n.name, rss, cpu
        );
    }
    eprintln!(
        "idle over {secs:.1} s: mean RSS {} kB, mean CPU {:.2} % of one core per node",
        rss_total / N as u64,
        cpu_total / N as f64
    );
    fx.check_alive();

    // Collectives from the CLI, through three different nodes.
    collectives_from_the_cli(&fx, &ids);

    // Two non-seed nodes crash in the middle of a reduce: they are frozen first (alive to
    // the others, but silent), the reduce starts, then they are killed. The reduce must
    // come back, counting the ten others and naming the two as missing.
    let killed_ids: Vec<NodeId> = KILLED.iter().map(|&i| ids[i]).collect();
    for &i in &KILLED {
        signal(fx.nodes[i].proc.as_ref().expect("running").pid(), "-STOP");
    }
    let mut cmd = node_cmd();
    cmd.args(["reduce", "count", "--json", "--data-dir"])
        .arg(&fx.nodes[0].dir);
    let t_reduce = Instant::now();
    let reduce = std::thread::spawn(move || run_with_timeout(cmd, Duration::from_secs(60)));
    std::thread::sleep(Duration::from_millis(500));
    for &i in &KILLED {
        fx.nodes[i].proc.take().expect("running").kill();
    }
    let out = reduce.join().expect("reduce thread");
    assert!(out.status.success(), "reduce count failed: {}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("reduce --json");
    assert_eq!(v["count"], serde_json::json!(N - KILLED.len()), "{v}");
    let mut missing: Vec<String> = serde_json::from_value(v["missing"].clone()).expect("ids");
    missing.sort();
    let mut want: Vec<String> = killed_ids.iter().map(|i| i.to_hex()).collect();
    want.sort();
    assert_eq!(
        missing, want,
        "the reduce must name exactly the two killed nodes"
    );
    eprintln!(
        "reduce count with 2 nodes killed mid-operation: count {} with both named missing, \
         {:.1} s after it started",
        v["count"],
        t_reduce.elapsed().as_secs_f64()
    );
    let survivors = fx.running();
    let survivor_ids: Vec<NodeId> = survivors.iter().map(|&i| ids[i]).collect();
    let detected = fx.wait_until(
        "survivors declare the two crashed nodes dead and repair their trees",
        &survivors,
        Duration::from_secs(60),
        |s| check_overlay(s, &ids, &survivor_ids, &killed_ids, &net),
    );
    eprintln!(
        "crash of {} and {}: all {} survivors list both as dead and their {} trees span \
         the survivors {} ms after the SIGKILL",
        fx.nodes[KILLED[0]].name,
        fx.nodes[KILLED[1]].name,
        survivors.len(),
        survivors.len(),
        detected.as_millis()
    );

    // The first crashed node comes back with its data directory: same id.
    let back = KILLED[0];
    let t_restart = Instant::now();
    fx.spawn_joiner(back);
    let running = fx.running();
    let alive_ids: Vec<NodeId> = running.iter().map(|&i| ids[i]).collect();
    let back_id = ids[back];
    let listed = fx.wait_until(
        "every running node lists the restarted node alive",
        &running,
        Duration::from_secs(60),
        |s| {
            for st in s {
                if st.name == format!("n{back}") && st.id != back_id {
                    panic!("the restarted node changed its id");
                }
                match st.members.iter().find(|m| m.id == back_id) {
                    Some(m) if m.state == Liveness::Alive => {}
                    other => {
                        return Err(format!(
                            "{} sees n{back} as {:?}",
                            st.name,
                            other.map(|m| m.state)
                        ));
                    }
                }
            }
            Ok(())
        },
    );
    let restarted = status(&fx.nodes[back].dir).expect("status of the restarted node");
    assert_eq!(restarted.id, back_id, "the restarted node changed its id");
    eprintln!(
        "restart of n{back}: same id {}, listed alive by all {} running nodes {} ms after \
         it was started",
        back_id.short(),
        running.len(),
        listed.as_millis()
    );
    let still_dead = [ids[KILLED[1]]];
    fx.wait_until(
        "11 spanning trees after the rejoin",
        &running,
        Duration::from_secs(60),
        |s| check_overlay(s, &ids, &alive_ids, &still_dead, &net),
    );
    eprintln!(
        "after the rejoin: {} trees span all {} running nodes {} ms after the restart",
        running.len(),
        running.len(),
        t_restart.elapsed().as_millis()
    );

    // The other crashed node restarts with nothing but its data directory: it finds the
    // overlay again through the members it remembered, with its stored token.
    let last = KILLED[1];
    let t_restart = Instant::now();
    fx.spawn(last, false);
    let running = fx.running();
    assert_eq!(running.len(), N);
    fx.wait_until(
        "all 12 alive everywhere and 12 spanning trees after a restart without --join",
        &running,
        Duration::from_secs(60),
        |s| {
            if let Some(st) = s.iter().find(|st| st.name == format!("n{last}")) {
                assert_eq!(st.id, ids[last], "the restarted node changed its id");
            }
            check_overlay(s, &ids, &ids, &[], &net)
        },
    );
    eprintln!(
        "restart of n{last} without --join or token: back in the overlay with its id, all {N} trees spanning {} ms after it was started",
        t_restart.elapsed().as_millis()
    );
    fx.check_alive();

    // SIGTERM: the node leaves gracefully (exit code 0) and every other member records
    // that it left, not that it died.
    let leaver = 5;
    let leaver_id = ids[leaver];
    let pid = fx.nodes[leaver].proc.as_ref().expect("running").pid();
    let t_term = Instant::now();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("running kill");
    assert!(sent.success(), "kill -TERM failed");
    let exit = loop {
        if let Some(status) = fx.nodes[leaver].proc.as_mut().expect("running").exited() {
            break status;
        }
        assert!(
            t_term.elapsed() < Duration::from_secs(20),
            "n{leaver} did not exit within 20 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "n{leaver} exited with {exit} after SIGTERM");
    fx.nodes[leaver].proc = None;
    let running = fx.running();
    let took = fx.wait_until(
        "every member records the SIGTERM'd node as left",
        &running,
        Duration::from_secs(30),
        |s| {
            for st in s {
                match st.members.iter().find(|m| m.id == leaver_id) {
                    Some(m) if m.state == Liveness::Left => {}
                    other => {
                        return Err(format!(
                            "{} sees n{leaver} as {:?}",
                            st.name,
                            other.map(|m| m.state)
                        ));
                    }
                }
                if st.trees.iter().any(|t| t.root == leaver_id) {
                    return Err(format!("{} still has the tree of n{leaver}", st.name));
                }
            }
            Ok(())
        },
    );
    eprintln!(
        "SIGTERM of n{leaver}: exited cleanly, recorded as left by all {} others {} ms after the signal",
        running.len(),
        (t_term.elapsed()).as_millis().max(took.as_millis())
    );
}
