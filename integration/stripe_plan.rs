//! The striping planner on the DAS-4 topology file: the packing reaches the Edmonds bound
//! (checked against a brute-force minimum cut) from every cluster, beats the widest single
//! tree, and its node routes span every node. Lives here, not in `proto`, because it reads
//! a topology file (`proto` may not import `topology`).

use overlay::proto::NodeId;
use overlay::proto::stripe::{
    Arborescence, ClusterGraph, max_flow_bound, node_routes, pack, widest_tree,
};
use overlay::topology::Topology;
use std::collections::HashSet;
use std::path::Path;

fn das4() -> Topology {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/das-4.toml");
    Topology::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// The cluster graph exactly as the file gives it: directed bandwidths and latencies.
fn graph(topo: &Topology) -> ClusterGraph {
    let n = topo.clusters.len();
    let cell = |i: usize, j: usize| match (i == j, topo.bandwidth_mbit(i, j)) {
        (false, Some(mbit)) => mbit * 1e6,
        _ => 0.0,
    };
    ClusterGraph {
        cap_bps: (0..n)
            .map(|i| (0..n).map(|j| cell(i, j)).collect())
            .collect(),
        latency_us: (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| topo.latency(i, j).as_micros().min(u128::from(u32::MAX)) as u32)
                    .collect()
            })
            .collect(),
    }
}

/// Min over receivers j of the min cut separating root from j, by enumerating every set S
/// with root in S and j outside: max-flow min-cut, computed without any flow code.
fn brute_bound(g: &ClusterGraph, root: usize) -> f64 {
    let n = g.n();
    let mut best = f64::INFINITY;
    for set in 0u32..(1 << n) {
        if set & (1 << root) == 0 || set == (1 << n) - 1 {
            continue;
        }
        let cut: f64 = (0..n)
            .filter(|&u| set & (1 << u) != 0)
            .flat_map(|u| {
                (0..n)
                    .filter(move |&v| set & (1 << v) == 0)
                    .map(move |v| (u, v))
            })
            .map(|(u, v)| g.cap(u, v))
            .sum();
        best = best.min(cut);
    }
    best
}

fn describe(topo: &Topology, t: &Arborescence) -> String {
    let arcs: Vec<String> = t
        .arcs()
        .map(|(p, c)| format!("{}->{}", topo.clusters[p].name, topo.clusters[c].name))
        .collect();
    format!("{:6.2} Mbit/s  {}", t.rate_bps / 1e6, arcs.join(" "))
}

#[test]
fn das4_packing_reaches_the_bound_from_every_cluster() {
    let topo = das4();
    let g = graph(&topo);
    for root in 0..g.n() {
        let name = &topo.clusters[root].name;
        let bound = max_flow_bound(&g, root);
        let brute = brute_bound(&g, root);
        assert!(
            (bound - brute).abs() <= 1e-6 * brute,
            "{name}: max flow {bound} vs min cut {brute}"
        );
        let trees = pack(&g, root, 8);
        assert!(!trees.is_empty() && trees.len() <= 8, "{name}: {trees:?}");
        let n = g.n();
        let mut load = vec![vec![0.0; n]; n];
        for t in &trees {
            assert!(t.rate_bps > 0.0);
            assert_eq!(t.root(), Some(root));
            for (p, c) in t.arcs() {
                load[p][c] += t.rate_bps;
            }
        }
        for (u, row) in load.iter().enumerate() {
            for (v, &l) in row.iter().enumerate() {
                assert!(l <= g.cap(u, v) * (1.0 + 1e-9), "{name}: {u}->{v}");
            }
        }
        let sum: f64 = trees.iter().map(|t| t.rate_bps).sum();
        let widest = widest_tree(&g, root).expect("every cluster reachable");
        eprintln!(
            "from {name}: {:.3} of bound {:.3} Mbit/s ({:.4}) in {} trees; widest single {}",
            sum / 1e6,
            bound / 1e6,
            sum / bound,
            trees.len(),
            describe(&topo, &widest)
        );
        for t in &trees {
            eprintln!("    {}", describe(&topo, t));
        }
        assert!(sum >= 0.97 * bound, "{name}: {sum} < 0.97 * {bound}");
        assert!(widest.rate_bps < sum, "{name}: widest {widest:?}");
    }
}

#[test]
fn das4_routes_span_every_node() {
    let topo = das4();
    let g = graph(&topo);
    let mut next = 0u16;
    let clusters: Vec<Vec<NodeId>> = topo
        .clusters
        .iter()
        .map(|c| {
            (0..c.nodes)
                .map(|_| {
                    next += 1;
                    let mut b = [0u8; 16];
                    b[..2].copy_from_slice(&next.wrapping_mul(40503).to_be_bytes());
                    NodeId(b)
                })
                .collect()
        })
        .collect();
    let all: Vec<NodeId> = clusters.iter().flatten().copied().collect();
    assert_eq!(all.len(), topo.node_count());
    for root_cluster in 0..g.n() {
        let root = clusters[root_cluster][1 % clusters[root_cluster].len()];
        let trees = pack(&g, root_cluster, 8);
        for fanout in [1, 2, 4] {
            let routes = node_routes(root, &clusters, root_cluster, &trees, fanout);
            assert_eq!(routes.len(), trees.len());
            for r in &routes {
                let receivers: HashSet<NodeId> = r.edges.iter().map(|e| e.1).collect();
                assert_eq!(receivers.len(), r.edges.len(), "a node receives twice");
                assert_eq!(receivers.len() + 1, all.len());
                assert!(!receivers.contains(&root));
                for &n in &all {
                    let mut at = n;
                    for _ in 0..all.len() {
                        if at == root {
                            break;
                        }
                        at = r.parent_of(at).expect("a parent");
                    }
                    assert_eq!(at, root, "cycle or detached node");
                }
                // Each cluster is entered once: the wide area carries a stripe once per
                // cluster edge of its tree, never twice to two members of one cluster.
                let cluster_of = |n: NodeId| clusters.iter().position(|c| c.contains(&n));
                let crossings = (r.edges.iter())
                    .filter(|(a, b)| cluster_of(*a) != cluster_of(*b))
                    .count();
                assert_eq!(crossings, g.n() - 1, "{:?}", r.edges);
            }
        }
    }
}
