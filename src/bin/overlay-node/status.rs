//! `overlay-node status`: members, discovered clusters and trees of a running node, via
//! its admin socket.

use anyhow::bail;
use overlay::admin::{AdminRequest, AdminResponse, request};
use overlay::api::{ClusterGroup, ClusterLevel};

/// Options of `status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    dir: crate::dirs::DataDirArg,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let AdminResponse::Status(s) = request(&args.dir.resolve()?, &AdminRequest::Status).await?
    else {
        bail!("unexpected answer from the node");
    };
    if args.json {
        crate::json::print_pretty(&s)?;
        return Ok(());
    }
    let name_of = |id: overlay::proto::NodeId| {
        s.members
            .iter()
            .find(|m| m.id == id)
            .map(|m| m.name.clone())
            .unwrap_or_else(|| id.short())
    };
    println!(
        "node {} ({}) on {}, up {:.1} s",
        s.id.short(),
        s.name,
        s.addr,
        s.uptime_ms as f64 / 1e3
    );
    println!(
        "one send costs {} us ({}), as the in-cluster plan assumes",
        s.send_cost_us,
        if s.send_cost_measured {
            "measured"
        } else {
            "configured; not measured yet"
        }
    );
    println!(
        "frames perhaps lost to a peer {} times; state sent again {} times",
        s.links_lost, s.resyncs_after_loss
    );
    println!("\nmembers ({}):", s.members.len());
    println!(
        "  {:<10} {:<16} {:<22} {:<8} {:>9}",
        "id", "name", "address", "state", "rtt ms"
    );
    for m in &s.members {
        let rtt = m
            .rtt_ms
            .map(|r| format!("{r:.2}"))
            .unwrap_or_else(|| "-".into());
        let state = format!("{:?}", m.state).to_lowercase();
        println!(
            "  {:<10} {:<16} {:<22} {:<8} {:>9}",
            m.id.short(),
            m.name,
            m.addr,
            state,
            rtt
        );
    }
    print_clusters(&s.clusters);
    print_bandwidth(&s.bandwidth, &name_of);
    println!(
        "  packet trains: {} bytes sent, {} received",
        s.probe_bytes_sent, s.probe_bytes_received
    );
    print_collectives(&s.collectives);
    println!("\ntrees ({}):", s.trees.len());
    println!(
        "  {:<16} {:<16} {:>9} {:>7}  children",
        "root", "parent", "dist ms", "serial"
    );
    for t in &s.trees {
        let parent = match (t.root == s.id, t.parent) {
            (true, _) => "(root)".to_string(),
            (false, Some(p)) => name_of(p),
            (false, None) => "(none)".to_string(),
        };
        let children: Vec<String> = t.children.iter().map(|c| name_of(*c)).collect();
        let dist = if t.connected {
            format!("{:.2}", t.dist_ms)
        } else {
            "-".into()
        };
        println!(
            "  {:<16} {:<16} {:>9} {:>7}  {}",
            name_of(t.root),
            parent,
            dist,
            t.serial,
            children.join(" ")
        );
    }
    println!(
        "\nconnections {}, tasks {}, frames in/out {}/{}, rejected frames {}, protocol errors {}, auth failures {}, refused connections {}, peers kept out {}, forged records {}, light joins {}, local health {}, dropped {}",
        s.connections,
        s.tasks,
        s.frames_in,
        s.frames_out,
        s.frames_rejected,
        s.protocol_errors,
        s.auth_failures,
        s.refused_connections,
        s.peers_kept_out,
        s.forged_records,
        s.light_joins,
        s.local_health,
        s.packets_dropped
    );
    if !s.traffic.is_empty() {
        let kinds: Vec<String> = s
            .traffic
            .iter()
            .map(|t| format!("{} {}/{}", t.kind, kib(t.bytes_in), kib(t.bytes_out)))
            .collect();
        println!("bytes in/out by kind: {}", kinds.join(", "));
    }
    let q = &s.quic;
    println!(
        "quic: {} datagrams sent, {} received; frames sent: {} ack, {} ping, {} stream; \
         {} packets lost",
        q.datagrams_sent,
        q.datagrams_received,
        q.ack_frames_sent,
        q.ping_frames_sent,
        q.stream_frames_sent,
        q.packets_lost
    );
    let l = &s.links;
    println!(
        "connections: {} dialed ({} to measure), {} accepted, {} duplicates; closed: {} idle \
         ({} measure-only), {} idle by the peer, {} otherwise",
        l.dialed,
        l.measure_dialed,
        l.accepted,
        l.duplicates,
        l.closed_idle,
        l.closed_idle_measure,
        l.closed_idle_by_peer,
        l.closed_otherwise
    );
    Ok(())
}

/// Bytes in KiB, one decimal.
fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// The cluster bandwidth matrix as this node measured and gathered it: the model large
/// broadcasts are planned with (clusters named by their first member).
fn print_bandwidth(
    links: &[overlay::api::ClusterBandwidth],
    name_of: &dyn Fn(overlay::proto::NodeId) -> String,
) {
    if links.is_empty() {
        println!("\nbandwidth: nothing measured yet");
        return;
    }
    println!("\nbandwidth between clusters (measured; clusters named by their first member):");
    println!(
        "  {:<16} {:<16} {:>9} {:>10} {:>8} {:>7}",
        "from", "to", "Mbit/s", "latency ms", "figures", "age s"
    );
    for l in links {
        let latency = l
            .latency_ms
            .map_or_else(|| "-".into(), |ms| format!("{ms:.2}"));
        println!(
            "  {:<16} {:<16} {:>9.2} {:>10} {:>8} {:>7.0}",
            name_of(l.from),
            name_of(l.to),
            l.mbit,
            latency,
            l.figures,
            l.age_s
        );
    }
}

/// The discovered groups, level by level: this node's group first (marked `*`), then the
/// others by size; member names wrapped under each group.
fn print_clusters(levels: &[ClusterLevel]) {
    if levels.is_empty() {
        println!("\nclusters: none discovered yet");
        return;
    }
    println!(
        "\nclusters ({} level{}, discovered from measured RTT; * marks this node's group):",
        levels.len(),
        if levels.len() == 1 { "" } else { "s" }
    );
    for l in levels {
        let what = if l.level == 1 { "clusters" } else { "groups" };
        println!("  level {}: {} {what}", l.level, l.groups.len());
        let mut groups: Vec<(&ClusterGroup, Vec<String>)> = l
            .groups
            .iter()
            .map(|g| {
                let mut names: Vec<String> = g
                    .names
                    .iter()
                    .zip(&g.members)
                    .map(|(n, id)| if n.is_empty() { id.short() } else { n.clone() })
                    .collect();
                names.sort_by(|a, b| natural(a).cmp(&natural(b)));
                (g, names)
            })
            .collect();
        // This node's group first, then the larger ones, then by their first name.
        groups.sort_by(|(a, an), (b, bn)| {
            (
                !a.mine,
                std::cmp::Reverse(a.members.len()),
                an.first().map(|n| natural(n)),
            )
                .cmp(&(
                    !b.mine,
                    std::cmp::Reverse(b.members.len()),
                    bn.first().map(|n| natural(n)),
                ))
        });
        for (g, names) in groups {
            let rtt = g
                .rtt_ms
                .map(|r| format!("rtt {r:.2} ms"))
                .unwrap_or_else(|| "alone".into());
            let mark = if g.mine { '*' } else { ' ' };
            let head = format!("  {mark} {:>3} members  {rtt:<14}", g.members.len());
            let indent = head.chars().count();
            for (i, line) in wrap(&names, 100 - indent).into_iter().enumerate() {
                let lead = if i == 0 { head.as_str() } else { "" };
                println!("{lead:<indent$}{line}");
            }
        }
    }
}

/// Sort key that puts `node-2` before `node-10`.
fn natural(name: &str) -> (&str, u64, &str) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, num) = name.split_at(name.len() - digits);
    (stem, num.parse().unwrap_or(0), name)
}

/// Names joined by spaces in lines of at most about `width` characters.
fn wrap(names: &[String], width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for n in names {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && line.len() + 1 + n.len() > width {
            lines.push(n.clone());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(n);
        }
    }
    lines
}

/// The decision table of the large collectives this node planned.
fn print_collectives(table: &[overlay::bulk::TuneEntry]) {
    if table.is_empty() {
        return;
    }
    println!(
        "\nlarge collectives planned here (per size class: chosen, predicted and measured s):"
    );
    for e in table {
        let mut cells = Vec::new();
        for a in e.predicted_s.keys().copied() {
            let p = e
                .predicted_s
                .get(&a)
                .map_or("-".into(), |s| format!("{s:.3}"));
            let m = e
                .measured_s
                .get(&a)
                .map_or("-".into(), |s| format!("{s:.3}"));
            cells.push(format!("{} {p}/{m}", a.name()));
        }
        println!(
            "  {} {:>9}: {:<12} {}  ({} calls)",
            e.collective,
            format!(">={} B", 1u64 << e.class),
            e.chosen.map_or("-", |a| a.name()),
            cells.join("  "),
            e.calls
        );
    }
}
