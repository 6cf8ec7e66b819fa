//! Members declared dead by mistake come back everywhere within a couple of anti-entropy
//! periods, also among 120 members (the join storm on the netns testbed is that size).

use super::*;

/// The size of the join storm on the netns testbed.
const MEMBERS: usize = 120;

/// `MEMBERS` members joined and gossiping for 20 s.
fn settled() -> Net {
    let mut net = Net::new(MEMBERS);
    net.join_all();
    net.run_for(Duration::from_secs(20));
    net
}

/// Two anti-entropy periods, in seconds: a digest to a member declared dead goes out every
/// period.
fn two_periods() -> u64 {
    2 * GossipConfig::default().anti_entropy_interval.as_secs()
}

/// How many members other than `m` hold `m` alive.
fn seen_alive_by(net: &Net, m: usize) -> usize {
    (0..net.nodes.len())
        .filter(|&i| i != m && net.state_of(i, m) == Some(Liveness::Alive))
        .count()
}

/// Runs second by second until `done` holds; the seconds it took, at most `limit`.
fn seconds_until(net: &mut Net, limit: u64, done: impl Fn(&Net) -> bool) -> Option<u64> {
    (1..=limit).find(|_| {
        net.run_for(Duration::from_secs(1));
        done(net)
    })
}

#[test]
fn a_member_cut_off_alone_is_alive_everywhere_soon_after_the_cut_heals() {
    let n = MEMBERS;
    let mut net = settled();
    net.cut = Some(1); // node 0 alone
    net.run_for(Duration::from_secs(40));
    assert_eq!(
        seen_alive_by(&net, 0),
        0,
        "everyone declared the lone node dead"
    );
    net.cut = None;
    let back = seconds_until(&mut net, 60, |net| {
        seen_alive_by(net, 0) == n - 1 && net.nodes[0].live_members().count() == n - 1
    });
    assert!(
        back.is_some_and(|s| s <= two_periods()),
        "healed after {back:?} s"
    );
}

#[test]
fn a_member_dead_at_an_incarnation_it_already_refuted_comes_back_everywhere() {
    // Its refutation reached nobody (the connections it went out on were closed when the
    // others declared it dead), so it never sees itself dead at its own incarnation and
    // has nothing to refute: the others must take its newer record from a push-pull.
    let n = MEMBERS;
    let mut net = settled();
    let m = 7;
    let mut dead = net.nodes[m].me().clone();
    dead.state = Liveness::Dead;
    for i in (0..n).filter(|&i| i != m) {
        net.nodes[i].apply(net.now, dead.clone().into());
        net.drain(i);
    }
    net.in_flight.clear();
    std::sync::Arc::make_mut(&mut net.nodes[m].me).incarnation += 1;
    net.nodes[m].sign_me();
    assert_eq!(seen_alive_by(&net, m), 0);
    let back = seconds_until(&mut net, 60, |net| seen_alive_by(net, m) == n - 1);
    assert!(
        back.is_some_and(|s| s <= two_periods()),
        "back after {back:?} s"
    );
}
