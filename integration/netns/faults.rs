//! Fault injection on the running testbed: packet loss on one wide-area link, a parent
//! stopped with SIGSTOP and continued, and 30 % of the nodes killed at once. Each step
//! returns what failed and prints its timings; the figures the repairs are held to come from
//! the simulator running the same protocol nodes on the same topology and node count.

use super::checks::{BroadcastReport, broadcast_verdict, settle};
use super::scripts::{
    data_dir, node_cmd, node_command, node_pid, run_script, signal, statuses, wait_until,
};
use crate::common::Proc;
use overlay::api::NodeStatus;
use overlay::proto::Liveness;
use overlay::proto::gossip::GossipConfig;
use overlay::sim::{Action, Sim, SimConfig};
use overlay::testbed::{Plan, check_group};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Broadcasts per loss setting (at least; more while the window lasts).
const LOSS_BROADCASTS: usize = 8;
/// How long each loss setting is held, broadcasting and watching for false deaths.
const LOSS_WINDOW: Duration = Duration::from_secs(20);
/// How long the parent stays stopped.
const STOP_FOR: Duration = Duration::from_secs(20);
/// Slack over the simulator's repair time: status is polled every ~0.5 s through
/// `ip netns exec` (a round of 12 takes up to a second on two busy cores).
const POLL_SLACK: Duration = Duration::from_secs(2);
/// Seeds the simulator's repair bound is the worst of. Victims and probe orders differ by
/// seed, and the tail matters: on das-4 the worst single repair of 4 seeds was 5.2 s, of
/// 16 or 32 seeds 6.9 s, and a real run once took 7.3 s. 32 runs of 12 nodes take ~1 s.
const SIM_SEEDS: u64 = 32;

/// `overlay-node listen` on every node, collecting the op of every delivery.
pub(super) struct Listeners {
    running: Vec<(String, Proc, std::thread::JoinHandle<Vec<String>>)>,
}

impl Listeners {
    /// Starts a listener on each of `nodes` and waits until each says it listens.
    pub(super) fn start(nodes: &[String]) -> Listeners {
        let mut running = Vec::new();
        let (ready_tx, ready_rx) = mpsc::channel();
        for n in nodes {
            let mut cmd = node_command(n, &["listen", "--data-dir", &data_dir(n)]);
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().expect("starting overlay-node listen");
            let stdout = child.stdout.take().expect("piped");
            let stderr = child.stderr.take().expect("piped");
            let tx = ready_tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if line.contains("listening for deliveries") {
                        let _ = tx.send(());
                    }
                }
            });
            let reader = std::thread::spawn(move || {
                BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .filter_map(|l| {
                        let v: serde_json::Value = serde_json::from_str(&l).ok()?;
                        Some(v.get("op")?.as_str()?.to_string())
                    })
                    .collect()
            });
            running.push((n.clone(), Proc::new(format!("listen {n}"), child), reader));
        }
        for _ in nodes {
            ready_rx
                .recv_timeout(Duration::from_secs(20))
                .expect("every listener says it listens within 20 s");
        }
        Listeners { running }
    }

    /// Stops every listener; the ops each node delivered, in order.
    pub(super) fn stop(self) -> BTreeMap<String, Vec<String>> {
        let mut got = BTreeMap::new();
        for (name, mut proc, reader) in self.running {
            proc.kill();
            got.insert(name, reader.join().unwrap_or_default());
        }
        got
    }
}

/// Exactly-once check: every op of `sent` delivered once at every node, nothing else.
fn exactly_once(got: &BTreeMap<String, Vec<String>>, sent: &[String]) -> Vec<String> {
    let mut failures = Vec::new();
    for (node, ops) in got {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for op in ops {
            *count.entry(op).or_default() += 1;
        }
        for op in sent {
            match count.get(op.as_str()) {
                Some(1) => {}
                Some(n) => failures.push(format!("{node} delivered op {op} {n} times")),
                None => failures.push(format!("{node} never delivered op {op}")),
            }
        }
    }
    failures
}

/// Every member some node lists as dead (a false death while every process runs).
fn dead_members(ss: &[NodeStatus]) -> Vec<String> {
    ss.iter()
        .flat_map(|s| {
            s.members
                .iter()
                .filter(|m| m.state == Liveness::Dead)
                .map(move |m| format!("{} lists {} as dead", s.name, m.name))
        })
        .collect()
}

/// Sets `pct` % loss between clusters `a` and `b`, broadcasts from a node of each side in
/// turn for [`LOSS_WINDOW`] while watching every node's member list, then removes the loss:
/// every broadcast must reach every node exactly once and nobody may be declared dead.
pub(super) fn loss(all: &[String], ids: &[String], a: &str, b: &str, pct: &str) -> Vec<String> {
    let mut failures = Vec::new();
    let listeners = Listeners::start(all);
    eprint!(
        "{}",
        run_script("loss", &[a, b, pct], Duration::from_secs(30)).stdout
    );
    let senders = [format!("{a}-1"), format!("{b}-1")];
    let start = Instant::now();
    let (mut sent, mut ms, mut suspects) = (Vec::new(), Vec::new(), BTreeSet::new());
    while sent.len() < LOSS_BROADCASTS || start.elapsed() < LOSS_WINDOW {
        let from = &senders[sent.len() % 2];
        let text = format!("loss {pct}% #{}", sent.len());
        let args = [
            "broadcast",
            "--data-dir",
            &data_dir(from),
            "--text",
            &text,
            "--json",
        ];
        match broadcast_verdict(&node_cmd(from, &args, Duration::from_secs(40)), ids) {
            Ok(BroadcastReport { op, ms: t, .. }) => {
                sent.push(op);
                ms.push(t);
            }
            Err(e) => {
                failures.push(format!("loss {pct}%: broadcast from {from}: {e}"));
                break;
            }
        }
        let (ss, errors) = statuses(all);
        failures.extend(errors);
        failures.extend(dead_members(&ss));
        for s in &ss {
            for m in s.members.iter().filter(|m| m.state == Liveness::Suspect) {
                suspects.insert(format!("{}->{}", s.name, m.name));
            }
        }
    }
    eprint!(
        "{}",
        run_script("loss", &[a, b, "0"], Duration::from_secs(30)).stdout
    );
    // Deliveries still on their way when the last report came reach the listeners soon.
    std::thread::sleep(Duration::from_secs(2));
    let dup_or_lost = exactly_once(&listeners.stop(), &sent);
    ms.sort_by(f64::total_cmp);
    eprintln!(
        "loss {pct}% {a}<->{b}: {} broadcasts over {:.0} s, each reached all {} nodes (median \
         {:.1} ms, max {:.1} ms); {} deliveries not exactly once; members seen suspect: {}; \
         dead: none unless listed below",
        sent.len(),
        start.elapsed().as_secs_f64(),
        ids.len(),
        ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN),
        ms.last().copied().unwrap_or(f64::NAN),
        dup_or_lost.len(),
        suspects.len(),
    );
    failures.extend(dup_or_lost);
    failures.dedup();
    failures
}

/// The nodes that are some other node's parent in a tree they do not root, busiest first
/// (by how many (child, tree) pairs hang from them), then by name.
fn busiest_parents(ss: &[NodeStatus]) -> Vec<String> {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for s in ss {
        for t in &s.trees {
            let Some(p) = t.parent else { continue };
            if p == t.root {
                continue;
            }
            if let Some(parent) = ss.iter().find(|x| x.id == p) {
                *count.entry(parent.name.clone()).or_default() += 1;
            }
        }
    }
    let mut v: Vec<(String, usize)> = count.into_iter().collect();
    v.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    v.into_iter().map(|(n, _)| n).collect()
}

/// The simulator's repair time on the plan's topology and node count, membership by
/// gossip as the daemons run it, crashing the `count` busiest parents at once as the test
/// does: the worst over `tries` seeds (different ids, so different trees and victims).
pub(super) fn simulated_repair(plan: &Plan, count: usize, tries: u64) -> Duration {
    let mut worst = Duration::ZERO;
    for seed in 1..=tries {
        let config = SimConfig {
            seed,
            ..SimConfig::default()
        };
        let mut sim = Sim::with_membership(&plan.topology, config, GossipConfig::default());
        assert!(
            sim.run_until_converged(Duration::from_secs(60)).is_some(),
            "the simulator converges on {}",
            plan.topology.name
        );
        let live = sim.live_nodes();
        let mut children: BTreeMap<usize, usize> = BTreeMap::new();
        for &i in &live {
            for &r in &live {
                let root = sim.id(r);
                let parent = sim.core(i).parent(root).filter(|&p| p != root);
                if let Some(p) = parent.and_then(|p| live.iter().find(|&&j| sim.id(j) == p)) {
                    *children.entry(*p).or_default() += 1;
                }
            }
        }
        let mut victims: Vec<usize> = live.clone();
        victims.sort_by_key(|i| std::cmp::Reverse(children.get(i).copied().unwrap_or(0)));
        let now = sim.now();
        for &node in victims.iter().take(count) {
            sim.schedule(now, Action::Crash { node });
        }
        let took = sim
            .run_until_spanning(Duration::from_secs(60))
            .expect("the simulator repairs");
        worst = worst.max(took);
    }
    worst
}

/// Waits until the trees of `survivors` span them with no parent outside them.
fn repaired(
    plan: &Plan,
    survivors: &[String],
    what: &str,
    limit: Duration,
) -> Result<Duration, String> {
    wait_until(what, survivors, limit, |ss| {
        let c = check_group(plan, ss, Some(survivors));
        if c.spanning() && c.trees_with_foreign_parent == 0 {
            Ok(())
        } else {
            Err(format!("{c:?}"))
        }
    })
    .map(|(_, took)| took)
}

/// Stops the busiest parent with SIGSTOP for [`STOP_FOR`]: the others' trees must span
/// them again, none left with it as parent, within the simulator's repair time for one
/// crash plus [`POLL_SLACK`]; after SIGCONT it must be back in every tree.
pub(super) fn stop_parent(plan: &Plan, all: &[String]) -> Vec<String> {
    let mut failures = Vec::new();
    let (ss, errors) = statuses(all);
    if !errors.is_empty() {
        return errors;
    }
    let Some(victim) = busiest_parents(&ss).into_iter().next() else {
        return vec!["SIGSTOP: no node is a parent in another root's tree".into()];
    };
    let bound = simulated_repair(plan, 1, SIM_SEEDS) + POLL_SLACK;
    let others: Vec<String> = all.iter().filter(|n| **n != victim).cloned().collect();
    let pid = node_pid(&victim);
    signal(pid, libc::SIGSTOP);
    let stopped = Instant::now();
    eprintln!("SIGSTOP {victim} (pid {pid}), the busiest parent");
    match repaired(
        plan,
        &others,
        &format!("children of {victim} re-parented"),
        Duration::from_secs(30),
    ) {
        Ok(took) => {
            eprintln!(
                "SIGSTOP: the other {} re-parented {} ms after the stop (simulator's worst \
                 repair for one crash + {} s polling: {} ms)",
                others.len(),
                took.as_millis(),
                POLL_SLACK.as_secs(),
                bound.as_millis()
            );
            if took > bound {
                failures.push(format!(
                    "SIGSTOP: re-parented in {} ms, over the bound of {} ms",
                    took.as_millis(),
                    bound.as_millis()
                ));
            }
        }
        Err(e) => failures.push(format!("SIGSTOP: {e}")),
    }
    std::thread::sleep(STOP_FOR.saturating_sub(stopped.elapsed()));
    signal(pid, libc::SIGCONT);
    eprintln!(
        "SIGCONT {victim} after {} ms",
        stopped.elapsed().as_millis()
    );
    let what = format!("{victim} back after SIGCONT");
    match settle(plan, all, None, &what, Duration::from_secs(60)) {
        Ok((spanned, optimal)) => eprintln!(
            "SIGCONT: {victim} back in every tree {} ms after SIGCONT, all wide-area optimal \
             after {} ms",
            spanned.as_millis(),
            optimal.as_millis()
        ),
        Err(e) => failures.push(format!("SIGCONT: {e}")),
    }
    failures
}

/// Kills 30 % of the nodes at once (the busiest parents, SIGKILL): the survivors' trees
/// must span them again within the simulator's worst repair for as many crashes plus
/// [`POLL_SLACK`], then become wide-area optimal.
pub(super) fn kill_many(plan: &Plan, all: &[String]) -> Vec<String> {
    let mut failures = Vec::new();
    let (ss, errors) = statuses(all);
    if !errors.is_empty() {
        return errors;
    }
    let count = (all.len() as f64 * 0.3).round() as usize;
    let mut victims = busiest_parents(&ss);
    let rest: Vec<String> = all
        .iter()
        .filter(|n| !victims.contains(n))
        .cloned()
        .collect();
    victims.extend(rest);
    victims.truncate(count);
    let bound = simulated_repair(plan, count, SIM_SEEDS) + POLL_SLACK;
    let survivors: Vec<String> = all
        .iter()
        .filter(|n| !victims.contains(n))
        .cloned()
        .collect();
    let pids: Vec<i32> = victims.iter().map(|v| node_pid(v)).collect();
    for &pid in &pids {
        signal(pid, libc::SIGKILL);
    }
    eprintln!("SIGKILL {} of {} at once: {victims:?}", count, all.len());
    let what = "survivors after the kill";
    match settle(
        plan,
        &survivors,
        Some(&survivors),
        what,
        Duration::from_secs(30),
    ) {
        Ok((took, optimal)) => {
            eprintln!(
                "kill 30 %: the {} survivors' trees span them {} ms after the kill (simulator's \
                 worst repair for {count} crashes + {} s polling: {} ms); wide-area optimal \
                 after {} ms",
                survivors.len(),
                took.as_millis(),
                POLL_SLACK.as_secs(),
                bound.as_millis(),
                optimal.as_millis()
            );
            if took > bound {
                failures.push(format!(
                    "kill 30 %: repaired in {} ms, over the bound of {} ms",
                    took.as_millis(),
                    bound.as_millis()
                ));
            }
        }
        Err(e) => failures.push(format!("kill 30 %: {e}")),
    }
    failures
}
