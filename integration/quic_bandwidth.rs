//! Bandwidth measured at run time over real QUIC: das-4 with its bandwidths enforced by the
//! emulated socket (the nodes never see the file), two nodes per cluster. Every node must
//! end up with the whole directed cluster-to-cluster matrix, each entry near what the
//! emulator enforces, and the trains must stay within their budget.
//!
//! `cargo test --release --test integration quic_bandwidth -- --nocapture` prints the figures.

use overlay::local::LocalOverlay;
use overlay::net::emulated::LatencyMap;
use overlay::proto::{Config, NodeId};
use overlay::topology::Topology;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// das-4 with two nodes per cluster, its bandwidths emulated, once every tree is
/// wide-area optimal.
pub(crate) async fn start_das4() -> (Topology, LocalOverlay) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/das-4.toml");
    let mut topo = Topology::load(&path).unwrap_or_else(|e| panic!("{e}"));
    for c in &mut topo.clusters {
        c.nodes = 2;
    }
    let overlay = start_emulated(&topo).await;
    (topo, overlay)
}

/// Every node of `topo` in this process over the emulated socket, its bandwidths
/// enforced, once every tree is wide-area optimal.
pub(crate) async fn start_emulated(topo: &Topology) -> LocalOverlay {
    let overlay = LocalOverlay::start_on(LatencyMap::with_bandwidth(topo.clone()), Config::wan())
        .await
        .expect("overlay starts");
    let (_, converged) = overlay
        .wait_optimal(Duration::from_secs(120), Duration::from_secs(1))
        .await;
    assert!(converged.is_some(), "trees never became wide-area optimal");
    overlay
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_learns_the_cluster_bandwidth_matrix_from_its_own_measurements() {
    let _net = crate::common::real_network();
    let (topo, overlay) = start_das4().await;
    let cluster_of: HashMap<NodeId, usize> = overlay
        .nodes
        .iter()
        .zip(&overlay.clusters)
        .map(|(n, c)| (n.id(), *c))
        .collect();
    let pairs = topo.clusters.len() * (topo.clusters.len() - 1);
    let start = Instant::now();
    let statuses = loop {
        let s = overlay.statuses().await;
        let complete = s
            .iter()
            .all(|st| st.bandwidth.iter().filter(|b| b.from != b.to).count() >= pairs);
        if complete || start.elapsed() > Duration::from_secs(60) {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let took = start.elapsed();
    let mut worst: f64 = 1.0;
    for st in &statuses {
        let inter: Vec<_> = st.bandwidth.iter().filter(|b| b.from != b.to).collect();
        assert_eq!(
            inter.len(),
            pairs,
            "{} lacks cluster pairs: {:?}",
            st.name,
            st.bandwidth
        );
        for b in inter {
            let (a, z) = (cluster_of[&b.from], cluster_of[&b.to]);
            let want = topo
                .bandwidth_mbit(a, z)
                .expect("the file gives every link");
            let ratio = b.mbit / want;
            worst = if (ratio - 1.0).abs() > (worst - 1.0).abs() {
                ratio
            } else {
                worst
            };
            if st.name == statuses[0].name {
                eprintln!(
                    "{} -> {}: measured {:.2} Mbit/s, emulated {want} ({:.2}), {} figures",
                    topo.clusters[a].name, topo.clusters[z].name, b.mbit, ratio, b.figures
                );
            }
            assert!(
                (0.6..=1.5).contains(&ratio),
                "{}: {} -> {} measured {:.2} Mbit/s where {want} is emulated",
                st.name,
                topo.clusters[a].name,
                topo.clusters[z].name,
                b.mbit
            );
        }
    }
    let elapsed = overlay.nodes[0]
        .status()
        .await
        .map(|s| s.uptime_ms)
        .unwrap_or(1) as f64
        / 1e3;
    let sent: Vec<u64> = statuses.iter().map(|s| s.probe_bytes_sent).collect();
    let per_node_s = sent.iter().sum::<u64>() as f64 / sent.len() as f64 / elapsed;
    eprintln!(
        "matrix complete everywhere {:.1} s after the trees converged; worst ratio {worst:.2}; \
         train bytes sent per node {per_node_s:.0} B/s on average over {elapsed:.0} s",
        took.as_secs_f64()
    );
    // The start-up rounds are the busiest; even they stay within the budget.
    let budget = Config::wan().bw_budget as f64;
    assert!(
        per_node_s <= budget,
        "probes cost {per_node_s:.0} B/s per node, budget {budget}"
    );
    overlay.shutdown().await;
}

/// Train bytes every node sent so far, added up.
pub(crate) async fn probe_bytes(overlay: &LocalOverlay) -> u64 {
    let mut total = 0;
    for n in &overlay.nodes {
        total += n.status().await.map_or(0, |s| s.probe_bytes_sent);
    }
    total
}

/// Waits until `node` holds an estimate for every directed pair of distinct clusters.
pub(crate) async fn wait_matrix(node: &overlay::api::Node, pairs: usize) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Ok(s) = node.status().await
            && s.bandwidth.iter().filter(|b| b.from != b.to).count() >= pairs
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("{} never measured every cluster pair", node.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_broadcast_is_striped_over_several_trees_and_delivered_whole_exactly_once() {
    let _net = crate::common::real_network();
    let (topo, overlay) = start_das4().await;
    let root = &overlay.nodes[0];
    let pairs = topo.clusters.len() * (topo.clusters.len() - 1);
    wait_matrix(root, pairs).await;
    let mut rx = tap(&overlay);
    // 1 MiB: small parts, few per tree; 4 MiB: many parts, handed out as they complete.
    let before = probe_bytes(&overlay).await;
    for mib in [1u32, 4] {
        let payload: Vec<u8> = (0..mib << 20).map(|i| (i * 7 + i / 4099) as u8).collect();
        striped_once(root, &overlay, &payload, &mut rx).await;
    }
    // Nodes moving bulk data neither ask for trains nor send them: at most a train asked
    // just before the transfer began goes out during it.
    let during = probe_bytes(&overlay).await - before;
    let one_train = overlay::proto::message::MAX_TRAIN_PACKETS as u64 * 1200;
    eprintln!("train bytes sent by all nodes during the striped broadcasts: {during}");
    assert!(
        during <= one_train,
        "{during} train bytes during the transfers"
    );
    overlay.shutdown().await;
}

/// One broadcast of `payload` from `root`: reported complete, delivered whole and once at
/// every node.
pub(crate) async fn striped_once(
    root: &overlay::api::Node,
    overlay: &LocalOverlay,
    payload: &[u8],
    rx: &mut Deliveries,
) {
    let started = Instant::now();
    let report = root
        .clone()
        .with_op_timeout(Duration::from_secs(30))
        .broadcast(payload.to_vec())
        .await
        .expect("broadcast");
    let took = started.elapsed();
    assert!(report.missing.is_empty(), "missing: {:?}", report.missing);
    assert_eq!(report.delivered.len(), overlay.nodes.len());
    // Every node delivers the whole payload, once, under the broadcast's number.
    let got = deliveries(rx, root.id(), report.op, payload, None, overlay.nodes.len()).await;
    assert_eq!(got.len(), overlay.nodes.len(), "deliveries: {got:?}");
    assert!(got.values().all(|&c| c == 1), "exactly once: {got:?}");
    let mbit = payload.len() as f64 * 8.0 / took.as_secs_f64() / 1e6;
    eprintln!(
        "{} MiB striped broadcast from {}: {:.2} s, {mbit:.2} Mbit/s",
        payload.len() >> 20,
        root.id(),
        took.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_crashing_mid_transfer_is_reported_missing_and_everyone_else_gets_it_once() {
    let _net = crate::common::real_network();
    let (topo, overlay) = start_das4().await;
    let root = overlay.nodes[0].clone();
    let pairs = topo.clusters.len() * (topo.clusters.len() - 1);
    wait_matrix(&root, pairs).await;
    // The first UvA node: VU's widest link goes to UvA, so the packed trees relay through it.
    let uva = topo
        .clusters
        .iter()
        .position(|c| c.name == "UvA")
        .expect("das-4 has UvA");
    let victim = overlay
        .clusters
        .iter()
        .position(|&c| c == uva)
        .expect("a UvA node");
    let victim_id = overlay.nodes[victim].id();
    let mut rx = tap(&overlay);
    let payload: Vec<u8> = (0..4u32 << 20).map(|i| (i * 13 + i / 8191) as u8).collect();
    let sending = {
        let (root, payload) = (root.clone(), payload.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let report = root
                .with_op_timeout(Duration::from_secs(30))
                .broadcast(payload)
                .await;
            (report, started.elapsed())
        })
    };
    // About a third of the way through (4 MiB at ~14 Mbit/s takes ~2.4 s).
    tokio::time::sleep(Duration::from_millis(800)).await;
    overlay.crash(victim);
    // No hang: the report comes within the operation's budget (30 s + 4 s of transfer).
    let (report, took) = tokio::time::timeout(Duration::from_secs(60), sending)
        .await
        .expect("the broadcast reports")
        .expect("task");
    let report = report.expect("broadcast");
    eprintln!(
        "relay {} crashed mid-transfer: report after {:.2} s, delivered {}, missing {:?}",
        victim_id,
        took.as_secs_f64(),
        report.delivered.len(),
        report.missing
    );
    assert!(
        report.missing == vec![victim_id] || report.missing.is_empty(),
        "only the crashed relay may be missing: {:?}",
        report.missing
    );
    let live = overlay.nodes.len() - 1;
    let others: Vec<NodeId> = report
        .delivered
        .iter()
        .copied()
        .filter(|d| *d != victim_id)
        .collect();
    assert_eq!(others.len(), live, "every live node delivered: {report:?}");
    // Every live node delivers the whole payload exactly once.
    let mut got = deliveries(&mut rx, root.id(), report.op, &payload, Some(victim), live).await;
    got.remove(&victim);
    assert_eq!(got.len(), live, "deliveries: {got:?}");
    assert!(got.values().all(|&c| c == 1), "exactly once: {got:?}");
    overlay.shutdown().await;
}

/// Every node's deliveries, tagged with the node's index.
pub(crate) type Deliveries = tokio::sync::mpsc::UnboundedReceiver<(usize, overlay::api::Delivery)>;

pub(crate) fn tap(overlay: &LocalOverlay) -> Deliveries {
    use futures::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, n) in overlay.nodes.iter().enumerate() {
        let mut s = Box::pin(n.deliveries());
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(d) = s.next().await {
                let d = d.expect("this reader keeps up: nothing is dropped for it");
                let _ = tx.send((i, d));
            }
        });
    }
    rx
}

/// How many times each node delivered `root`'s broadcasts: waits (10 s at most) until
/// `want` nodes other than `ignore` delivered broadcast `op`, each with `payload`, then
/// half a second more so that a second delivery would be counted.
async fn deliveries(
    rx: &mut Deliveries,
    root: NodeId,
    op: u64,
    payload: &[u8],
    ignore: Option<usize>,
    want: usize,
) -> HashMap<usize, usize> {
    let mut got: HashMap<usize, usize> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while got.keys().filter(|&&i| Some(i) != ignore).count() < want {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((i, d))) if d.root == root => {
                assert_eq!(d.op, op, "delivered under the whole's number");
                assert!(d.payload[..] == payload[..], "node {i} got other bytes");
                *got.entry(i).or_default() += 1;
            }
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok((i, d)) = rx.try_recv() {
        if d.root == root {
            *got.entry(i).or_default() += 1;
        }
    }
    got
}

/// A large allreduce's transfers count as bulk data, like a striped broadcast's streams:
/// no packet trains cross the links they fill, and what they carried is measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_allreduce_is_measured_and_sends_no_trains_while_it_runs() {
    let _net = crate::common::real_network();
    let (topo, overlay) = start_das4().await;
    let n = overlay.nodes.len();
    let pairs = topo.clusters.len() * (topo.clusters.len() - 1);
    for node in &overlay.nodes {
        wait_matrix(node, pairs).await;
    }
    let before = probe_bytes(&overlay).await;
    let len = 1 << 20;
    let start = Instant::now();
    let out = crate::quic_allreduce::all_call(&overlay.nodes, "measured", len, None).await;
    let took = start.elapsed();
    let during = probe_bytes(&overlay).await - before;
    let want = crate::quic_allreduce::expected(&(0..n).collect::<Vec<_>>(), len);
    assert!(out.iter().all(|(data, _)| data == &want));
    // At most a train asked just before the transfers began goes out during them.
    let one_train = overlay::proto::message::MAX_TRAIN_PACKETS as u64 * 1200;
    println!("4 MiB allreduce in {took:?}; train bytes sent meanwhile by all nodes: {during}");
    assert!(
        during <= one_train,
        "{during} train bytes during the transfers"
    );
    // The driver hands the rates over at its next wake-up (at most a second).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut measured = Vec::new();
    for node in &overlay.nodes {
        measured.push(node.status().await.expect("status").transfers_measured);
    }
    println!("transfer rates measured per node: {measured:?}");
    assert!(
        measured.iter().all(|m| *m > 0),
        "every node received several MiB: {measured:?}"
    );
    overlay.shutdown().await;
}
