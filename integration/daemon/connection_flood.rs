//! An attacker without the token opens QUIC connections to one node at
//! `OVERLAY_FLOOD_RATE` per second (default 1,000) for `OVERLAY_ATTACK_SECS` (default 10)
//! from `OVERLAY_FLOOD_SOURCES` addresses of its own (default 16: 127.0.0.2 and up, so the
//! per-address cap alone does not stop it): a fresh identity for every connection; three
//! in four send garbage on a stream, the fourth is held open without a word. Side by side in
//! one run: another member's broadcasts for 10 s before and during the attack, the target's
//! RSS every second, every member's view of the others, and a newcomer joining through the
//! target during the attack.

use super::{Daemon, median, rss_mib, trio};
use crate::common::{TempDir, real_network};
use overlay::admin::{self, AdminRequest, AdminResponse};
use overlay::api::NodeStatus;
use overlay::net::identity::{ANY_NODE, Identity};
use overlay::proto::Liveness;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn status(d: &Daemon) -> NodeStatus {
    match admin::request(&d.dir, &AdminRequest::Status).await {
        Ok(AdminResponse::Status(s)) => *s,
        other => panic!("status: {other:?}"),
    }
}

/// What the attacker did.
#[derive(Default)]
struct Tally {
    attempts: AtomicU64,
    handshakes: AtomicU64,
    refused: AtomicU64,
    held: AtomicU64,
}

/// Connection attempts at `rate` per second until `stop`, each on a task of its own, from
/// `sources` addresses in turn (127.0.0.2 and up).
async fn attack(
    addr: std::net::SocketAddr,
    rate: u64,
    sources: u8,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) {
    let endpoints: Vec<quinn::Endpoint> = (0..sources.max(1))
        .map(|k| {
            let from = std::net::SocketAddr::from(([127, 0, 0, 2 + k], 0));
            quinn::Endpoint::client(from).expect("endpoint")
        })
        .collect();
    let in_flight = Arc::new(tokio::sync::Semaphore::new(4000));
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            continue;
        };
        i += 1;
        tally.attempts.fetch_add(1, Ordering::Relaxed);
        let endpoint = endpoints[i as usize % endpoints.len()].clone();
        let tally = tally.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let config = Identity::generate()
                .expect("identity")
                .client_config()
                .expect("client config");
            let Ok(connecting) = endpoint.connect_with(config, addr, ANY_NODE) else {
                return;
            };
            let conn = match tokio::time::timeout(Duration::from_secs(5), connecting).await {
                Ok(Ok(conn)) => conn,
                _ => {
                    tally.refused.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            tally.handshakes.fetch_add(1, Ordering::Relaxed);
            if i.is_multiple_of(4) {
                tally.held.fetch_add(1, Ordering::Relaxed);
            } else if let Ok(mut send) = conn.open_uni().await {
                let _ = send.write_all(&[0x17; 1024]).await;
                let _ = send.finish();
            }
            // Until the node gives up on the token proof and closes it.
            let _ = tokio::time::timeout(Duration::from_secs(10), conn.closed()).await;
        });
    }
    for e in endpoints {
        e.close(0u32.into(), b"");
    }
}

#[test]
fn an_attacker_without_the_token_at_a_thousand_connections_a_second_changes_nothing() {
    let _net = real_network();
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (rate, secs) = (
        env("OVERLAY_FLOOD_RATE", 1000),
        env("OVERLAY_ATTACK_SECS", 10),
    );
    let sources = env("OVERLAY_FLOOD_SOURCES", 16).clamp(1, 200) as u8;
    let base = TempDir::new("connflood");
    let [target, b, c] = trio(base.path());
    let addr = target.addr();
    let args = target.join_args(base.path());
    let join: Vec<&str> = args.iter().map(String::as_str).collect();
    let pid = target.proc.pid();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (quiet, idle_rss) = runtime.block_on(async {
        let mut quiet = Vec::new();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            let s = Instant::now();
            let r = admin::broadcast(&b.dir, b"quiet").await.expect("broadcast");
            assert!(r.missing.is_empty());
            quiet.push(s.elapsed());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (quiet, rss_mib(pid))
    });
    let refused_before = runtime.block_on(status(&target)).refused_connections;

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    // On a thread and runtime of its own, as another machine would be.
    let attacker = {
        let (stop, tally) = (stop.clone(), tally.clone());
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("attacker runtime")
                .block_on(attack(addr, rate, sources, stop, tally))
        })
    };
    let mut newcomer = None;
    let (during, rss, dead) = runtime.block_on(async {
        let t = Instant::now();
        let (mut during, mut rss, mut dead) = (Vec::new(), Vec::new(), Vec::new());
        let mut next_sample = Instant::now();
        while t.elapsed() < Duration::from_secs(secs) {
            if newcomer.is_none() && t.elapsed() >= Duration::from_secs(secs / 2) {
                let joined = Instant::now();
                let d = Daemon::start(base.path(), "d", &join);
                d.wait_alive(4);
                newcomer = Some((d, joined.elapsed()));
            }
            let s = Instant::now();
            let r = admin::broadcast(&b.dir, b"during")
                .await
                .expect("broadcast");
            assert!(r.missing.is_empty(), "a broadcast missed {:?}", r.missing);
            during.push(s.elapsed());
            if Instant::now() >= next_sample {
                next_sample += Duration::from_secs(1);
                rss.push(rss_mib(pid));
                for d in [&target, &b, &c] {
                    let s = status(d).await;
                    dead.extend(
                        (s.members.iter())
                            .filter(|m| m.state != Liveness::Alive)
                            .map(|m| format!("{} sees {} {:?}", s.name, m.name, m.state)),
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (during, rss, dead)
    });
    stop.store(true, Ordering::Relaxed);
    attacker.join().expect("attacker thread");
    let refused = runtime.block_on(status(&target)).refused_connections - refused_before;
    let attempts = tally.attempts.load(Ordering::Relaxed);
    let (newcomer, join_took) = newcomer.expect("the newcomer joined");
    let log_lines = target.log_text().lines().count();

    eprintln!(
        "attacker: {attempts} connection attempts in {secs} s ({:.0}/s) from {sources} addresses, {} completed the \
         handshake ({} then held silent), {} refused or timed out; the target counted {refused} \
         refused",
        attempts as f64 / secs as f64,
        tally.handshakes.load(Ordering::Relaxed),
        tally.held.load(Ordering::Relaxed),
        tally.refused.load(Ordering::Relaxed),
    );
    let peak = rss.iter().copied().fold(idle_rss, f64::max);
    let series: Vec<String> = rss.iter().map(|r| format!("{r:.1}")).collect();
    eprintln!(
        "target RSS: {idle_rss:.1} MiB before, every second during: {} (peak +{:.1} MiB)",
        series.join(" "),
        peak - idle_rss
    );
    eprintln!(
        "other member's broadcasts: median {:.2} ms quiet ({} runs), {:.2} ms during ({} runs)",
        ms(median(quiet.clone())),
        quiet.len(),
        ms(median(during.clone())),
        during.len()
    );
    eprintln!(
        "a newcomer joined through the target during the attack in {} ms; target log: {log_lines} \
         lines; members seen not alive: {}",
        join_took.as_millis(),
        dead.len()
    );
    assert!(dead.is_empty(), "false suspicion or death: {dead:?}");
    assert!(
        attempts as f64 >= 0.5 * (rate * secs) as f64,
        "the attacker made only {attempts} attempts: it proves nothing"
    );
    assert!(
        peak - idle_rss < 64.0,
        "RSS grew by {:.1} MiB",
        peak - idle_rss
    );
    assert!(
        log_lines < 40,
        "the target logged {log_lines} lines:\n{}",
        target.log_text()
    );
    drop(newcomer);
}
