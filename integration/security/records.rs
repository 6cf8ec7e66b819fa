//! A member holding the token cannot speak for another: membership records it forged
//! (another member dead at an incarnation nobody could refute, departed, moved) are
//! refused and counted, over real QUIC with real keys.

use super::*;
use overlay::net::record_auth::Ed25519Records;
use overlay::proto::gossip::RecordAuth;
use overlay::proto::gossip::auth::statement;

#[tokio::test(flavor = "multi_thread")]
async fn a_member_cannot_declare_another_dead_or_gone() {
    let _alone = crate::common::real_network();
    bounded(async {
        let node = seed("target").await;
        let victim = joiner("victim", &node).await;
        wait_status(&node, "victim alive", Duration::from_secs(10), |s| {
            alive_members(s).contains(&victim.id())
        })
        .await;
        let before = status(&node).await;

        let raw = RawPeer::new();
        let conn = raw.admitted(&node).await;
        let keys = Ed25519Records::new(&raw.identity).expect("keys");
        let forge = |incarnation: u64, state: Liveness, addr: SocketAddr| {
            let mut r = MemberRecord {
                id: victim.id(),
                name: "victim".into(),
                addr,
                incarnation,
                boot: 1,
                state,
                groups: Vec::new(),
                proof: Vec::new(),
            };
            r.proof = keys.sign(&statement(&r));
            r
        };
        let updates = vec![
            forge(u64::MAX - 1, Liveness::Dead, victim.local_addr()),
            forge(u64::MAX - 1, Liveness::Left, victim.local_addr()),
            forge(
                u64::MAX - 1,
                Liveness::Alive,
                raw.endpoint.local_addr().expect("addr"),
            ),
        ];
        let count = updates.len() as u64;
        let updates = updates.into_iter().map(Into::into).collect();
        let rumor = Packet::Gossip(GossipMessage::Rumor { updates });
        let mut send = conn.open_uni().await.expect("open_uni");
        write_frame(&mut send, &rumor.encode().expect("encode"))
            .await
            .expect("write");
        let s = wait_status(
            &node,
            "forged records counted",
            Duration::from_secs(10),
            |s| s.forged_records >= before.forged_records + count,
        )
        .await;
        assert_eq!(s.forged_records, before.forged_records + count, "{s:#?}");
        // Some gossip periods later the victim is still alive, where it was, everywhere.
        tokio::time::sleep(Duration::from_secs(3)).await;
        for (who, n) in [("target", &node), ("victim", &victim)] {
            let s = status(n).await;
            let m = s
                .members
                .iter()
                .find(|m| m.id == victim.id())
                .expect("known");
            assert_eq!(m.state, Liveness::Alive, "at {who}: {m:?}");
            assert_eq!(m.addr, victim.local_addr(), "at {who}: {m:?}");
        }
        eprintln!("{count} forged records refused and counted; the victim stayed alive");
        victim.leave().await;
        node.leave().await;
    })
    .await;
}
