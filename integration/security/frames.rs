//! An admitted peer sending random, truncated or oversized frames: dropped (or its
//! connection closed) without harm, and kept out once it keeps at it.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn malformed_frames_from_an_admitted_peer_are_rejected() {
    let _alone = crate::common::real_network();
    bounded(async {
        let node = seed("target").await;
        let before = status(&node).await;
        let mut rng = SplitMix64::new(0x5eed_f00d);

        // (a) Random frames: dropped one by one, the stream and the connection stay usable.
        let raw = RawPeer::new();
        let conn = raw.admitted(&node).await;
        let mut send = conn.open_uni().await.expect("open_uni");
        let valid = Packet::Query(QueryMessage::TreeRequest {
            id: 42,
            root: node.id(),
        })
        .encode()
        .expect("encode");
        let mut junk: Vec<Vec<u8>> = Vec::new();
        for i in 0..24 {
            let len = 1 + (rng.next_u64() % 3000) as usize;
            let mut body = random_bytes(&mut rng, len);
            match i % 3 {
                // Unknown wire version.
                0 => body[0] = WIRE_VERSION.wrapping_add(1 + (i as u8 % 200)),
                // Right version, random body.
                1 => body[0] = WIRE_VERSION,
                // A valid packet cut short, or with bytes after it.
                _ => {
                    body = valid.clone();
                    if i % 2 == 0 {
                        body.truncate(valid.len() - 1 - (i % 5));
                    } else {
                        body.extend_from_slice(&[0u8; 3]);
                    }
                }
            }
            junk.push(body);
        }
        // As many as a peer may send within a minute without being closed.
        junk.truncate(MAX_STRIKES as usize - 1);
        junk.push(Vec::new()); // an empty frame
        for body in &junk {
            write_frame(&mut send, body).await.expect("write");
        }
        let want = before.frames_rejected + junk.len() as u64;
        let s = wait_status(
            &node,
            "random frames rejected",
            Duration::from_secs(10),
            |s| s.frames_rejected >= want,
        )
        .await;
        assert_eq!(s.frames_rejected, want, "{s:#?}");
        assert_eq!(s.protocol_errors, before.protocol_errors);
        assert_eq!(s.members.len(), 1, "{s:#?}");
        assert!(conn.close_reason().is_none(), "the connection was closed");
        // A valid request on the same stream after the junk is still answered.
        write_frame(&mut send, &valid).await.expect("write");
        let reply = tokio::time::timeout(Duration::from_secs(10), async {
            let mut recv = conn.accept_uni().await.expect("the node's stream");
            read_frame(&mut recv).await.expect("read").expect("a frame")
        })
        .await
        .expect("no answer to a valid request after the junk");
        match Packet::decode(&reply).expect("the node's frame decodes") {
            Packet::Query(QueryMessage::TreeReply { id: 42, root, .. }) => {
                assert_eq!(root, node.id())
            }
            other => panic!("unexpected answer {other:?}"),
        }
        eprintln!(
            "{} junk frames rejected, connection kept, next valid frame answered",
            junk.len()
        );
        // One more is one too many: the connection is closed and the peer kept out, so
        // its next connection is closed right after admission.
        write_frame(&mut send, &[WIRE_VERSION, 0xff, 0xff])
            .await
            .expect("write");
        let code = closed_by_node(&conn, Duration::from_secs(10)).await;
        assert_eq!(code, u64::from(CLOSE_PROTOCOL));
        let again = raw
            .connect(node.local_addr(), ANY_NODE)
            .await
            .expect("handshake");
        // Its proof may not even finish: the node closes as soon as its own side is done.
        let _ =
            authenticate_with_token(&again, &node.token(), Role::Dialer, Duration::from_secs(5))
                .await;
        let code = closed_by_node(&again, Duration::from_secs(10)).await;
        assert_eq!(code, u64::from(CLOSE_PROTOCOL));
        let s = wait_status(&node, "kept out counted", Duration::from_secs(5), |s| {
            s.peers_kept_out == before.peers_kept_out + 1
        })
        .await;
        assert!(s.refused_connections > before.refused_connections, "{s:#?}");
        eprintln!("the next junk frame closed it; the peer's next connection was refused");
        // And a legitimate node joins afterwards.
        let friend = joiner("friend", &node).await;
        wait_status(&node, "friend alive", Duration::from_secs(10), |s| {
            alive_members(s).contains(&friend.id())
        })
        .await;

        // (b) Truncated frames: the stream ends inside a frame; the node closes the link.
        let mut errors = status(&node).await.protocol_errors;
        for cut in [
            // Inside the body.
            {
                let mut b = 1000u32.to_be_bytes().to_vec();
                b.extend(random_bytes(&mut rng, 10));
                b
            },
            // Inside the length prefix.
            vec![0u8, 0],
        ] {
            let raw = RawPeer::new();
            let conn = raw.admitted(&node).await;
            let mut send = conn.open_uni().await.expect("open_uni");
            send.write_all(&cut).await.expect("write");
            send.finish().expect("finish");
            let code = closed_by_node(&conn, Duration::from_secs(10)).await;
            assert_eq!(code, u64::from(CLOSE_PROTOCOL));
            errors += 1;
            wait_status(
                &node,
                "truncated frame counted",
                Duration::from_secs(5),
                |s| s.protocol_errors >= errors,
            )
            .await;
        }

        // (c) Oversized frames: refused from the prefix alone, connection closed.
        for len in [MAX_FRAME_BYTES as u32 + 1, u32::MAX] {
            let raw = RawPeer::new();
            let conn = raw.admitted(&node).await;
            let mut send = conn.open_uni().await.expect("open_uni");
            send.write_all(&len.to_be_bytes()).await.expect("write");
            let t = Instant::now();
            // The node may close the connection on seeing the prefix: this write may fail.
            let _ = send.write_all(&random_bytes(&mut rng, 4096)).await;
            let code = closed_by_node(&conn, Duration::from_secs(10)).await;
            assert_eq!(code, u64::from(CLOSE_PROTOCOL));
            eprintln!(
                "frame announcing {len} bytes: connection closed by the node after {} ms",
                t.elapsed().as_millis()
            );
            errors += 1;
            wait_status(
                &node,
                "oversized frame counted",
                Duration::from_secs(5),
                |s| s.protocol_errors >= errors,
            )
            .await;
        }

        // The node keeps serving: the friend is still alive, another node can join, and
        // the hand-made peers never became members.
        let late = joiner("late", &node).await;
        let s = wait_status(&node, "late alive", Duration::from_secs(10), |s| {
            alive_members(s).contains(&late.id()) && alive_members(s).contains(&friend.id())
        })
        .await;
        assert_eq!(s.members.len(), 3, "{s:#?}");
        assert_eq!(s.protocol_errors, before.protocol_errors + 4);
        eprintln!(
            "after the abuse: frames_rejected {}, protocol_errors {}, members {}",
            s.frames_rejected,
            s.protocol_errors,
            s.members.len()
        );
        late.leave().await;
        friend.leave().await;
        node.leave().await;
    })
    .await;
}
