//! A join storm through one seed: full answers within the seed's budget of records, light
//! ones past it, and every joiner still learns every member, pulling the rest from the
//! members before it.

use super::*;
use crate::proto::gossip::admission::LIGHT_JOIN_RECORDS;

const JOINERS: usize = 60;

/// A budget far below the default (which serves a storm of a few hundred in full): 600
/// records at once, 100 a second.
fn tight() -> GossipConfig {
    GossipConfig {
        join_rate: 100.0,
        join_burst: 600,
        ..GossipConfig::default()
    }
}

/// `JOINERS` nodes join through node 0 at once with `config`; the net after `secs`.
fn storm(config: GossipConfig, secs: u64) -> Net {
    let mut net = Net::with_config(JOINERS + 1, config);
    net.join_all();
    net.run_for(Duration::from_secs(secs.saturating_sub(3)));
    net
}

/// Nodes that do not list every other node alive.
fn incomplete(net: &Net) -> Vec<usize> {
    (0..net.nodes.len())
        .filter(|&i| net.nodes[i].live_members().count() != JOINERS)
        .collect()
}

#[test]
fn a_storm_through_one_seed_gets_full_answers_within_its_budget_and_light_ones_past_it() {
    let mut net = Net::with_config(JOINERS + 1, tight());
    for i in 1..=JOINERS {
        let via = net.id(0);
        net.nodes[i].join(net.now, via);
        net.drain(i);
    }
    // Every join reaches the seed at the same instant. The k-th finds k + 1 live members
    // (the joiners before it and itself): free while that is small, then paid from the
    // budget at the table's size (with the seed's own record) until it runs out.
    let mut budget = tight().join_burst as usize;
    let mut full = 0;
    for k in 0..JOINERS {
        let (live, cost) = (k + 1, k + 2);
        if live <= LIGHT_JOIN_RECORDS + 1 {
            full += 1;
        } else if cost <= budget {
            budget -= cost;
            full += 1;
        }
    }
    net.run_for(Duration::from_millis(6));
    assert!(full < JOINERS);
    assert_eq!(net.nodes[0].light_joins(), (JOINERS - full) as u64);
    // A second later every join is answered, and the budget has refilled by 100 records:
    // a newcomer's full answer (62) fits again.
    net.run_for(Duration::from_secs(1));
    assert!(
        (1..=JOINERS).all(|i| !net.nodes[i].is_joining()),
        "every join answered"
    );
    let config = tight();
    let late = Gossip::new(
        NodeId::from_seed(9, 999),
        "late".into(),
        addr(999),
        1,
        config,
        999,
        net.now,
    );
    net.nodes.push(late);
    net.down.push(false);
    net.events.push(Vec::new());
    net.sync_records.push(0);
    let (light, seed) = (net.nodes[0].light_joins(), net.id(0));
    let n = net.nodes.len() - 1;
    net.nodes[n].join(net.now, seed);
    net.drain(n);
    net.run_for(Duration::from_millis(20));
    assert_eq!(net.nodes[0].light_joins(), light, "a full answer again");
}

#[test]
fn lightly_answered_joiners_learn_everyone_and_the_seed_sends_far_fewer_records() {
    // Early joiners get the seed's table as it was, full answers or not: everyone's fills
    // in from rumors and anti-entropy. Two anti-entropy periods and a second suffice
    // (with full answers only: 8 s).
    let secs = 2 * GossipConfig::default().anti_entropy_interval.as_secs() + 1;
    let light = storm(tight(), secs);
    assert!(light.nodes[0].light_joins() > 0);
    assert_eq!(
        incomplete(&light),
        Vec::<usize>::new(),
        "all within {secs} s"
    );
    // The default budget serves this storm in full.
    let full = storm(GossipConfig::default(), secs);
    assert_eq!(full.nodes[0].light_joins(), 0);
    let (seed_light, seed_full) = (light.sync_records[0], full.sync_records[0]);
    eprintln!(
        "the seed sent {seed_light} records with light answers, {seed_full} without; all \
         nodes {} and {}",
        light.sync_records.iter().sum::<usize>(),
        full.sync_records.iter().sum::<usize>()
    );
    assert!(
        2 * seed_light < seed_full,
        "the seed sent {seed_light} records with light answers, {seed_full} without"
    );
}

#[test]
fn a_storm_fills_every_table_in_a_few_fast_push_pulls_and_a_settled_table_slows_down() {
    // Rumors miss a few records per node in a storm (each is forwarded to three members
    // only); push-pulls every fast period while news comes fill the tables before the
    // first one of the long period would even start.
    const N: usize = 300;
    let fast = GossipConfig::default();
    let slow = GossipConfig {
        anti_entropy_fast_interval: fast.anti_entropy_interval,
        ..fast.clone()
    };
    assert!(fast.anti_entropy_fast_interval * 4 <= fast.anti_entropy_interval);
    let after_storm = |config: GossipConfig| {
        let mut net = Net::with_config(N, config);
        for i in 1..N {
            let via = net.id(0);
            net.nodes[i].join(net.now, via);
            net.drain(i);
        }
        net.run_for(Duration::from_secs(3));
        net
    };
    let incomplete = |net: &Net| {
        (0..N)
            .filter(|&i| net.nodes[i].live_members().count() != N - 1)
            .count()
    };
    let mut net = after_storm(fast.clone());
    assert_eq!(incomplete(&net), 0, "every table full 3 s after the storm");
    let unhurried = after_storm(slow);
    assert!(
        incomplete(&unhurried) > N / 2,
        "without the fast period most tables still miss records at 3 s ({} of {N})",
        incomplete(&unhurried)
    );
    // Settled: one push-pull per long period and node (digests only, the tables agree).
    net.run_for(Duration::from_secs(5));
    let (digests, syncs) = (net.digests, net.syncs);
    let window = Duration::from_secs(20);
    net.run_for(window);
    let per_node = (net.digests - digests) as f64 / N as f64;
    let expected = window.as_secs_f64() / fast.anti_entropy_interval.as_secs_f64();
    assert!(
        per_node <= expected * 1.5,
        "{per_node:.1} digests per node in {window:?}, about {expected} expected"
    );
    assert_eq!(net.syncs, syncs, "no full table sent once the tables agree");
}
