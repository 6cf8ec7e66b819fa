//! The exposition text parsed back line by line, as a scraper would.

use super::{Extra, render};
use overlay::api::{
    ClusterBandwidth, ClusterGroup, ClusterLevel, CollectiveStats, KindTraffic, LATENCY_BUCKETS_S,
    MemberInfo, NodeStatus, TreeInfo,
};
use overlay::proto::{Liveness, NodeId};
use std::collections::{BTreeMap, HashMap};

/// One parsed sample.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses a label set `k="v",...` (after `{`, up to and without `}`), undoing escapes.
fn labels(mut rest: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut out = BTreeMap::new();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((out, after));
        }
        let (key, after) = rest.split_once("=\"").ok_or("label without =\"")?;
        let key = key.trim_start_matches(',');
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad label name {key:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    c => return Err(format!("bad escape \\{c}")),
                },
                (i, '"') => break i + 1,
                (_, '\n') => return Err("raw newline in a label value".into()),
                (_, c) => value.push(c),
            }
        };
        if out.insert(key.to_string(), value).is_some() {
            return Err(format!("label {key} twice"));
        }
        rest = &after[end..];
    }
}

/// Parses the whole text; every sample must belong to a family whose TYPE came first.
fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let err = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if let Some(help) = line.strip_prefix("# HELP ") {
            let (name, _) = help
                .split_once(' ')
                .ok_or_else(|| err("HELP without text".into()))?;
            if types.contains_key(name) {
                return Err(err("HELP after the family's TYPE".into()));
            }
            continue;
        }
        if let Some(ty) = line.strip_prefix("# TYPE ") {
            let (name, kind) = ty
                .split_once(' ')
                .ok_or_else(|| err("TYPE without kind".into()))?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(err(format!("unknown type {kind}")));
            }
            if types.insert(name.to_string(), kind.to_string()).is_some() {
                return Err(err("family declared twice".into()));
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            return Err(err("unexpected comment or blank line".into()));
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| err("no value".into()))?;
        let name = &line[..name_end];
        if !name.starts_with("overlay_")
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(err(format!("bad metric name {name:?}")));
        }
        let (labels, rest) = match line[name_end..].strip_prefix('{') {
            Some(rest) => labels(rest).map_err(err)?,
            None => (BTreeMap::new(), &line[name_end..]),
        };
        let value = rest
            .strip_prefix(' ')
            .ok_or_else(|| err("no space before the value".into()))?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| err(format!("bad value {v:?}")))?,
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(name);
        if !types.contains_key(family) {
            return Err(err(format!("sample of {family} before its TYPE")));
        }
        if types[family] == "counter" && !name.ends_with("_total") {
            return Err(err("a counter's name should end in _total".into()));
        }
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(samples)
}

fn status() -> NodeStatus {
    let id = |n| NodeId::from_seed(7, n);
    let member = |n, name: &str, state, rtt_ms| MemberInfo {
        id: id(n),
        name: name.to_string(),
        addr: "127.0.0.1:7400".parse().expect("address"),
        state,
        rtt_ms,
        groups: Vec::new(),
    };
    NodeStatus {
        id: id(0),
        name: "me".into(),
        addr: "127.0.0.1:7400".parse().expect("address"),
        members: vec![
            member(0, "me", Liveness::Alive, None),
            member(
                1,
                "quote\" back\\slash\nnewline",
                Liveness::Alive,
                Some(1.5),
            ),
            member(2, "gone", Liveness::Dead, None),
        ],
        trees: vec![
            TreeInfo {
                root: id(0),
                parent: None,
                children: vec![id(1)],
                dist_ms: 0.0,
                serial: 3,
                connected: true,
            },
            TreeInfo {
                root: id(1),
                parent: Some(id(1)),
                children: vec![],
                dist_ms: 0.75,
                serial: 9,
                connected: true,
            },
        ],
        connections: 1,
        frames_in: 10,
        frames_out: 12,
        bytes_in: 1000,
        bytes_out: u64::MAX,
        frames_rejected: 0,
        protocol_errors: 1,
        auth_failures: 2,
        refused_connections: 7,
        peers_kept_out: 1,
        forged_records: 3,
        light_joins: 5,
        local_health: 2,
        links_opened: 4,
        packets_dropped: 0,
        uptime_ms: 1500,
        clusters: vec![ClusterLevel {
            level: 1,
            groups: vec![ClusterGroup {
                label: id(0),
                members: vec![id(0), id(1)],
                names: vec!["me".into(), "other".into()],
                rtt_ms: Some(1.5),
                mine: true,
            }],
        }],
        send_cost_us: 20,
        send_cost_measured: false,
        links_lost: 0,
        resyncs_after_loss: 0,
        bandwidth: vec![ClusterBandwidth {
            from: id(0),
            to: id(0),
            mbit: 940.0,
            figures: 3,
            age_s: 1.0,
            latency_ms: Some(0.5),
        }],
        probe_bytes_sent: 5,
        probe_bytes_received: 6,
        paths_saturated: 7,
        saturations_rechecked: 1,
        transfers_measured: 2,
        collectives: vec![],
        tasks: 42,
        traffic: vec![KindTraffic {
            kind: "advert".into(),
            frames_in: 3,
            bytes_in: 300,
            frames_out: 5,
            bytes_out: 700,
        }],
        quic: overlay::QuicCounters {
            datagrams_sent: 11,
            ack_frames_sent: 4,
            ..Default::default()
        },
        links: overlay::LinkCounters {
            dialed: 7,
            measure_dialed: 2,
            ..Default::default()
        },
        core: overlay::CoreStats::default(),
    }
}

#[test]
fn every_line_parses_and_the_values_are_the_status() {
    let mut buckets = vec![0; LATENCY_BUCKETS_S.len() + 1];
    buckets[3] = 2;
    buckets[LATENCY_BUCKETS_S.len()] = 1;
    let extra = Extra {
        parent_changes: 4,
        collectives: vec![CollectiveStats {
            kind: "gather".into(),
            completed: 3,
            failed: 1,
            buckets,
            sum_s: 40.0,
        }],
        own_tree: Some((3, 2)),
    };
    let text = render(&status(), &extra);
    let samples = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let one = |name: &str, labels: &[(&str, &str)]| {
        let found: Vec<&Sample> = samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        assert_eq!(found.len(), 1, "{name} {labels:?} in\n{text}");
        found[0].value
    };
    assert_eq!(one("overlay_members", &[("state", "alive")]), 2.0);
    assert_eq!(one("overlay_members", &[("state", "dead")]), 1.0);
    let odd = "quote\" back\\slash\nnewline";
    assert_eq!(
        one("overlay_peer_rtt_seconds", &[("peer_name", odd)]),
        0.0015
    );
    assert_eq!(one("overlay_trees", &[]), 2.0);
    assert_eq!(one("overlay_trees_without_parent", &[]), 0.0);
    assert_eq!(one("overlay_tree_dist_max_seconds", &[]), 0.00075);
    assert_eq!(one("overlay_parent_changes_total", &[]), 4.0);
    assert_eq!(
        one("overlay_bytes_total", &[("direction", "out")]),
        u64::MAX as f64
    );
    assert_eq!(one("overlay_auth_failures_total", &[]), 2.0);
    assert_eq!(one("overlay_refused_connections_total", &[]), 7.0);
    assert_eq!(one("overlay_peers_kept_out_total", &[]), 1.0);
    assert_eq!(one("overlay_light_joins_total", &[]), 5.0);
    assert_eq!(one("overlay_tokio_tasks", &[]), 42.0);
    assert_eq!(one("overlay_local_health", &[]), 2.0);
    assert_eq!(
        one("overlay_quic_datagrams_total", &[("direction", "out")]),
        11.0
    );
    assert_eq!(
        one("overlay_quic_frames_sent_total", &[("kind", "ack")]),
        4.0
    );
    let by = |how| [("how", how)];
    assert_eq!(one("overlay_links_opened_by_total", &by("dialed")), 5.0);
    assert_eq!(
        one("overlay_links_opened_by_total", &by("dialed_to_measure")),
        2.0
    );
    let advert = |d| [("kind", "advert"), ("direction", d)];
    assert_eq!(one("overlay_messages_total", &advert("in")), 3.0);
    assert_eq!(one("overlay_message_bytes_total", &advert("out")), 700.0);
    assert_eq!(one("overlay_own_tree_members", &[]), 3.0);
    assert_eq!(one("overlay_own_tree_depth", &[]), 2.0);
    assert_eq!(one("overlay_cluster_bandwidth_bits_per_second", &[]), 940e6);
    assert_eq!(
        one(
            "overlay_collectives_total",
            &[("kind", "gather"), ("outcome", "failed")]
        ),
        1.0
    );
    let bucket = "overlay_collective_duration_seconds_bucket";
    assert_eq!(one(bucket, &[("le", "0.005")]), 0.0);
    assert_eq!(one(bucket, &[("le", "0.01")]), 2.0);
    assert_eq!(one(bucket, &[("le", "30")]), 2.0);
    assert_eq!(one(bucket, &[("le", "+Inf")]), 3.0);
    assert_eq!(one("overlay_collective_duration_seconds_count", &[]), 3.0);
    assert!(text.ends_with('\n'));
}

#[test]
fn the_parser_catches_what_a_scraper_would_refuse() {
    for bad in [
        "overlay_x 1",
        "# TYPE overlay_x gauge\noverlay_x{a=\"b} 1",
        "# TYPE overlay_x gauge\noverlay_x{a=\"\\q\"} 1",
        "# TYPE overlay_x gauge\noverlay_x one",
        "# TYPE overlay_x counter\noverlay_x 1",
    ] {
        assert!(parse(bad).is_err(), "{bad:?} accepted");
    }
}
