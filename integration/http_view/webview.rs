//! `--http`: a six-node overlay, its web view loaded in a real headless Chromium. The
//! page is loaded with `?once=1`, so it closes its event stream after the first status
//! and the browser can go idle; the DOM is then checked for every member and the drawn
//! tree, and a screenshot is taken.
//!
//! Without Chromium the test fails in CI (`CI=true`) and skips elsewhere. The screenshot
//! goes to `$WEBVIEW_SCREENSHOT` when set (`docs/webview.png` to refresh the one in the
//! documentation), else into the build's temporary directory.

use super::{Daemons, api_status, free_tcp_ports, get};
use crate::common::{TempDir, run_with_timeout};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const N: usize = 6;
const CHROMIUM: &str = "/usr/bin/chromium";

/// A headless Chromium command with a fresh profile and nothing running in the background.
fn chromium(profile: &Path) -> Command {
    let mut cmd = Command::new(CHROMIUM);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        // Virtual time: the page's timers run as fast as its fetches allow, and the
        // browser returns once the page is idle or this much page time passed.
        "--virtual-time-budget=20000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

/// The values of every `attr="..."` in `html`.
fn attr_values(html: &str, attr: &str) -> Vec<String> {
    let key = format!("{attr}=\"");
    html.match_indices(&key)
        .filter_map(|(i, _)| {
            let rest = &html[i + key.len()..];
            rest.find('"').map(|end| rest[..end].to_string())
        })
        .collect()
}

#[test]
fn the_web_view_shows_every_member_and_the_tree_in_chromium() {
    if !Path::new(CHROMIUM).exists() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !ci,
            "{CHROMIUM} is missing: the web view test needs it in CI"
        );
        println!("skipped: {CHROMIUM} is missing (install Debian's chromium package)");
        return;
    }
    let _alone = crate::common::real_network();
    let port = free_tcp_ports(1)[0];
    let mut extra = vec![Vec::new(); N];
    extra[0] = vec!["--http".to_string(), format!("127.0.0.1:{port}")];
    let mut d = Daemons::start("webview", &extra);

    let shorts: BTreeSet<String> = d.wait_for(
        "6 members alive, 6 connected trees, every RTT row",
        Duration::from_secs(60),
        || {
            let s = api_status(port)?;
            let alive: BTreeSet<String> = s
                .members
                .iter()
                .filter(|m| m.state == overlay::proto::Liveness::Alive)
                .map(|m| m.id.short())
                .collect();
            let connected = s.trees.iter().filter(|t| t.connected).count();
            if alive.len() != N || connected != N {
                return Err(format!(
                    "{} alive, {connected} trees connected",
                    alive.len()
                ));
            }
            // Every member's RTT row in, so the matrix is complete (rows are refreshed
            // every 2 s and the view reuses them for 5 s).
            let (code, body) = get(port, "/api/rtt")?;
            let rows: Vec<serde_json::Value> = serde_json::from_str(&body)
                .map_err(|e| format!("/api/rtt answered {code}: {e}"))?;
            let full = rows
                .iter()
                .filter(|r| r["rtt_ms"].as_array().is_some_and(|a| a.len() == N - 1))
                .count();
            if full != N {
                return Err(format!("{full} of {N} RTT rows complete"));
            }
            Ok(alive)
        },
    );
    // The page and its script, as a browser gets them.
    let (code, page) = get(port, "/").expect("GET /");
    assert!(
        code == 200 && page.contains("<svg id=\"tree\""),
        "{code}: {page}"
    );
    assert_eq!(get(port, "/page.js").map(|(c, _)| c), Ok(200));

    let url = format!("http://127.0.0.1:{port}/?once=1");
    let dom = d.wait_for("the page rendered the tree", Duration::from_secs(120), || {
        let profile = TempDir::new("chromium");
        let mut cmd = chromium(profile.path());
        cmd.arg("--dump-dom").arg(&url);
        let out = run_with_timeout(cmd, Duration::from_secs(60));
        let html = out.stdout;
        if !out.status.success() || !html.contains("data-rendered=\"tree\"") {
            let err: String = out.stderr.lines().rev().take(5).collect::<Vec<_>>().join("\n");
            return Err(format!("not rendered ({}); stderr ends: {err}", out.status));
        }
        let members: BTreeSet<String> = attr_values(&html, "data-member").into_iter().collect();
        let drawn: BTreeSet<String> = attr_values(&html, "data-tree-node").into_iter().collect();
        let detached = attr_values(&html, "data-depth").iter().filter(|d| *d == "-1").count();
        if members != shorts || drawn != shorts || detached > 0 {
            return Err(format!(
                "members {members:?}, tree nodes {drawn:?} ({detached} detached), want {shorts:?}"
            ));
        }
        Ok(html)
    });
    let edges = attr_values(&dom, "data-to").len();
    assert_eq!(
        edges,
        N - 1,
        "a spanning tree of {N} nodes has {} edges",
        N - 1
    );
    let rtt_cells = attr_values(&dom, "data-rtt-from").len();
    assert_eq!(rtt_cells, N * N, "the RTT matrix has a cell per pair");
    let unknown = dom.matches(">?</td>").count();
    assert_eq!(unknown, 0, "every RTT of the matrix is known");

    let shot: PathBuf = std::env::var_os("WEBVIEW_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("webview.png"));
    let _ = std::fs::remove_file(&shot);
    let profile = TempDir::new("chromium");
    let mut cmd = chromium(profile.path());
    cmd.arg("--window-size=1280,900")
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url);
    let out = run_with_timeout(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "screenshot failed: {}", out.stderr);
    let png = std::fs::read(&shot).unwrap_or_default();
    assert!(png.starts_with(b"\x89PNG"), "no PNG at {}", shot.display());
    println!(
        "web view screenshot: {} ({} bytes)",
        shot.display(),
        png.len()
    );
    d.check_alive();
}
