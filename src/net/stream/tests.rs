//! Unit tests of the data plane's buffers.
use super::retention::MAX_KEPT_BYTES;
use super::*;

fn op(nonce: u64) -> OpId {
    OpId {
        root: NodeId::from_bytes([1; 16]),
        nonce,
    }
}

#[test]
fn prune_keeps_transfers_in_progress_and_the_roots_payload_until_its_deadline() {
    let Some(long_ago) = Instant::now().checked_sub(KEEP * 2) else {
        return; // a clock this young cannot have old buffers
    };
    let mut streams = Streams::new(Forwarding::Pipelined);
    // A slow transfer that started long ago and is still coming in.
    let slow = Buf::new(10, [0; 32], None);
    {
        let mut st = slow.state.lock().unwrap();
        st.receiving = true;
        st.keep_from = long_ago;
    }
    streams.bufs.insert(op(1), slow);
    // A payload that arrived long ago: no retry needs it any more.
    let old = Buf::new(1, [0; 32], Some(Bytes::from_static(b"x")));
    old.state.lock().unwrap().keep_from = long_ago;
    streams.bufs.insert(op(2), old);
    // The root's own payload of an operation with ten minutes to go.
    let ten_minutes = Duration::from_secs(600);
    let y = Bytes::from_static(b"y");
    streams.insert_complete(op(3), y, [0; 32], ten_minutes, None);
    streams.prune();
    assert!(
        streams.bufs.contains_key(&op(1)),
        "a transfer in progress was dropped"
    );
    assert!(
        !streams.bufs.contains_key(&op(2)),
        "an old payload was kept"
    );
    assert_eq!(streams.payload(op(3)).as_deref(), Some(&b"y"[..]));
}

#[test]
fn payloads_kept_for_retries_are_bounded_in_bytes_oldest_first() {
    let mut streams = Streams::new(Forwarding::Pipelined);
    let piece = Bytes::from(vec![7u8; (MAX_KEPT_BYTES / 3 + 1) as usize]);
    for n in 1..=4 {
        streams.insert_complete(op(n), piece.clone(), [0; 32], Duration::from_secs(n), None);
        streams.done_with(op(n));
    }
    // A payload still in use (not delivered, or its operation still running) stays.
    streams.insert_complete(op(5), piece.clone(), [0; 32], Duration::ZERO, None);
    // A transfer still coming in is never dropped, whatever its size.
    let big = Buf::new(MAX_KEPT_BYTES * 2, [0; 32], None);
    big.state.lock().unwrap().receiving = true;
    streams.bufs.insert(op(9), big);
    streams.prune();
    let held: Vec<u64> = (1..=5)
        .filter(|&n| streams.payload(op(n)).is_some())
        .collect();
    assert_eq!(
        held,
        vec![3, 4, 5],
        "the two newest done with fit under the bound"
    );
    assert!(streams.bufs.contains_key(&op(9)));
    assert!(streams.evicted.contains(&op(1)) && streams.evicted.contains(&op(2)));
}

#[test]
fn streams_coming_in_are_limited_per_peer_and_in_all() {
    let mut streams = Streams::new(Forwarding::Pipelined);
    let (p, q) = (NodeId::from_seed(4, 1), NodeId::from_seed(4, 2));
    let receiving = |from: NodeId, len: u64| {
        let b = Buf::new(len, [0; 32], None);
        {
            let mut st = b.state.lock().unwrap();
            st.receiving = true;
            st.from = Some(from);
        }
        b
    };
    for n in 0..MAX_RECEIVING_PER_PEER as u64 - 1 {
        streams.bufs.insert(op(n), receiving(p, 1));
    }
    assert!(streams.room_for(p, 1).is_ok());
    streams.bufs.insert(op(100), receiving(p, 1));
    assert!(
        streams.room_for(p, 1).is_err(),
        "one stream too many from p"
    );
    assert!(streams.room_for(q, 1).is_ok(), "q is not held back by p");
    // Bytes: p announced two of the largest payloads' worth; q may still bring its own.
    let mut streams = Streams::new(Forwarding::Pipelined);
    streams.bufs.insert(op(1), receiving(p, MAX_STREAM_PAYLOAD));
    assert!(streams.room_for(p, MAX_STREAM_PAYLOAD).is_ok());
    streams.bufs.insert(op(2), receiving(p, MAX_STREAM_PAYLOAD));
    assert!(streams.room_for(p, 1).is_err(), "p's bytes are spent");
    assert!(streams.room_for(q, MAX_STREAM_PAYLOAD).is_ok());
    streams.bufs.insert(op(3), receiving(q, MAX_STREAM_PAYLOAD));
    streams.bufs.insert(op(4), receiving(q, MAX_STREAM_PAYLOAD));
    let r = NodeId::from_seed(4, 3);
    assert!(streams.room_for(r, 1).is_err(), "the total is spent");
    // A payload that arrived no longer counts.
    streams
        .bufs
        .get(&op(4))
        .unwrap()
        .state
        .lock()
        .unwrap()
        .receiving = false;
    assert!(streams.room_for(r, 1).is_ok());
}
