//! A reader that never reads its deliveries costs bounded memory: while 10,000 broadcasts
//! arrive, its stream holds at most the node's delivery buffer, then reports how many it
//! dropped (`Lagged`); a second stream on the same node that keeps up gets every one of
//! them exactly once.

use futures::StreamExt;
use overlay::{Lagged, Node};
use std::collections::HashSet;
use std::time::{Duration, Instant};

const MESSAGES: usize = 10_000;
const BUFFER: usize = 256 << 10;

/// Reads `stream` until `want` distinct operations arrived, it ended, or nothing came for
/// `wait`: how many arrived. A delivery twice or a `Lagged` fails the test.
async fn distinct(stream: &mut overlay::api::Deliveries, want: usize, wait: Duration) -> usize {
    let mut seen = HashSet::new();
    while seen.len() < want {
        match tokio::time::timeout(wait, stream.next()).await {
            Ok(Some(Ok(d))) => assert!(seen.insert(d.op), "op {} delivered twice", d.op),
            Ok(Some(Err(lagged))) => panic!("a reader that keeps up lagged: {lagged}"),
            Ok(None) | Err(_) => break,
        }
    }
    seen.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_never_reads_holds_bounded_memory_and_is_told_what_it_lost() {
    let _net = crate::common::real_network();
    let any = "127.0.0.1:0".parse().unwrap();
    let a = Node::builder().listen(any).start().await.expect("a");
    let b = Node::builder()
        .listen(any)
        .join(a.local_addr())
        .token(a.token())
        .delivery_buffer(BUFFER)
        .start()
        .await
        .expect("b");
    b.ready_within(Duration::from_secs(20))
        .await
        .expect("b ready");
    a.ready_within(Duration::from_secs(20))
        .await
        .expect("a ready");

    let mut idle = b.deliveries();
    let mut reader = b.deliveries();
    let counted =
        tokio::spawn(async move { distinct(&mut reader, MESSAGES, Duration::from_secs(60)).await });

    let t0 = Instant::now();
    let payload = vec![7u8; 1024];
    for batch in 0..MESSAGES / 16 {
        let sends = (0..16).map(|_| a.broadcast(payload.clone()));
        for r in futures::future::join_all(sends).await {
            let r = r.unwrap_or_else(|e| panic!("broadcast in batch {batch}: {e}"));
            assert!(
                r.missing.is_empty(),
                "batch {batch}: {:?} missing",
                r.missing
            );
        }
    }
    let got = counted.await.expect("reader");
    println!(
        "{MESSAGES} broadcasts of 1 KiB in {:?}; the reader got {got}; the idle stream holds {} bytes",
        t0.elapsed(),
        idle.queued_bytes()
    );
    assert_eq!(got, MESSAGES, "the reader that keeps up missed some");
    assert!(
        idle.queued_bytes() <= BUFFER,
        "{} bytes held for a stream nobody reads (bound {BUFFER})",
        idle.queued_bytes()
    );

    // Reading it now: first how many were dropped, then what it holds; together, all.
    let first = idle.next().await.expect("an item");
    let Err(Lagged(missed)) = first else {
        panic!("expected Lagged first, got {first:?}");
    };
    let mut held = 0u64;
    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_millis(200), idle.next()).await {
        item.expect("one report of the loss, then deliveries");
        held += 1;
    }
    println!("the idle stream held {held} deliveries and reported {missed} dropped");
    assert_eq!(held + missed, MESSAGES as u64);
    assert!(held as usize * 1024 <= BUFFER);
    a.leave().await;
    b.leave().await;
}

/// A stream taken while the driver has a queue of work still gets every delivery made
/// after it was taken. On a one-thread runtime the driver runs only when this task waits,
/// so the 100 broadcasts below are all queued, none delivered, when `deliveries()` is
/// called. The stream used to be subscribed by a command queued behind them, and missed
/// every one of them without a word.
#[tokio::test(flavor = "current_thread")]
async fn a_stream_taken_while_the_driver_is_busy_misses_nothing_delivered_after() {
    use futures::stream::FuturesUnordered;
    const QUEUED: usize = 100;
    let any = "127.0.0.1:0".parse().unwrap();
    let a = Node::builder().listen(any).start().await.expect("a");
    let mut sends: FuturesUnordered<_> = (0..QUEUED).map(|i| a.broadcast(vec![i as u8])).collect();
    // Polled once each: the first commands fill the driver's queue, the rest wait for room.
    assert!(futures::poll!(sends.next()).is_pending());
    let mut stream = a.deliveries();
    let mut reports = 0;
    while let Some(r) = sends.next().await {
        assert!(r.expect("broadcast").missing.is_empty());
        reports += 1;
    }
    assert_eq!(reports, QUEUED);
    assert_eq!(
        distinct(&mut stream, QUEUED, Duration::from_secs(5)).await,
        QUEUED,
        "deliveries made after the stream was taken were missed"
    );
}

/// A node that left ends its delivery streams, also one taken after it left: an
/// application reading them until they end must not wait for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivery_streams_of_a_node_that_left_end() {
    let any = "127.0.0.1:0".parse().unwrap();
    let a = Node::builder().listen(any).start().await.expect("a");
    let mut before = a.deliveries();
    a.leave().await;
    let ended = tokio::time::timeout(Duration::from_secs(10), before.next()).await;
    assert!(
        matches!(ended, Ok(None)),
        "the stream taken before did not end"
    );
    let mut after = a.deliveries();
    let ended = tokio::time::timeout(Duration::from_secs(10), after.next()).await;
    assert!(
        matches!(ended, Ok(None)),
        "a stream taken after did not end"
    );
}
