//! One member floods the overlay with 20,000 small broadcasts through its admin socket
//! (8 clients at once), on real processes: the other members' broadcasts keep reaching
//! everyone during the flood and after it, and the flood itself is not left to time out.
//! (It used to fill the one relay table every operation shares: for about a minute after,
//! every broadcast from any node waited its full timeout and reported everyone missing.)

use super::{median, trio};
use crate::common::{TempDir, real_network};
use overlay::admin;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const FLOOD: u64 = 20_000;
const CLIENTS: u64 = 8;

/// Broadcasts from `dir` one after another while `go` holds (at least `min` of them),
/// returning each one's time; every one must reach all `n` members.
async fn steady(dir: PathBuf, n: usize, go: Arc<AtomicBool>, min: usize) -> Vec<Duration> {
    let mut times = Vec::new();
    while go.load(Ordering::Relaxed) || times.len() < min {
        let t = Instant::now();
        let r = admin::broadcast(&dir, b"steady")
            .await
            .expect("a broadcast");
        assert!(r.missing.is_empty(), "a broadcast missed {:?}", r.missing);
        assert_eq!(r.delivered.len(), n);
        times.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    times
}

#[test]
fn a_flood_of_broadcasts_from_one_member_leaves_the_others_working() {
    let _net = real_network();
    let base = TempDir::new("relay-flood");
    let [a, _b, c] = trio(base.path()); // b only relays: kept running to the end
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let quiet = steady(c.dir.clone(), 3, Arc::new(AtomicBool::new(false)), 20).await;

        let go = Arc::new(AtomicBool::new(true));
        let during = tokio::spawn(steady(c.dir.clone(), 3, go.clone(), 5));
        let (sent, refused, failed) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
        );
        let t = Instant::now();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let (dir, sent, refused, failed) =
                    (a.dir.clone(), sent.clone(), refused.clone(), failed.clone());
                tokio::spawn(async move {
                    for _ in 0..FLOOD / CLIENTS {
                        match admin::broadcast(&dir, b"flood").await {
                            Ok(r) if r.missing.is_empty() => sent.fetch_add(1, Ordering::Relaxed),
                            Ok(_) => failed.fetch_add(1, Ordering::Relaxed),
                            Err(e) if e.to_string().contains("busy") => {
                                refused.fetch_add(1, Ordering::Relaxed)
                            }
                            Err(e) => panic!("flood broadcast: {e}"),
                        };
                    }
                })
            })
            .collect();
        for c in clients {
            c.await.expect("flood client");
        }
        let flood_time = t.elapsed();
        // The old failure lasted about a minute after the flood: keep broadcasting for a
        // while after it too.
        tokio::time::sleep(Duration::from_secs(10)).await;
        go.store(false, Ordering::Relaxed);
        let during = during.await.expect("steady broadcasts");
        let (sent, refused, failed) = (
            sent.load(Ordering::Relaxed),
            refused.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
        );
        eprintln!(
            "flood: {FLOOD} broadcasts from {CLIENTS} clients in {:.1} s: {sent} reached \
             everyone, {refused} refused as busy, {failed} reported someone missing",
            flood_time.as_secs_f64()
        );
        eprintln!(
            "another member's broadcasts: median {:.2} ms quiet ({} runs), median {:.2} ms \
             max {:.1} ms during the flood and the 10 s after it ({} runs)",
            median(quiet.clone()).as_secs_f64() * 1e3,
            quiet.len(),
            median(during.clone()).as_secs_f64() * 1e3,
            during
                .iter()
                .max()
                .copied()
                .unwrap_or_default()
                .as_secs_f64()
                * 1e3,
            during.len()
        );
        assert_eq!(sent + refused + failed, FLOOD);
        assert_eq!(failed, 0, "a flood broadcast was left to time out");
    });
}
