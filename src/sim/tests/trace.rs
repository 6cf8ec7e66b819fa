//! The message trace of one pair of nodes ([`crate::sim::SimConfig::trace`]).

use crate::sim::{Sim, SimConfig, TracePair};
use crate::topology::Topology;
use std::time::Duration;

#[test]
fn a_traced_pair_records_its_messages_both_ways_and_marks_the_roots_tree() {
    let topo = Topology::builtin("das-4")
        .expect("shipped topology")
        .scaled(0.25);
    let trace = TracePair {
        a: 0,
        b: 1,
        root: 4,
    };
    let cfg = SimConfig {
        trace: Some(trace),
        ..SimConfig::default()
    };
    let mut sim = Sim::new(&topo, cfg);
    sim.run_for(Duration::from_secs(5));
    let lines = sim.traced();
    assert!(lines.iter().any(|l| l.contains(" 0->1 ")), "{lines:#?}");
    assert!(lines.iter().any(|l| l.contains(" 1->0 ")), "{lines:#?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains(" 0->1 ") || l.contains(" 1->0 ")),
        "only the pair: {lines:#?}"
    );
    let root = format!("{:?}", sim.id(4));
    let about: Vec<&String> = lines.iter().filter(|l| l.contains("[root 4]")).collect();
    assert!(!about.is_empty(), "adverts carry root 4's tree: {lines:#?}");
    assert!(about.iter().all(|l| l.contains(&root)), "{about:#?}");

    let mut plain = Sim::new(&topo, SimConfig::default());
    plain.run_for(Duration::from_secs(1));
    assert!(plain.traced().is_empty(), "nothing recorded unless asked");
}
