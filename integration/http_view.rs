//! The daemon's HTTP endpoints, from outside: `--metrics` scraped with a plain TCP
//! client and parsed line by line, the `--http` web view loaded in a headless Chromium.
//!
//! Run with `cargo test --release --test integration http_view -- --nocapture`.

use crate::common::{Proc, TempDir, free_udp_ports, node_cmd};
use overlay::api::NodeStatus;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod metrics;
mod webview;

/// Daemons on 127.0.0.1: the first starts the overlay, the others join it.
struct Daemons {
    /// Killed before the directory goes (field order is drop order).
    procs: Vec<Proc>,
    logs: Vec<PathBuf>,
    /// Each node's data directory (its admin socket is in it).
    dirs: Vec<PathBuf>,
    _base: TempDir,
}

impl Daemons {
    /// Starts `extra.len()` daemons, node `i` with the extra arguments `extra[i]`.
    fn start(tag: &str, extra: &[Vec<String>]) -> Daemons {
        let base = TempDir::new(tag);
        let root = base.path().to_path_buf();
        let ports = free_udp_ports(extra.len());
        let mut d = Daemons {
            procs: Vec::new(),
            logs: Vec::new(),
            dirs: Vec::new(),
            _base: base,
        };
        // The seed prints the token on stdout; its stderr goes to its log.
        let mut token = String::new();
        for (i, args) in extra.iter().enumerate() {
            let dir = root.join(format!("n{i}"));
            std::fs::create_dir_all(&dir).expect("data dir");
            let log = root.join(format!("n{i}.log"));
            let mut cmd = node_cmd();
            cmd.arg("--listen")
                .arg(format!("127.0.0.1:{}", ports[i]))
                .arg("--data-dir")
                .arg(&dir)
                .arg("--name")
                .arg(format!("n{i}"))
                .args(args)
                .stdin(Stdio::null());
            if i > 0 {
                cmd.arg("--join")
                    .arg(format!("127.0.0.1:{}", ports[0]))
                    .arg("--token")
                    .arg(&token);
            }
            let file = std::fs::File::create(&log).expect("log file");
            if i == 0 {
                cmd.stdout(Stdio::piped()).stderr(file);
            } else {
                cmd.stdout(file.try_clone().expect("log handle"))
                    .stderr(file);
            }
            let mut child = cmd.spawn().expect("spawning overlay-node");
            let stdout = child.stdout.take();
            d.procs.push(Proc::new(format!("n{i}"), child));
            d.logs.push(log);
            d.dirs.push(dir);
            if let Some(stdout) = stdout {
                token = seed_token(stdout, &d);
            }
        }
        d
    }

    /// Panics with the end of its log if a daemon has exited.
    fn check_alive(&mut self) {
        for (p, log) in self.procs.iter_mut().zip(&self.logs) {
            if let Some(status) = p.exited() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                panic!("{} exited ({status}); its log:\n{text}", p.name);
            }
        }
    }

    /// Polls `check` every 300 ms until it passes; panics with its last reason after
    /// `limit`.
    fn wait_for<T>(
        &mut self,
        what: &str,
        limit: Duration,
        mut check: impl FnMut() -> Result<T, String>,
    ) -> T {
        let start = Instant::now();
        loop {
            self.check_alive();
            match check() {
                Ok(v) => {
                    eprintln!("[{what}: after {} ms]", start.elapsed().as_millis());
                    return v;
                }
                Err(why) if start.elapsed() > limit => {
                    panic!("{what}: not reached within {limit:?}; last: {why}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(300)),
            }
        }
    }
}

/// Reads the seed's stdout until the join hint, returns the token; keeps draining the
/// pipe afterwards so the seed never blocks on it.
fn seed_token(stdout: std::process::ChildStdout, d: &Daemons) -> String {
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some((_, t)) = line.split_once("OVERLAY_TOKEN=") {
                    let token = t.split_whitespace().next().unwrap_or_default().to_string();
                    assert!(token.starts_with("ovl1-"), "unexpected token in {line:?}");
                    return token;
                }
            }
            Err(_) => {
                let log = std::fs::read_to_string(&d.logs[0]).unwrap_or_default();
                panic!("the seed printed no join command within 20 s; its log:\n{log}");
            }
        }
    }
}

/// `n` distinct free TCP ports on 127.0.0.1 (all listeners held until every port is known).
fn free_tcp_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("binding a TCP port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

/// Sends `request` (a whole request head) to 127.0.0.1:`port` and returns the status code
/// and the body; the server closes the connection after its answer.
fn raw_request(port: u16, request: &[u8]) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .map_err(|e| e.to_string())?;
    s.write_all(request).map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8(answer).map_err(|_| "answer is not UTF-8".to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no end of head")?;
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line in {head:?}"))?;
    let length: Option<usize> = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())?
    });
    if length.is_some_and(|n| n != body.len()) {
        return Err(format!(
            "Content-Length {length:?} but {} bytes",
            body.len()
        ));
    }
    Ok((status, body.to_string()))
}

/// `GET path` on 127.0.0.1:`port`.
fn get(port: u16, path: &str) -> Result<(u16, String), String> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    raw_request(port, req.as_bytes())
}

/// The status from the web view's `/api/status`.
fn api_status(port: u16) -> Result<NodeStatus, String> {
    match get(port, "/api/status")? {
        (200, body) => serde_json::from_str(&body).map_err(|e| format!("status JSON: {e}")),
        (code, body) => Err(format!("/api/status answered {code}: {body}")),
    }
}
