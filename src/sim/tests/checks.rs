//! Cycle detection, tree metrics, convergence, repair and churn, on hand-set views and on
//! oracle nodes that build optimal trees straight from membership.

use super::fakes::{Behaviour, Fake, Log, Oracle, Step};
use crate::proto::Time;
use crate::proto::rng::SplitMix64;
use crate::sim::invariants::ParentView;
use crate::sim::metrics::{self, Layout, Scratch};
use crate::sim::{Action, NetModel, Sim, SimConfig};
use std::collections::HashSet;
use std::time::Duration;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Three clusters X, Y, Z of two nodes each (nodes 0-1, 2-3, 4-5), 0.1 ms inside,
/// 10/20/30 ms between, with optional sites.
fn three(sites: Option<&[usize]>, per_cluster: usize) -> NetModel {
    let i = Duration::from_micros(100);
    let lat = vec![
        vec![i, ms(10), ms(20)],
        vec![ms(10), i, ms(30)],
        vec![ms(20), ms(30), i],
    ];
    let initial: Vec<usize> = (0..3)
        .flat_map(|c| std::iter::repeat_n(c, per_cluster))
        .collect();
    NetModel::new("three", &["X", "Y", "Z"], &lat, sites, &initial)
}

struct Hand {
    net: NetModel,
    view: ParentView,
    alive: Vec<bool>,
    cluster_of: Vec<usize>,
}

impl Hand {
    fn new(sites: Option<&[usize]>) -> Self {
        let net = three(sites, 2);
        let mut view = ParentView::new();
        for _ in 0..6 {
            view.add_node();
        }
        Hand {
            cluster_of: net.initial_clusters().to_vec(),
            net,
            view,
            alive: vec![true; 6],
        }
    }

    fn tree(&mut self, root: usize, edges: &[(usize, Option<usize>)]) {
        for &(c, p) in edges {
            self.view.set(root, c, p);
        }
    }

    fn eval(&self, root: usize) -> (metrics::TreeMetrics, metrics::TreeDiagnosis) {
        let mut per_cluster = vec![0; self.net.clusters()];
        let mut per_site = vec![0; self.net.sites()];
        for v in (0..6).filter(|&v| self.alive[v]) {
            per_cluster[self.cluster_of[v]] += 1;
            per_site[self.net.site_of(self.cluster_of[v])] += 1;
        }
        let lay = Layout {
            alive: &self.alive,
            cluster_of: &self.cluster_of,
            net: &self.net,
            live_per_cluster: &per_cluster,
            live_per_site: &per_site,
            live: self.alive.iter().filter(|&&a| a).count(),
        };
        let mut s = Scratch::default();
        let m = metrics::tree_metrics(root, self.view.row(root), &lay, &mut s);
        (
            m,
            metrics::diagnose(root, self.view.row(root), &lay, &mut s),
        )
    }
}

#[test]
fn find_cycle_follows_live_parents_only() {
    let mut h = Hand::new(None);
    h.tree(0, &[(1, Some(2)), (2, Some(3)), (3, Some(1))]);
    assert_eq!(h.view.find_cycle(0, 1, &h.alive), Some(vec![1, 2, 3]));
    assert_eq!(h.view.find_cycle(0, 3, &h.alive), Some(vec![3, 1, 2]));
    h.alive[3] = false;
    assert_eq!(h.view.find_cycle(0, 1, &h.alive), None);
    // A node leading into a cycle it is not part of: no cycle through it, and no hang.
    h.alive[3] = true;
    h.tree(0, &[(4, Some(1))]);
    assert_eq!(h.view.find_cycle(0, 4, &h.alive), None);
    assert_eq!(h.view.changes(0, 1), 1);
}

#[test]
fn metrics_of_an_optimal_tree() {
    let mut h = Hand::new(Some(&[0, 0, 1]));
    h.tree(
        0,
        &[
            (1, Some(0)),
            (2, Some(0)),
            (3, Some(2)),
            (4, Some(0)),
            (5, Some(4)),
        ],
    );
    let (m, d) = h.eval(0);
    assert!(m.spanning && m.wide_area_optimal && m.site_optimal, "{m:?}");
    assert_eq!(
        (m.reached, m.depth, m.max_fanout, m.total_hops),
        (6, 2, 3, 1 + 1 + 2 + 1 + 2)
    );
    assert!(d.is_ok(), "{d:?}");
}

#[test]
fn two_edges_into_a_cluster_are_not_wide_area_optimal() {
    let mut h = Hand::new(None);
    h.tree(
        0,
        &[
            (1, Some(0)),
            (2, Some(0)),
            (3, Some(0)),
            (4, Some(0)),
            (5, Some(4)),
        ],
    );
    let (m, d) = h.eval(0);
    assert!(m.spanning && !m.wide_area_optimal && !m.site_optimal);
    assert_eq!(d.bad_clusters, vec![(1, 1, vec![(2, 0), (3, 0)])]);
    // An edge into the root's cluster is also wrong.
    let mut h = Hand::new(None);
    h.tree(
        0,
        &[
            (1, Some(2)),
            (2, Some(0)),
            (3, Some(2)),
            (4, Some(0)),
            (5, Some(4)),
        ],
    );
    let (m, d) = h.eval(0);
    assert!(m.spanning && !m.wide_area_optimal);
    assert_eq!(d.bad_clusters, vec![(0, 0, vec![(1, 2)])]);
}

#[test]
fn one_edge_per_cluster_but_two_into_a_site_is_not_site_optimal() {
    let mut h = Hand::new(Some(&[0, 1, 1]));
    h.tree(
        0,
        &[
            (1, Some(0)),
            (2, Some(0)),
            (3, Some(2)),
            (4, Some(0)),
            (5, Some(4)),
        ],
    );
    let (m, d) = h.eval(0);
    assert!(
        m.spanning && m.wide_area_optimal && !m.site_optimal,
        "{m:?}"
    );
    assert_eq!(d.bad_sites, vec![(1, 1, vec![(2, 0), (4, 0)])]);
    h.tree(0, &[(4, Some(2))]);
    let (m, _) = h.eval(0);
    assert!(
        m.site_optimal,
        "entering site 1 once, then cluster Z from Y"
    );
}

#[test]
fn unreached_nodes_dead_nodes_and_detached_cycles() {
    let mut h = Hand::new(None);
    h.tree(
        0,
        &[
            (1, Some(0)),
            (2, Some(0)),
            (3, Some(2)),
            (4, Some(5)),
            (5, Some(4)),
        ],
    );
    let (m, d) = h.eval(0);
    assert!(!m.spanning && !m.wide_area_optimal);
    assert_eq!(m.reached, 4);
    assert_eq!(d.unreached, vec![4, 5]);
    // A dead node is not required; a node whose parent is dead is unreached.
    h.tree(0, &[(4, Some(0)), (5, Some(4))]);
    h.alive[5] = false;
    assert!(h.eval(0).0.wide_area_optimal);
    h.alive[5] = true;
    h.alive[4] = false;
    assert_eq!(h.eval(0).1.unreached, vec![5]);
    // A dead root has no tree.
    h.alive[0] = false;
    assert_eq!(h.eval(0).0.reached, 0);
}

fn oracle_sim(net: NetModel, cfg: SimConfig) -> Sim<Oracle> {
    Sim::with_nodes(net, cfg, Oracle::factory())
}

#[test]
fn oracle_trees_converge_and_report() {
    let mut sim = oracle_sim(three(None, 4), SimConfig::default());
    let t = sim
        .run_until_converged(Duration::from_secs(30))
        .expect("converges");
    assert_eq!(
        t,
        ms(50),
        "trees are built at t=0; the first snapshot is at 50 ms"
    );
    assert!(sim.now() >= Time::ZERO + ms(5050));
    let r = sim.report();
    assert_eq!(
        (
            r.nodes,
            r.trees,
            r.spanning,
            r.wide_area_optimal,
            r.site_optimal
        ),
        (12, 12, 12, 12, 12)
    );
    assert_eq!(r.cycles_seen, 0);
    assert_eq!(r.converged_ms, Some(50.0));
    assert_eq!(r.optimal_ms, Some(50.0));
    assert_eq!(r.first_all_optimal_ms, Some(50.0));
    assert_eq!(r.optimal_breaks, 0);
    assert_eq!(sim.first_optimal_at(), Some(Time::ZERO + ms(50)));
    assert_eq!(r.max_depth, 2);
    assert_eq!(r.steady_control_bytes_per_node_per_s, Some(0.0));
    assert!(sim.explain(5).is_empty());
    let json = serde_json::to_value(&r).expect("serializes");
    assert_eq!(json["wide_area_optimal"], 12);
    let dot = sim.dot(0);
    assert!(dot.starts_with("digraph"), "{dot}");
    for c in 0..3 {
        assert!(dot.contains(&format!("subgraph cluster_{c} {{")), "{dot}");
    }
    assert!(
        dot.contains(&format!("n0 [label=\"{}\", shape=doublecircle", sim.id(0))),
        "{dot}"
    );
    assert_eq!(dot.matches(" -> ").count(), 11);
}

#[test]
fn site_sub_optimal_trees_never_converge_and_are_explained() {
    let mut sim = oracle_sim(three(Some(&[0, 1, 1]), 2), SimConfig::default());
    assert_eq!(sim.run_until_converged(Duration::from_secs(8)), None);
    let s = sim.snapshot().clone();
    assert_eq!((s.trees, s.spanning, s.wide_area_optimal), (6, 6, 6));
    assert_eq!(s.site_optimal, 4, "roots in X see site 1 entered twice");
    let text = sim.explain(10);
    assert!(
        text.contains("site site1 entered by 2 edges (want 1)"),
        "{text}"
    );
    assert!(sim.dot(0).contains("subgraph cluster_site_1"));
}

#[test]
fn repair_after_crashing_a_gateway_takes_the_failure_detection_delay() {
    let mut sim = oracle_sim(three(None, 4), SimConfig::default());
    sim.run_until_converged(Duration::from_secs(30))
        .expect("converges");
    sim.set_check_interval(ms(10));
    let ys = sim.nodes_in_cluster("Y");
    let gateway = *ys.iter().min_by_key(|&&i| sim.id(i)).expect("Y has nodes");
    let crashed_at = sim.now();
    let d = sim
        .measure_repair(gateway, Duration::from_secs(5))
        .expect("repairs");
    assert!(d >= ms(300) && d <= ms(310), "{d:?}");
    // A scenario action is no break of "every tree optimal": it starts the period anew.
    assert!(sim.now() > crashed_at);
    assert_eq!(sim.optimal_breaks().1, 0);
    assert_eq!(sim.first_all_optimal_at(), Some(Time::ZERO + ms(50)));
    // A non-gateway node of Y is a leaf in every other tree: nothing to repair.
    let leaf = *ys
        .iter()
        .find(|&&i| i != gateway && sim.is_alive(i))
        .expect("another Y node");
    let next_gateway = *ys
        .iter()
        .filter(|&&i| sim.is_alive(i))
        .min_by_key(|&&i| sim.id(i))
        .expect("Y");
    if leaf != next_gateway {
        assert_eq!(
            sim.measure_repair(leaf, Duration::from_secs(5)),
            Some(ms(10))
        );
    }
    let r = sim.report();
    assert_eq!(r.crashes, sim.repairs().len() as u64);
    assert_eq!(r.unrepaired, 0);
    assert_eq!(sim.cycles_seen(), 0);
    assert!(sim.run_until_converged(Duration::from_secs(30)).is_some());
    assert_eq!(
        sim.report().converged_ms,
        Some(50.0),
        "the first convergence is kept"
    );
}

#[test]
fn churn_is_planned_without_repeats_and_the_oracle_reconverges() {
    let mut sim = oracle_sim(
        three(None, 10),
        SimConfig {
            seed: 9,
            ..SimConfig::default()
        },
    );
    sim.run_until_converged(Duration::from_secs(30))
        .expect("converges");
    let start = sim.now();
    let mut rng = SplitMix64::new(42);
    let plan = sim.schedule_churn(40.0, start + ms(100)..start + ms(2100), &mut rng);
    assert_eq!(plan.len(), 12);
    let mut seen = HashSet::new();
    let (mut joins, mut removals) = (0, 0);
    for (at, a) in &plan {
        assert!(*at >= start + ms(100) && *at < start + ms(2100));
        match a {
            Action::Join { cluster } => {
                assert!(*cluster < 3);
                joins += 1;
            }
            Action::Leave { node } | Action::Crash { node } => {
                assert!(seen.insert(*node), "node {node} removed twice");
                removals += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        joins >= 2 && removals >= 6,
        "{joins} joins, {removals} removals"
    );
    assert!(plan.windows(2).all(|w| w[0].0 <= w[1].0));
    // More churn cannot pick the same nodes again.
    let more = sim.schedule_churn(20.0, start + ms(100)..start + ms(2100), &mut rng);
    for (_, a) in &more {
        if let Action::Leave { node } | Action::Crash { node } = a {
            assert!(seen.insert(*node), "node {node} removed twice");
        }
    }
    let again = sim
        .run_until_converged(Duration::from_secs(30))
        .expect("reconverges");
    assert!(again > start - Time::ZERO + ms(100));
    let r = sim.report();
    assert_eq!(
        r.nodes,
        30 + r.joins as usize - r.leaves as usize - r.crashes as usize
    );
    assert_eq!((r.spanning, r.wide_area_optimal), (r.trees, r.trees));
    assert_eq!(r.unrepaired, 0);
    assert!(r.repair_ms_max.is_some());
    assert_eq!(r.cycles_seen, 0);
}

#[test]
fn churn_never_removes_the_last_node() {
    let mut sim = oracle_sim(three(None, 1), SimConfig::default());
    let mut rng = SplitMix64::new(3);
    let plan = sim.schedule_churn(1000.0, Time::ZERO + ms(10)..Time::ZERO + ms(500), &mut rng);
    let removals = plan
        .iter()
        .filter(|(_, a)| !matches!(a, Action::Join { .. }))
        .count();
    assert_eq!(removals, 2, "three initial nodes, one must stay: {plan:?}");
    sim.run_until(Time::ZERO + ms(1000));
    assert!(sim.live_count() >= 1);
}

fn scripted(script: Vec<Vec<Step>>) -> Sim<Fake> {
    let cfg = SimConfig::default();
    let log = Log::default();
    let net = three(None, 1);
    Sim::with_nodes(
        net,
        cfg.clone(),
        Fake::factory(cfg.seed, log, move |i| Behaviour {
            script: script[i].clone(),
            ..Default::default()
        }),
    )
}

#[test]
fn a_tree_that_stops_being_optimal_between_actions_is_a_break() {
    // Three clusters of one node: every tree spans from 3 ms; node 2 leaves tree 0 from
    // 120 ms to 180 ms, which the check at 150 ms sees.
    let mut sim = scripted(vec![
        vec![(1_000, Some((1, Some(1)))), (2_000, Some((2, Some(2))))],
        vec![(1_000, Some((0, Some(0)))), (2_000, Some((2, Some(2))))],
        vec![
            (1_000, Some((0, Some(0)))),
            (2_000, Some((1, Some(1)))),
            (120_000, Some((0, None))),
            (180_000, Some((0, Some(0)))),
        ],
    ]);
    sim.run_until(Time::ZERO + ms(300));
    assert_eq!(sim.first_all_optimal_at(), Some(Time::ZERO + ms(50)));
    let (kept, seen) = sim.optimal_breaks();
    assert_eq!(seen, 1);
    assert_eq!(kept[0].at, Time::ZERO + ms(150));
    assert_eq!(kept[0].trees.len(), 1);
    assert_eq!(
        (kept[0].trees[0].root, &kept[0].trees[0].unreached[..]),
        (0, &[2][..])
    );
    let r = sim.report();
    assert_eq!((r.first_all_optimal_ms, r.optimal_breaks), (Some(50.0), 1));
}

#[test]
fn a_parent_change_that_closes_a_loop_is_counted_and_recorded() {
    let mut sim = scripted(vec![
        vec![],
        vec![(1_000, Some((0, Some(2)))), (4_000, Some((0, Some(0))))],
        vec![(2_000, Some((0, Some(1)))), (3_000, Some((0, Some(0))))],
    ]);
    sim.run_until(Time::from_micros(2_500));
    assert_eq!(sim.cycles_seen(), 1);
    let c = &sim.cycles()[0];
    assert_eq!(c.root, sim.id(0));
    assert_eq!(c.nodes, vec![sim.id(2), sim.id(1)]);
    assert_eq!(c.at, Time::from_micros(2_000));
    sim.run_until(Time::from_micros(100_000));
    assert_eq!(sim.cycles_seen(), 1);
    assert_eq!(sim.parent_of(0, 1), Some(0));
    assert_eq!(sim.parent_changes(0, 1), 2);
    sim.cross_check_all();
    assert_eq!(sim.event_anomalies(), (0, 0));
    assert_eq!(sim.snapshot().spanning, 1, "only tree 0 has parents");
}

#[test]
#[should_panic(expected = "parent view out of sync")]
fn a_core_whose_parent_disagrees_with_its_events_is_caught() {
    struct Liar(Fake);
    impl crate::sim::SimNode for Liar {
        fn handle(&mut self, now: Time, input: crate::proto::Input) {
            self.0.handle(now, input)
        }
        fn poll_transmit(&mut self) -> Option<crate::proto::Transmit> {
            self.0.poll_transmit()
        }
        fn poll_event(&mut self) -> Option<crate::proto::Event> {
            self.0.poll_event()
        }
        fn poll_timeout(&mut self) -> Option<Time> {
            self.0.poll_timeout()
        }
        fn parent(&self, _root: crate::proto::NodeId) -> Option<crate::proto::NodeId> {
            None
        }
    }
    let cfg = SimConfig::default();
    let mut make = Fake::factory(cfg.seed, Log::default(), |i| Behaviour {
        script: if i == 1 {
            vec![(1_000, Some((0, Some(0))))]
        } else {
            vec![]
        },
        ..Default::default()
    });
    let mut sim = Sim::with_nodes(three(None, 1), cfg, Box::new(move |s| Liar(make(s))));
    sim.run_until(Time::from_micros(100_000));
}
