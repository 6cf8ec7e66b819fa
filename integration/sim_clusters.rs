//! Cluster discovery in the simulator: every node, from its own measurements and the
//! summaries it receives, must come to see exactly the topology's clusters at level 1 and,
//! where the topology has sites, exactly its sites at level 2; and keep seeing them.
//!
//! The check is the same function for the right and for a wrong partition, and each test
//! also shows that it rejects a wrong one (so a view that merged everything, or a level
//! swapped, would fail). `cargo test --release --test sim_clusters -- --nocapture` prints
//! when the views agreed.

use overlay::proto::{Command, DeliveryKind, Event, NodeId, Start, StartKind};
use overlay::sim::{Action, Sim, SimConfig};
use overlay::topology::Topology;
use std::collections::BTreeMap;
use std::time::Duration;

fn topology(name: &str) -> Topology {
    Topology::builtin(name).unwrap_or_else(|| panic!("{name} is shipped"))
}

/// The live nodes grouped by `key(cluster index)`, as sorted lists, sorted.
fn expected(sim: &Sim, key: impl Fn(usize) -> usize) -> Vec<Vec<NodeId>> {
    let mut groups: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
    for i in sim.live_nodes() {
        groups
            .entry(key(sim.cluster_of(i)))
            .or_default()
            .push(sim.id(i));
    }
    let mut p: Vec<Vec<NodeId>> = groups
        .into_values()
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    p.sort();
    p
}

/// `Ok` if every live node's partition at `level` is `want`; else the first node that
/// differs and what it sees (group sizes).
fn every_view_is(sim: &Sim, level: usize, want: &[Vec<NodeId>]) -> Result<(), String> {
    for i in sim.live_nodes() {
        let got = sim.core(i).clusters().partition(level);
        if got != want {
            let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
            let wanted: Vec<usize> = want.iter().map(Vec::len).collect();
            return Err(format!(
                "node {i} at level {level}: groups of {sizes:?}, want {wanted:?}"
            ));
        }
    }
    Ok(())
}

/// Runs `name` until every node sees `levels` (level, expected partition) or `max` has
/// passed; then runs 20 s more, checking again after 10 and 20 s (the views must stay),
/// and bounds what discovery sends in the last 10 s. Prints the figures.
fn discovers(
    name: &str,
    seed: u64,
    max: Duration,
    levels: impl Fn(&Sim) -> Vec<Vec<Vec<NodeId>>>,
) -> Sim {
    let topo = topology(name);
    let mut sim = Sim::new(
        &topo,
        SimConfig {
            seed,
            ..SimConfig::default()
        },
    );
    let check = |sim: &Sim| -> Result<(), String> {
        for (l, want) in levels(sim).iter().enumerate() {
            every_view_is(sim, l + 1, want)?;
        }
        Ok(())
    };
    let step = Duration::from_millis(500);
    let mut last = Err("not run".to_string());
    while sim.now().as_micros() < max.as_micros() as u64 {
        sim.run_for(step);
        last = check(&sim);
        if last.is_ok() {
            break;
        }
    }
    let agreed = sim.now();
    assert!(
        last.is_ok(),
        "{name} seed {seed}: not discovered within {max:?}: {last:?}"
    );
    let (bytes_agreed, _, _) = cluster_traffic(&sim);
    sim.run_for(Duration::from_secs(10));
    check(&sim).unwrap_or_else(|e| panic!("{name} seed {seed}: the views did not stay: {e}"));
    // Then 10 s of a settled overlay: only digests, and now and then a node whose
    // estimates improved republishing (its summary spreads, then everything is quiet).
    let (bytes_then, _, _) = cluster_traffic(&sim);
    let settled = Duration::from_secs(10);
    sim.run_for(settled);
    check(&sim).unwrap_or_else(|e| panic!("{name} seed {seed}: the views did not stay: {e}"));
    let (bytes_now, messages, versions) = cluster_traffic(&sim);
    let n = sim.live_count() as f64;
    let during = bytes_agreed as f64 / n / (agreed.as_micros() as f64 / 1e6);
    let after = (bytes_now - bytes_then) as f64 / n / settled.as_secs_f64();
    let depth = sim.core(0).clusters().depth();
    println!(
        "{name} seed {seed}: every node sees the topology's groups at {:.1} s ({depth} \
         levels); discovery sent {during:.0} B/node/s until then, {after:.0} B/node/s once \
         settled ({messages} messages, {:.1} summary versions per node; all control traffic \
         {:.0} B/node/s)",
        agreed.as_micros() as f64 / 1e6,
        versions as f64 / n,
        sim.report().control_bytes_per_node_per_s
    );
    assert!(
        after < 500.0,
        "{name} seed {seed}: discovery still sends {after:.0} B/node/s once settled"
    );
    sim
}

/// Bytes, messages and summary versions of cluster discovery sent so far by the live nodes.
fn cluster_traffic(sim: &Sim) -> (u64, u64, u64) {
    sim.live_nodes()
        .into_iter()
        .fold((0, 0, 0), |(b, m, p), i| {
            let s = sim.core(i).stats();
            (
                b + s.cluster_bytes,
                m + s.cluster_messages,
                p + s.cluster_publishes,
            )
        })
}

#[test]
fn das_4_every_node_discovers_the_four_clusters() {
    for seed in 1..=2 {
        let sim = discovers("das-4", seed, Duration::from_secs(40), |s| {
            vec![expected(s, |c| c)]
        });
        let clusters = expected(&sim, |c| c);
        assert_eq!(clusters.len(), 4);
        // The same check fails on wrong partitions.
        assert!(every_view_is(&sim, 1, &expected(&sim, |_| 0)).is_err());
        assert!(every_view_is(&sim, 1, &expected(&sim, |c| c.min(2))).is_err());
        // Nothing above the clusters stands out in DAS-4 (1.5 to 4 ms, no jump of 2x).
        assert_eq!(sim.core(0).clusters().depth(), 1);
    }
}

/// Churn: a node of VU crashes, one leaves Leiden and a new one joins Delft. The survivors
/// drop the departed, and everyone (the newcomer too, which gets the whole table by
/// anti-entropy) places the newcomer in Delft.
#[test]
fn das_4_views_follow_crashes_leaves_and_joins() {
    let mut sim = discovers("das-4", 3, Duration::from_secs(40), |s| {
        vec![expected(s, |c| c)]
    });
    let vu = sim.nodes_in_cluster("VU")[3];
    let leiden = sim.nodes_in_cluster("Leiden")[0];
    sim.apply(Action::Crash { node: vu });
    sim.apply(Action::Leave { node: leiden });
    let delft = sim
        .net()
        .cluster_index("Delft")
        .expect("a cluster of das-4");
    let newcomer = sim.apply(Action::Join { cluster: delft }).expect("joined");
    let start = sim.now();
    let want = expected(&sim, |c| c);
    let mut last = every_view_is(&sim, 1, &want);
    while last.is_err() && sim.now().saturating_since(start) < Duration::from_secs(30) {
        sim.run_for(Duration::from_millis(500));
        last = every_view_is(&sim, 1, &want);
    }
    last.unwrap_or_else(|e| panic!("after churn: {e}"));
    assert!(
        want.iter()
            .all(|g| !g.contains(&sim.id(vu)) && !g.contains(&sim.id(leiden)))
    );
    assert!(
        want.iter()
            .any(|g| g.contains(&sim.id(newcomer)) && g.len() == 9)
    );
    println!(
        "das-4 churn: every view right {:.1} s after a crash, a leave and a join",
        sim.now().saturating_since(start).as_secs_f64()
    );
}

#[test]
fn sites_64_every_node_discovers_the_clusters_and_the_sites() {
    let topo = topology("sites-64");
    let site = move |c: usize| topo.site_of(c);
    let sim = discovers("sites-64", 1, Duration::from_secs(40), move |s| {
        vec![expected(s, |c| c), expected(s, &site)]
    });
    let topo = topology("sites-64");
    assert_eq!(expected(&sim, |c| c).len(), 8);
    assert_eq!(expected(&sim, |c| topo.site_of(c)).len(), 4);
    // Levels swapped, or one level missing, fail the same check.
    assert!(every_view_is(&sim, 1, &expected(&sim, |c| topo.site_of(c))).is_err());
    assert!(every_view_is(&sim, 2, &expected(&sim, |c| c)).is_err());
    // The typical RTT inside a cluster and inside a site, as every node sees it.
    let view = sim.core(0).clusters();
    let me = sim.id(0);
    let rtt = |l| {
        view.group_of(l, &me)
            .and_then(|g| g.rtt_us)
            .expect("a group")
    };
    assert!(rtt(1) < 1_000, "cluster rtt {} µs", rtt(1));
    assert!((1_500..3_000).contains(&rtt(2)), "site rtt {} µs", rtt(2));
}

/// split-site: the nodes see the three lyon clusters (30-60 µs apart) as one cluster, which
/// is the group the simulator's verdict judges trees on; not the declared clusters.
#[test]
fn split_site_nodes_discover_the_verdicts_groups() {
    let group = |s: &Sim, c: usize| s.net().groups().group_of(c);
    let sim = discovers("split-site", 1, Duration::from_secs(40), |s| {
        vec![expected(s, |c| group(s, c))]
    });
    assert_eq!(expected(&sim, |c| group(&sim, c)).len(), 3);
    assert!(every_view_is(&sim, 1, &expected(&sim, |c| c)).is_err());
}

/// Clusters of very different sizes (100, 65 and 3): the large ones must stay whole although
/// each node measures only a few dozen of their members closely.
#[test]
fn phoenix_168_every_node_discovers_the_three_clusters() {
    let sim = discovers("phoenix-168", 1, Duration::from_secs(40), |s| {
        vec![expected(s, |c| c)]
    });
    let mut sizes: Vec<usize> = expected(&sim, |c| c).iter().map(Vec::len).collect();
    sizes.sort();
    assert_eq!(sizes, vec![3, 65, 100]);
    assert!(every_view_is(&sim, 1, &expected(&sim, |c| c.min(1))).is_err());
}

/// The second of two operations `what` from `root` (the first teaches the cluster
/// entries who is below): per node reached, who sent it and what.
fn senders(
    sim: &mut Sim,
    root: usize,
    kind: DeliveryKind,
    what: impl Fn() -> StartKind,
) -> Vec<(usize, NodeId, Vec<u8>)> {
    let mut out = Vec::new();
    // Operation numbers are the root's to choose; each call takes two of its own.
    let base = 10 * (kind as u64 + 1);
    for nonce in [base + 1, base + 2] {
        sim.record_events(true);
        sim.command(
            root,
            Command::Start(Start {
                group: None,
                nonce,
                timeout: Duration::from_secs(5),
                what: what(),
            }),
        );
        sim.run_for(Duration::from_secs(3));
        out.clear();
        for (_, node, ev) in sim.take_events() {
            if let Event::Delivered(d) = ev
                && d.kind == kind
                && d.op.nonce == nonce
            {
                out.push((node, d.from, d.payload));
            }
        }
        sim.record_events(false);
    }
    out
}

/// The collective engine spreads inside the clusters discovery found, with no RTT bound
/// configured that would group anyone: with `cluster_rtt` at 1 µs (below every RTT of
/// phoenix-27), nodes of the root's cluster are still reached by the in-cluster plan (from
/// a node other than their tree parent), by a broadcast and by a scatter; with planning
/// off, every node is reached by its tree parent. Everyone is reached exactly once, with
/// its own item, either way.
#[test]
fn collectives_plan_over_the_discovered_clusters() {
    let topo = topology("phoenix-27");
    let mut reached_by_plan = Vec::new();
    for cluster_rtt in [Duration::from_micros(1), Duration::ZERO] {
        let mut core = overlay::proto::Config::test();
        core.cluster_rtt = cluster_rtt;
        let mut sim = Sim::new(
            &topo,
            SimConfig {
                seed: 3,
                core,
                ..SimConfig::default()
            },
        );
        sim.run_until_converged(Duration::from_secs(60))
            .expect("converges");
        let want = expected(&sim, |c| c);
        let deadline = sim.now() + Duration::from_secs(30);
        while every_view_is(&sim, 1, &want).is_err() && sim.now() < deadline {
            sim.run_for(Duration::from_millis(500));
        }
        every_view_is(&sim, 1, &want).expect("views agree");
        let root = 3; // the first node of cluster B (12 nodes)
        let root_id = sim.id(root);
        let ids: Vec<NodeId> = sim.ids().to_vec();
        let broadcast = senders(&mut sim, root, DeliveryKind::Broadcast, || {
            StartKind::Broadcast {
                payload: vec![7; 100],
            }
        });
        let items = ids.clone();
        let scatter = senders(&mut sim, root, DeliveryKind::Scatter, || {
            StartKind::Scatter {
                items: items
                    .iter()
                    .map(|id| (*id, id.to_string().into_bytes()))
                    .collect(),
            }
        });
        let mut counts = Vec::new();
        for (n, _, payload) in &scatter {
            let want = ids[*n].to_string().into_bytes();
            assert_eq!(payload, &want, "node {n}: not its item");
        }
        for got in [broadcast, scatter] {
            let mut nodes: Vec<usize> = got.iter().map(|(n, _, _)| *n).collect();
            nodes.sort_unstable();
            nodes.dedup();
            assert_eq!(got.len(), sim.live_nodes().len(), "each node once");
            assert_eq!(nodes.len(), got.len(), "nobody twice");
            let planned = got
                .iter()
                .filter(|(n, from, _)| {
                    *n != root
                        && sim.cluster_of(*n) == sim.cluster_of(root)
                        && sim.core(*n).parent(root_id) != Some(*from)
                })
                .count();
            counts.push(planned);
        }
        reached_by_plan.push(counts);
    }
    eprintln!(
        "nodes of the root's cluster reached by plan [broadcast, scatter]: {:?} with the discovered clusters, {:?} with planning off",
        reached_by_plan[0], reached_by_plan[1]
    );
    assert!(
        reached_by_plan[0][0] > 0,
        "broadcast: no plan over the discovered cluster"
    );
    assert!(
        reached_by_plan[0][1] > 0,
        "scatter: no plan over the discovered cluster"
    );
    assert_eq!(reached_by_plan[1], vec![0, 0], "planning off still planned");
}
