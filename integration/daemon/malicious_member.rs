//! A member holding the token turns hostile: it sends maximum-size valid frames to one
//! node as fast as QUIC lets it. The node's memory stays bounded (its readers wait for the
//! driver, so flow control holds the sender back), nobody is declared dead, and the other
//! members' broadcasts keep reaching everyone. `OVERLAY_ATTACK_SECS` sets the attack's
//! length (default 15 s; the figures in docs/RELIABILITY.md are from a 60 s run).

use super::{median, rss_mib, trio};
use crate::common::{TempDir, real_network};
use overlay::admin;
use overlay::net::auth::authenticate_with_token;
use overlay::net::frame::{MAX_FRAME_BYTES, write_frame};
use overlay::net::identity::{ANY_NODE, Identity};
use overlay::net::token::Role;
use overlay::proto::message::{CollectiveMessage, Message, OpId, UpPart};
use overlay::proto::{NodeId, Packet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The largest valid packet that is not too large to frame: the answer to an operation
/// nobody runs, carrying one big gathered item.
/// CPU time a process used so far, seconds (user + system).
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = (rest.split_whitespace())
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0);
    ticks / 100.0
}

fn big_frame() -> Vec<u8> {
    let mut len = MAX_FRAME_BYTES - 200;
    loop {
        let part = UpPart {
            items: vec![(NodeId::from_seed(9, 9), vec![0x5a; len])],
            ..UpPart::default()
        };
        let packet = Packet::Overlay(Message::Collective(CollectiveMessage::Up {
            op: OpId {
                root: NodeId::from_seed(9, 1),
                nonce: 7,
            },
            last: true,
            part,
        }));
        match packet.encode() {
            Ok(bytes) if bytes.len() <= MAX_FRAME_BYTES => return bytes,
            _ => len -= 100,
        }
    }
}

#[test]
fn a_member_sending_maximum_frames_flat_out_changes_nothing_for_the_others() {
    let _net = real_network();
    let secs: u64 = std::env::var("OVERLAY_ATTACK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let base = TempDir::new("malicious");
    let [target, b, c] = trio(base.path());
    let addr = target.addr();
    let token_text = target.token();
    let pid = target.proc.pid();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let mut quiet = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let r = admin::broadcast(&b.dir, b"quiet").await.expect("broadcast");
            assert!(r.missing.is_empty());
            quiet.push(t.elapsed());
        }
        let idle_rss = rss_mib(pid);

        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        // On a thread and runtime of its own: sharing the measuring client's runtime, its
        // encryption work would delay the client's own wake-ups and count as slowdown.
        let attacker = {
            let (stop, sent) = (stop.clone(), sent.clone());
            let token: overlay::JoinToken = token_text.parse().expect("token");
            let own = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("attacker runtime");
            std::thread::spawn(move || {
                own.block_on(async move {
                    let identity = Identity::generate().expect("identity");
                    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr"))
                        .expect("endpoint");
                    let config = identity.client_config().expect("client config");
                    let conn = endpoint
                        .connect_with(config, addr, ANY_NODE)
                        .expect("connect")
                        .await
                        .expect("handshake");
                    authenticate_with_token(&conn, &token, Role::Dialer, Duration::from_secs(5))
                        .await
                        .expect("the attacker holds the token");
                    let frame = big_frame();
                    // Several streams at once, as a flat-out sender would.
                    let writers: Vec<_> = (0..4)
                        .map(|_| {
                            let (conn, stop, sent, frame) =
                                (conn.clone(), stop.clone(), sent.clone(), frame.clone());
                            tokio::spawn(async move {
                                let Ok(mut send) = conn.open_uni().await else {
                                    return;
                                };
                                while !stop.load(Ordering::Relaxed) {
                                    if write_frame(&mut send, &frame).await.is_err() {
                                        return;
                                    }
                                    sent.fetch_add(frame.len() as u64, Ordering::Relaxed);
                                }
                            })
                        })
                        .collect();
                    for w in writers {
                        let _ = w.await;
                    }
                    endpoint.close(0u32.into(), b"");
                })
            })
        };
        let t = Instant::now();
        let cpu_before = cpu_s(pid);
        let mut during = Vec::new();
        let mut peak_rss = idle_rss;
        while t.elapsed() < Duration::from_secs(secs) {
            let s = Instant::now();
            let r = admin::broadcast(&b.dir, b"during")
                .await
                .expect("broadcast");
            assert!(r.missing.is_empty(), "a broadcast missed {:?}", r.missing);
            during.push(s.elapsed());
            peak_rss = peak_rss.max(rss_mib(pid));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let cpu = (cpu_s(pid) - cpu_before) / t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        attacker.join().expect("attacker thread");
        let mib = sent.load(Ordering::Relaxed) as f64 / (1 << 20) as f64;
        eprintln!(
            "{secs} s of maximum frames ({:.0} KiB each, 4 streams): {mib:.0} MiB sent, \
             {:.1} MiB/s",
            big_frame().len() as f64 / 1024.0,
            mib / secs as f64
        );
        eprintln!(
            "target RSS: {idle_rss:.1} MiB idle, peak {peak_rss:.1} MiB during (+{:.1}); \
             target CPU during the attack: {:.0}% of a core",
            peak_rss - idle_rss,
            cpu * 100.0
        );
        eprintln!(
            "other member's broadcasts: median {:.2} ms quiet, {:.2} ms during ({} runs, max \
             {:.1} ms)",
            median(quiet).as_secs_f64() * 1e3,
            median(during.clone()).as_secs_f64() * 1e3,
            during.len(),
            during
                .iter()
                .max()
                .copied()
                .unwrap_or_default()
                .as_secs_f64()
                * 1e3
        );
        assert!(
            mib > 10.0,
            "the attack sent only {mib:.1} MiB: it proves nothing"
        );
        assert!(
            peak_rss - idle_rss < 64.0,
            "the target grew by {:.1} MiB",
            peak_rss - idle_rss
        );
    });
    for d in [&target, &b, &c] {
        let alive = d
            .members_json()
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["state"] == "alive").count());
        assert_eq!(alive, 3, "a member was declared dead during the attack");
    }
}
