//! `--metrics`: three daemons, one scraped as Prometheus would, every line parsed.

use super::{Daemons, free_tcp_ports, get, raw_request};
use crate::common::{node_cmd, run_with_timeout};
use std::collections::BTreeMap;
use std::time::Duration;

/// One sample line.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the exposition text: every line is a HELP, a TYPE or a sample of a family
/// declared before it; label values are unescaped; values are floats.
fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut types = BTreeMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let bad = |why: &str| format!("{why}: {line:?}");
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest
                .split_once(' ')
                .ok_or_else(|| bad("HELP without text"))?;
            if !name.starts_with("overlay_") || help.is_empty() {
                return Err(bad("bad HELP"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| bad("TYPE without type"))?;
            if !["counter", "gauge", "histogram"].contains(&kind) {
                return Err(bad("unknown type"));
            }
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        let end = line.find(['{', ' ']).ok_or_else(|| bad("no value"))?;
        let name = &line[..end];
        let mut rest = &line[end..];
        let mut labels = BTreeMap::new();
        if let Some(mut l) = rest.strip_prefix('{') {
            while !l.starts_with('}') {
                let (key, after) = l.split_once("=\"").ok_or_else(|| bad("label"))?;
                let mut value = String::new();
                let mut chars = after.char_indices();
                let close = loop {
                    match chars.next().ok_or_else(|| bad("open label value"))? {
                        (_, '\\') => match chars.next().ok_or_else(|| bad("escape"))?.1 {
                            'n' => value.push('\n'),
                            c @ ('"' | '\\') => value.push(c),
                            _ => return Err(bad("bad escape")),
                        },
                        (i, '"') => break i + 1,
                        (_, c) => value.push(c),
                    }
                };
                labels.insert(key.trim_start_matches(',').to_string(), value);
                l = &after[close..];
            }
            rest = &l[1..];
        }
        let value = rest.strip_prefix(' ').ok_or_else(|| bad("no value"))?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse::<f64>().map_err(|_| bad("value is not a float"))?,
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(name);
        if !types.contains_key(family) {
            return Err(bad("sample before its TYPE"));
        }
        out.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(out)
}

#[test]
fn three_daemons_export_members_and_rtts() {
    let _alone = crate::common::real_network();
    let ports = free_tcp_ports(3);
    let extra: Vec<Vec<String>> = ports
        .iter()
        .map(|p| vec!["--metrics".to_string(), format!("127.0.0.1:{p}")])
        .collect();
    let mut d = Daemons::start("metrics", &extra);
    let port = ports[0];
    let samples = d.wait_for(
        "3 members alive, 2 RTTs, 3 trees",
        Duration::from_secs(40),
        || {
            let (code, text) = get(port, "/metrics")?;
            if code != 200 {
                return Err(format!("/metrics answered {code}"));
            }
            let samples = parse(&text)?;
            let value = |name: &str, label: Option<(&str, &str)>| {
                samples
                    .iter()
                    .find(|s| {
                        s.name == name
                            && label.is_none_or(|(k, v)| s.labels.get(k).is_some_and(|x| x == v))
                    })
                    .map(|s| s.value)
            };
            let alive = value("overlay_members", Some(("state", "alive")));
            let rtts = samples
                .iter()
                .filter(|s| s.name == "overlay_peer_rtt_seconds")
                .count();
            let trees = value("overlay_trees", None);
            if alive != Some(3.0) || rtts != 2 || trees != Some(3.0) {
                return Err(format!(
                    "alive {alive:?}, {rtts} RTT samples, trees {trees:?}"
                ));
            }
            Ok(samples)
        },
    );
    let me = samples
        .iter()
        .find(|s| s.name == "overlay_info")
        .and_then(|s| s.labels.get("short_id").cloned())
        .expect("overlay_info has the short id");
    let peers: Vec<(&String, f64)> = samples
        .iter()
        .filter(|s| s.name == "overlay_peer_rtt_seconds")
        .map(|s| (&s.labels["peer"], s.value))
        .collect();
    for (peer, rtt) in &peers {
        assert_ne!(**peer, me, "no RTT to itself");
        assert!(
            *rtt > 0.0 && *rtt < 0.5,
            "loopback RTT of {rtt} s to {peer}"
        );
    }
    let names: Vec<&str> = samples
        .iter()
        .filter(|s| s.name == "overlay_peer_rtt_seconds")
        .map(|s| s.labels["peer_name"].as_str())
        .collect();
    assert!(names.contains(&"n1") && names.contains(&"n2"), "{names:?}");
    for counter in ["overlay_frames_total", "overlay_bytes_total"] {
        let n = samples
            .iter()
            .filter(|s| s.name == counter && s.value > 0.0)
            .count();
        assert_eq!(n, 2, "{counter} in and out are counting");
    }

    // A collective started at the node shows in its counters and histogram.
    let mut gather = node_cmd();
    gather
        .args(["gather", "info", "--data-dir"])
        .arg(&d.dirs[0]);
    let out = run_with_timeout(gather, Duration::from_secs(30));
    assert!(out.status.success(), "gather info: {}", out.stderr);
    let (_, text) = get(port, "/metrics").expect("scrape");
    let samples = parse(&text).expect("parses");
    let gathers = |name: &str, extra: Option<(&str, &str)>| {
        samples
            .iter()
            .filter(|s| s.name == name && s.labels.get("kind").is_some_and(|k| k == "gather"))
            .filter(|s| extra.is_none_or(|(k, v)| s.labels.get(k).is_some_and(|x| x == v)))
            .map(|s| s.value)
            .collect::<Vec<f64>>()
    };
    let completed = Some(("outcome", "completed"));
    assert_eq!(
        gathers("overlay_collectives_total", completed),
        [1.0],
        "{text}"
    );
    let name = "overlay_collective_duration_seconds_count";
    assert_eq!(gathers(name, None), [1.0]);

    // Bad input gets a status code, and the daemon keeps serving.
    let answers = [
        (get(port, "/nope"), 404),
        (raw_request(port, b"POST /metrics HTTP/1.1\r\n\r\n"), 405),
        (raw_request(port, b"\x16\x03\x01 not http\r\n\r\n"), 400),
        (raw_request(port, &[b'a'; 9000]), 431),
    ];
    for (answer, want) in answers {
        assert_eq!(answer.map(|(code, _)| code), Ok(want));
    }
    // The metrics-only listener serves no web view.
    assert_eq!(get(port, "/").map(|(c, _)| c), Ok(404));
    assert_eq!(get(ports[1], "/metrics").map(|(c, _)| c), Ok(200));
    d.check_alive();
}

#[test]
fn an_address_that_cannot_be_bound_fails_the_start() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("a TCP port");
    let addr = held.local_addr().expect("address");
    let dir = crate::common::TempDir::new("bindfail");
    let udp = crate::common::free_udp_ports(1)[0];
    let mut cmd = node_cmd();
    cmd.arg("--listen")
        .arg(format!("127.0.0.1:{udp}"))
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--metrics")
        .arg(addr.to_string());
    let out = run_with_timeout(cmd, Duration::from_secs(20));
    assert!(!out.status.success(), "started anyway: {}", out.stdout);
    let want = format!("--metrics {addr}: cannot listen: address already in use");
    assert!(out.stderr.contains(&want), "stderr: {}", out.stderr);
}
