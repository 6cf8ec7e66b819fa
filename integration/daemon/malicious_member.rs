//! A member holding the token turns hostile: it sends maximum-size valid frames to one
//! node as fast as QUIC lets it, answers to an operation nobody runs, and dials again
//! whenever it is cut off, as a new identity each time. The node closes it once it has
//! sent 8 MiB of them and keeps its address out (for peers that are no members) for a
//! minute; its memory stays bounded meanwhile, nobody is declared dead, and the
//! other members' broadcasts keep reaching everyone. `OVERLAY_ATTACK_SECS` sets the
//! attack's length (default 15 s; the figures in docs/RELIABILITY.md are from a 60 s run).

use super::{median, rss_mib, trio};
use crate::common::{TempDir, real_network};
use futures::FutureExt;
use overlay::JoinToken;
use overlay::admin;
use overlay::net::auth::authenticate_with_token;
use overlay::net::frame::{MAX_FRAME_BYTES, write_frame};
use overlay::net::identity::{ANY_NODE, Identity};
use overlay::net::token::Role;
use overlay::proto::message::{CollectiveMessage, Message, OpId, UpPart};
use overlay::proto::{NodeId, Packet};
use std::net::SocketAddr;
use std::path::Path;
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

/// Broadcasts from the node in `dir`, one every 100 ms for `span`, each checked to reach
/// everyone: their times, and the peak RSS of process `pid` meanwhile (MiB).
async fn paced_broadcasts(dir: &Path, span: Duration, pid: u32) -> (Vec<Duration>, f64) {
    let (t, mut times, mut peak_rss) = (Instant::now(), Vec::new(), 0.0f64);
    while t.elapsed() < span {
        let s = Instant::now();
        let r = admin::broadcast(dir, b"paced").await.expect("broadcast");
        assert!(r.missing.is_empty(), "a broadcast missed {:?}", r.missing);
        times.push(s.elapsed());
        peak_rss = peak_rss.max(rss_mib(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (times, peak_rss)
}

/// What the attacker achieved.
#[derive(Default)]
struct Tally {
    /// Bytes of frames written.
    sent: AtomicU64,
    /// Connections that passed the token proof and were not refused at once.
    admitted: AtomicU64,
    /// Connections the target closed for messages nobody asked for.
    cut: AtomicU64,
    /// Attempts refused because this peer is kept out.
    kept_out: AtomicU64,
}

/// Floods `addr` with [`big_frame`]s on four streams; when the target closes the
/// connection, dials again (a tenth of a second later) as a new identity, until `stop`.
async fn attack(addr: SocketAddr, token: JoinToken, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
    let frame = big_frame();
    while !stop.load(Ordering::Relaxed) {
        // A fresh identity each time: the node id it was kept out under is no use to it.
        let identity = Identity::generate().expect("identity");
        let config = identity.client_config().expect("client config");
        let Ok(connecting) = endpoint.connect_with(config, addr, ANY_NODE) else {
            return;
        };
        let Ok(conn) = connecting.await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let proof = authenticate_with_token(&conn, &token, Role::Dialer, Duration::from_secs(5));
        if proof.await.is_ok() {
            // Several streams at once, as a flat-out sender would.
            let writers: Vec<_> = (0..4)
                .map(|_| {
                    let (conn, stop, tally, frame) =
                        (conn.clone(), stop.clone(), tally.clone(), frame.clone());
                    tokio::spawn(async move {
                        let Ok(mut send) = conn.open_uni().await else {
                            return;
                        };
                        while !stop.load(Ordering::Relaxed) {
                            if write_frame(&mut send, &frame).await.is_err() {
                                return;
                            }
                            tally.sent.fetch_add(frame.len() as u64, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for w in writers {
                let _ = w.await;
            }
        }
        let reason = conn.closed().now_or_never().map(|e| e.to_string());
        let reason = reason.unwrap_or_default();
        if reason.contains("nobody asked for") {
            tally.cut.fetch_add(1, Ordering::Relaxed);
            tally.admitted.fetch_add(1, Ordering::Relaxed);
        } else if reason.contains("kept out") {
            tally.kept_out.fetch_add(1, Ordering::Relaxed);
        } else if !stop.load(Ordering::Relaxed) {
            tally.admitted.fetch_add(1, Ordering::Relaxed);
        }
        conn.close(0u32.into(), b"");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    endpoint.close(0u32.into(), b"");
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
        // Paced as during the attack: back to back, every process stays awake and the
        // quiet figure would be lower for that alone.
        let quiet_for = Duration::from_secs(secs.clamp(5, 10));
        let (quiet, _) = paced_broadcasts(&b.dir, quiet_for, pid).await;
        let idle_rss = rss_mib(pid);

        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        // On a thread and runtime of its own: sharing the measuring client's runtime, its
        // encryption work would delay the client's own wake-ups and count as slowdown.
        let attacker = {
            let (stop, tally) = (stop.clone(), tally.clone());
            let token: overlay::JoinToken = token_text.parse().expect("token");
            let own = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("attacker runtime");
            std::thread::spawn(move || own.block_on(attack(addr, token, stop, tally)))
        };
        let t = Instant::now();
        let cpu_before = cpu_s(pid);
        let (during, peak_rss) = paced_broadcasts(&b.dir, Duration::from_secs(secs), pid).await;
        let peak_rss = peak_rss.max(idle_rss);
        let cpu = (cpu_s(pid) - cpu_before) / t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        attacker.join().expect("attacker thread");
        let mib = tally.sent.load(Ordering::Relaxed) as f64 / (1 << 20) as f64;
        let (admitted, cut, kept_out) = (
            tally.admitted.load(Ordering::Relaxed),
            tally.cut.load(Ordering::Relaxed),
            tally.kept_out.load(Ordering::Relaxed),
        );
        eprintln!(
            "{secs} s of maximum frames ({:.0} KiB each, 4 streams): {mib:.0} MiB written \
             ({:.2} MiB/s); {admitted} connections admitted, {cut} closed for messages nobody \
             asked for, {kept_out} attempts refused as kept out",
            big_frame().len() as f64 / 1024.0,
            mib / secs as f64
        );
        eprintln!(
            "target RSS: {idle_rss:.1} MiB idle, peak {peak_rss:.1} MiB during (+{:.1}); \
             target CPU during the attack: {:.0}% of a core",
            peak_rss - idle_rss,
            cpu * 100.0
        );
        let (quiet_ms, during_ms) = (
            median(quiet.clone()).as_secs_f64() * 1e3,
            median(during.clone()).as_secs_f64() * 1e3,
        );
        eprintln!(
            "other member's broadcasts, one every 100 ms: median {quiet_ms:.2} ms quiet ({} \
             runs), {during_ms:.2} ms during ({} runs, max {:.1} ms): {:.2}x",
            quiet.len(),
            during.len(),
            during
                .iter()
                .max()
                .copied()
                .unwrap_or_default()
                .as_secs_f64()
                * 1e3,
            during_ms / quiet_ms
        );
        // The attack ran (frames were written) and the target cut it off and kept it out.
        assert!(
            mib > 1.0,
            "the attack wrote only {mib:.1} MiB: it proves nothing"
        );
        assert!(
            cut >= 1,
            "the target never closed the attacker's connection"
        );
        if secs <= 50 {
            assert!(kept_out >= 1, "the attacker got back in at once");
            assert_eq!(admitted, 1, "the attacker got back in within the keep-out");
        }
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
