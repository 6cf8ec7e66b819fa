//! Records only their owner can vouch for: forged deaths, departures and moves are
//! refused; honest suspicions still pass and are refuted.

use super::*;
use crate::proto::gossip::auth::statement;

/// A stand-in for signatures with the same shape as the driver's: a proof names its
/// signer and carries a tag only that signer can make (the secret stands for its key).
struct TestKeys {
    me: NodeId,
}

const SECRET: u64 = 0x5ec2_e7ab_cdef_0123;

fn tag(id: &NodeId, statement: &[u8]) -> [u8; 8] {
    let mut h = SECRET;
    for b in id.0.iter().chain(statement) {
        h = SplitMix64::new(h ^ u64::from(*b)).next_u64();
    }
    h.to_le_bytes()
}

impl RecordAuth for TestKeys {
    fn sign(&self, statement: &[u8]) -> Vec<u8> {
        let mut proof = self.me.0.to_vec();
        proof.extend_from_slice(&tag(&self.me, statement));
        proof
    }

    fn verify(&self, id: &NodeId, statement: &[u8], proof: &[u8]) -> bool {
        proof.len() == 24 && proof[..16] == id.0 && proof[16..] == tag(id, statement)
    }
}

fn signed_net(n: usize) -> Net {
    let mut net = Net::new(n);
    net.nodes = std::mem::take(&mut net.nodes)
        .into_iter()
        .map(|g| {
            let me = g.me().id;
            g.with_auth(Box::new(TestKeys { me }))
        })
        .collect();
    net.join_all();
    net
}

/// What a member holding the token but not `victim`'s key can make: `victim`'s record
/// changed by `change`, signed with its own key.
fn forged(
    net: &Net,
    attacker: usize,
    victim: usize,
    change: fn(&mut MemberRecord),
) -> MemberRecord {
    let mut r = net.nodes[attacker].record(&net.id(victim)).unwrap().clone();
    change(&mut r);
    r.proof = TestKeys {
        me: net.id(attacker),
    }
    .sign(&statement(&r));
    r
}

fn rumor(net: &mut Net, from: usize, to: usize, r: MemberRecord) {
    let from = net.id(from);
    let now = net.now;
    net.nodes[to].handle_message(
        now,
        from,
        GossipMessage::Rumor {
            updates: vec![r.into()],
        },
    );
    net.drain(to);
}

#[test]
fn only_the_owner_can_issue_its_incarnations_move_it_or_make_it_leave() {
    let mut net = signed_net(4);
    let (attacker, victim, target) = (3, 1, 0);
    let before = net.nodes[target].record(&net.id(victim)).unwrap().clone();
    // Dead at an incarnation the victim could never refute (u64::MAX is refused).
    let dead = forged(&net, attacker, victim, |r| {
        r.incarnation = u64::MAX - 1;
        r.state = Liveness::Dead;
    });
    // Departed, at the victim's own incarnation and one above it.
    let left = forged(&net, attacker, victim, |r| r.state = Liveness::Left);
    let left_next = forged(&net, attacker, victim, |r| {
        r.incarnation += 1;
        r.state = Liveness::Left;
    });
    // Moved to another address, alive at the next incarnation.
    let moved = forged(&net, attacker, victim, |r| {
        r.incarnation += 1;
        r.addr = addr(99);
    });
    // The victim's real proof on a record whose fields were changed.
    let mut altered = before.clone();
    altered.incarnation += 1;
    for r in [dead.clone(), left, left_next, moved, altered] {
        rumor(&mut net, attacker, target, r);
    }
    assert_eq!(net.nodes[target].forged_records(), 5);
    assert_eq!(net.nodes[target].record(&net.id(victim)), Some(&before));
    // Nor does the victim take the forged death of itself for a suspicion to refute
    // (refuting it would need an incarnation past it, which nobody accepts).
    let incarnation = net.nodes[victim].me().incarnation;
    rumor(&mut net, attacker, victim, dead);
    assert_eq!(net.nodes[victim].me().incarnation, incarnation);
    assert_eq!(net.nodes[victim].forged_records(), 1);
    net.run_for(Duration::from_secs(20));
    for i in 0..4 {
        assert_eq!(
            net.state_of(i, victim).unwrap(),
            Liveness::Alive,
            "node {i}"
        );
    }
}

#[test]
fn an_honest_suspicion_carries_the_owners_proof_and_is_refuted_with_a_new_one() {
    let mut net = signed_net(4);
    let (accuser, victim) = (2, 1);
    // Any member may suspect another at an incarnation the member issued: the record it
    // holds, with its state changed, still carries the owner's proof.
    let mut suspect = net.nodes[accuser].record(&net.id(victim)).unwrap().clone();
    let incarnation = suspect.incarnation;
    suspect.state = Liveness::Suspect;
    rumor(&mut net, accuser, 0, suspect);
    assert_eq!(net.state_of(0, victim), Some(Liveness::Suspect));
    net.run_for(Duration::from_secs(5));
    for i in (0..4).filter(|&i| i != victim) {
        let r = net.nodes[i].record(&net.id(victim)).unwrap();
        assert_eq!(
            (r.state, r.incarnation),
            (Liveness::Alive, incarnation + 1),
            "node {i}"
        );
        assert_eq!(net.nodes[i].forged_records(), 0, "node {i}");
    }
}

#[test]
fn without_proofs_one_member_could_kill_another_for_good() {
    // The attack the proofs stop, shown on the same network without them.
    let mut net = Net::new(4);
    net.join_all();
    let dead = forged(&net, 3, 1, |r| {
        r.incarnation = u64::MAX - 1;
        r.state = Liveness::Dead;
    });
    rumor(&mut net, 3, 0, dead);
    net.run_for(Duration::from_secs(20));
    for i in [0, 2, 3] {
        assert_eq!(net.state_of(i, 1), Some(Liveness::Dead), "node {i}");
    }
}
