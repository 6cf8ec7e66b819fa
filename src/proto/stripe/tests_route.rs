//! Unit tests of the routes and the cost model (a child of `tests`, kept apart for size).

use super::super::*;
use super::graph;
use crate::proto::id::NodeId;
use std::collections::HashSet;

fn id(k: u16) -> NodeId {
    let mut b = [0u8; 16];
    b[..2].copy_from_slice(&k.to_be_bytes());
    NodeId(b)
}

/// Clusters of the given sizes with ids numbered in a shuffled-looking order.
fn clusters(sizes: &[usize]) -> Vec<Vec<NodeId>> {
    let mut k = 0u16;
    sizes
        .iter()
        .map(|&s| {
            (0..s)
                .map(|_| {
                    k += 1;
                    id(k.wrapping_mul(7919) % 1000)
                })
                .rev()
                .collect()
        })
        .collect()
}

/// Every node but the root received exactly once, from a node that is reached from the root.
fn assert_spanning(route: &Route, root: NodeId, all: &[NodeId]) {
    let mut received: HashSet<NodeId> = HashSet::new();
    for &(_, to) in &route.edges {
        assert!(received.insert(to), "{to:?} received twice");
    }
    assert!(!received.contains(&root));
    assert_eq!(received.len() + 1, all.len());
    for &n in all {
        let mut at = n;
        for _ in 0..=all.len() {
            if at == root {
                break;
            }
            at = route.parent_of(at).expect("every node has a parent");
        }
        assert_eq!(at, root, "{n:?} does not reach the root");
    }
}

fn three_cluster_trees() -> Vec<Arborescence> {
    vec![
        Arborescence {
            parent: vec![None, Some(0), Some(0)],
            rate_bps: 2.0,
        },
        Arborescence {
            parent: vec![None, Some(0), Some(1)],
            rate_bps: 1.0,
        },
        Arborescence {
            parent: vec![None, Some(2), Some(0)],
            rate_bps: 1.0,
        },
    ]
}

#[test]
fn routes_span_and_rotate() {
    let cl = clusters(&[4, 5, 3]);
    let root = cl[0][2];
    let all: Vec<NodeId> = cl.iter().flatten().copied().collect();
    let trees = three_cluster_trees();
    for fanout in [0, 1, 2, 3, 10] {
        let routes = node_routes(root, &cl, 0, &trees, fanout);
        assert_eq!(routes.len(), trees.len());
        for r in &routes {
            assert_spanning(r, root, &all);
        }
        assert_eq!(routes, node_routes(root, &cl, 0, &trees, fanout));
    }
    let routes = node_routes(root, &cl, 0, &trees, 1);
    // Different stripes enter cluster 1 at different nodes.
    let entries: HashSet<NodeId> = routes
        .iter()
        .map(|r| r.edges.iter().find(|e| cl[1].contains(&e.1)).unwrap().1)
        .collect();
    assert_eq!(entries.len(), 3);
    // Wide-area children come first for every sender.
    for r in &routes {
        for &(from, _) in &r.edges {
            let kids: Vec<NodeId> = r.children_of(from).collect();
            let home = cl.iter().position(|c| c.contains(&from)).unwrap();
            let first_local = kids.iter().position(|k| cl[home].contains(k));
            if let Some(i) = first_local {
                assert!(kids[i..].iter().all(|k| cl[home].contains(k)), "{kids:?}");
            }
        }
    }
    // A chain: nobody but the entries sends to more than one node in its own cluster.
    for r in &routes {
        for n in &all {
            let home = cl.iter().position(|c| c.contains(n)).unwrap();
            assert!(r.children_of(*n).filter(|k| cl[home].contains(k)).count() <= 1);
        }
    }
}

#[test]
fn stripes_share_the_forwarding() {
    let cl = clusters(&[8]);
    let root = cl[0][0];
    let trees = vec![
        Arborescence {
            parent: vec![None],
            rate_bps: 1.0
        };
        3
    ];
    let routes = node_routes(root, &cl, 0, &trees, 2);
    let forwarders = |r: &Route| -> HashSet<NodeId> {
        r.edges.iter().map(|e| e.0).filter(|&n| n != root).collect()
    };
    let f0 = forwarders(&routes[0]);
    let f1 = forwarders(&routes[1]);
    assert!(!f0.is_empty());
    assert!(f0.is_disjoint(&f1), "{f0:?} {f1:?}");
}

#[test]
fn routes_survive_odd_inputs() {
    let cl = clusters(&[3, 0, 2, 2]);
    let root = id(9999);
    let mut all: Vec<NodeId> = cl.iter().flatten().copied().collect();
    all.push(root);
    let trees = vec![
        // Cluster 2 hangs off the empty cluster 1.
        Arborescence {
            parent: vec![None, Some(0), Some(1), Some(2)],
            rate_bps: 1.0,
        },
        // Malformed: 2 and 3 form a cycle, 1 has a parent out of range, too short.
        Arborescence {
            parent: vec![None, Some(7), Some(3)],
            rate_bps: 1.0,
        },
    ];
    for rc in [0, 9] {
        for r in node_routes(root, &cl, rc, &trees, 2) {
            assert_spanning(&r, root, &all);
        }
    }
    // Duplicates across clusters count once.
    let mut dup = cl.clone();
    dup[2].push(cl[0][0]);
    dup[3].push(cl[3][0]);
    for r in node_routes(root, &dup, 0, &trees, 1) {
        assert_spanning(&r, root, &all);
    }
    assert!(node_routes(root, &[], 0, &[], 1).is_empty());
}

/// Root 0, receivers 1 and 2: each direct arc is narrow, the detours are wide but slow.
fn striping_graph(detour_us: u32) -> ClusterGraph {
    let mut g = graph(vec![
        vec![0.0, 20e6, 20e6],
        vec![0.0, 0.0, 15e6],
        vec![0.0, 15e6, 0.0],
    ]);
    g.latency_us = vec![
        vec![0, 1000, 1000],
        vec![0, 0, detour_us],
        vec![0, detour_us, 0],
    ];
    g
}

#[test]
fn model_predictions() {
    assert_eq!(gap_s(1000.0, 8000.0, 0.5), 1.5);
    assert_eq!(gap_s(1000.0, 0.0, 0.5), f64::INFINITY);
    assert_eq!(gap_s(1000.0, f64::NAN, f64::NAN), f64::INFINITY);
    let g = striping_graph(5000);
    let single = widest_tree(&g, 0).unwrap();
    let trees = pack(&g, 0, 8);
    let total: f64 = trees.iter().map(|t| t.rate_bps).sum();
    assert!(total > 1.5 * single.rate_bps, "{trees:?} vs {single:?}");
    let seg = 64 * 1024;
    let mut last = (0.0, 0.0);
    for bytes in [0u64, 1, 1000, 1 << 16, 1 << 20, 1 << 24, 1 << 28] {
        let s = predict_tree_s(&g, &single, bytes, seg, 20e-6);
        let m = predict_striped_s(&g, &trees, bytes, seg, 20e-6);
        assert!(s >= last.0 && m >= last.1, "{bytes}: {s} {m}");
        last = (s, m);
    }
    assert!(last.1 < last.0 * 0.8, "{last:?}");
    assert_eq!(predict_striped_s(&g, &[], 100, seg, 0.0), f64::INFINITY);
    let dead = Arborescence {
        parent: single.parent.clone(),
        rate_bps: f64::NAN,
    };
    assert_eq!(predict_tree_s(&g, &dead, 100, seg, 0.0), f64::INFINITY);
}

#[test]
fn crossover_is_derived() {
    let at = |detour_us: u32, overhead: f64| {
        let g = striping_graph(detour_us);
        let single = widest_tree(&g, 0).unwrap();
        let trees = pack(&g, 0, 8);
        crossover_bytes(
            |b| predict_tree_s(&g, &single, b, 64 * 1024, overhead),
            |b| predict_striped_s(&g, &trees, b, 64 * 1024, overhead),
            1,
            1 << 32,
        )
    };
    let near = at(2_000, 20e-6).expect("striping pays off eventually");
    let far = at(20_000, 20e-6).expect("striping pays off eventually");
    assert!(near > 1 && far > near, "{near} {far}");
    assert_ne!(at(20_000, 1e-3), Some(far));
    // Never faster: None; faster from the start: lo.
    assert_eq!(crossover_bytes(|_| 1.0, |_| 2.0, 0, 100), None);
    assert_eq!(crossover_bytes(|_| 2.0, |_| 1.0, 5, 100), Some(5));
    assert_eq!(crossover_bytes(|b| b as f64, |_| 10.5, 0, 100), Some(11));
    assert_eq!(crossover_bytes(|b| b as f64, |_| 10.5, 50, 10), None);
}

#[test]
fn a_slow_deep_tree_never_makes_striping_look_slower() {
    // The das-4 case that chose one tree over seven: small trees of the packing, deep and
    // slow, whose share would be below one segment. Handed out earliest-finish, they only
    // carry what they can finish in time.
    let g = striping_graph(20_000);
    let trees = pack(&g, 0, 8);
    let mut with_slow = trees.clone();
    with_slow.push(Arborescence {
        parent: vec![None, Some(2), Some(0)],
        rate_bps: 0.2e6,
    });
    for bytes in [1u64 << 10, 1 << 16, 1 << 20, 1 << 22, 1 << 24] {
        let a = predict_striped_s(&g, &trees, bytes, 256 * 1024, 20e-6);
        let b = predict_striped_s(&g, &with_slow, bytes, 256 * 1024, 20e-6);
        assert!(
            b <= a + 1e-12,
            "{bytes}: {b} with the slow tree, {a} without"
        );
    }
    // A large payload is carried at the trees' summed rate, less nothing but their starts.
    let total: f64 = trees.iter().map(|t| t.rate_bps).sum();
    let t = predict_striped_s(&g, &trees, 1 << 28, 256 * 1024, 0.0);
    let ideal = (1u64 << 28) as f64 * 8.0 / total;
    assert!(t > ideal && t < ideal * 1.01, "{t} vs {ideal}");
}

#[test]
fn a_slow_lan_gets_a_chain_and_a_fast_one_a_wide_tree() {
    // Two clusters; the second (8 members) hears one 15 Mbit/s stripe from the first.
    let cl = clusters(&[2, 8]);
    let root = cl[0][0];
    let tree = Arborescence {
        parent: vec![None, Some(0)],
        rate_bps: 15e6,
    };
    let inside = |mbit: Option<f64>| {
        vec![
            Inside {
                bps: Some(400e6),
                latency_us: 20,
            },
            Inside {
                bps: mbit.map(|m| m * 1e6),
                latency_us: 20,
            },
        ]
    };
    let pick = |mbit| {
        choose_fanouts(
            root,
            &cl,
            0,
            std::slice::from_ref(&tree),
            &inside(mbit),
            16 << 20,
            32 << 10,
        )[1]
    };
    // 20 Mbit/s members: two children each would need 30, so only a chain keeps the rate.
    assert_eq!(pick(Some(20.0)), 1);
    // 400 Mbit/s: three or four children each cost nothing, and the tree is shallowest
    // (two levels for the seven others).
    assert!(pick(Some(400.0)) >= 3);
    // Not measured: the default.
    assert_eq!(pick(None), fanout::UNMEASURED);
    // And the routes follow the choice: with a chain every member but the last forwards once.
    let fan = choose_fanouts(
        root,
        &cl,
        0,
        std::slice::from_ref(&tree),
        &inside(Some(20.0)),
        16 << 20,
        32 << 10,
    );
    let routes = node_routes_with(root, &cl, 0, std::slice::from_ref(&tree), &|c| fan[c]);
    let all: Vec<NodeId> = cl.concat();
    assert_spanning(&routes[0], root, &all);
    for n in &cl[1] {
        assert!(routes[0].children_of(*n).filter(|c| c != n).count() <= 1);
    }
}
