//! The model's predictions on typed-in networks.

use super::*;

/// das-4's four clusters (VU 16, Leiden 8, UvA 8, Delft 8) as the nodes would
/// measure them: the figures are the topology file's, typed here because the model
/// is pure arithmetic over whatever was measured.
fn four(wide: [[f64; 4]; 4]) -> Network {
    let sizes = [16u64, 8, 8, 8];
    let mut next = 0;
    let groups = sizes
        .iter()
        .map(|s| {
            let g = (next..next + s).map(|i| NodeId::from_seed(9, i)).collect();
            next += s;
            g
        })
        .collect();
    Network {
        groups,
        wide_bps: wide
            .iter()
            .map(|r| r.iter().map(|m| m * 1e6).collect())
            .collect(),
        lan_bps: vec![400e6; 4],
        latency_s: vec![vec![3e-3; 4]; 4],
    }
}

#[test]
fn a_slow_cluster_owns_less_and_clustered_wins_on_large_vectors() {
    // Cluster 1 sends slowly to everyone.
    let net = four([
        [0.0, 5.0, 26.0, 7.0],
        [3.5, 0.0, 4.0, 3.0],
        [28.0, 6.0, 0.0, 7.5],
        [7.0, 4.0, 7.5, 0.0],
    ]);
    let f = shares(&net);
    assert!(f[1] < 0.1, "{f:?}");
    let p = predict_all(&net, 4 << 20, 4);
    let t = |a| p.iter().find(|x| x.algorithm == a).unwrap().seconds;
    assert!(
        t(Algorithm::Clustered) < 0.6 * t(Algorithm::Hierarchical),
        "{p:?}"
    );
    assert!(t(Algorithm::Hierarchical) < t(Algorithm::Ring), "{p:?}");
    let clustered = &p[0];
    assert_eq!(clustered.shares.iter().sum::<u64>(), 4 << 20);
}

#[test]
fn large_clusters_take_small_vectors_along_binomial_trees_and_large_ones_along_chains() {
    let mut net = four([[10.0; 4]; 4]);
    // Cluster 0 of 64 members, the others as they were.
    net.groups[0] = (0..64).map(|i| NodeId::from_seed(7, i)).collect();
    for algorithm in [Algorithm::Clustered, Algorithm::Hierarchical] {
        let small = predict(&net, algorithm, 16 << 10, 4);
        assert_eq!(small.inside[0], Inside::Binomial, "{small:?}");
        let large = predict(&net, algorithm, 16 << 20, 4);
        assert!(
            large.inside.iter().all(|i| *i == Inside::Chain),
            "{large:?}"
        );
    }
    // Two members: the same shape either way, and ties go to the chain.
    let pair = vec![vec![NodeId::from_seed(1, 1), NodeId::from_seed(1, 2)]];
    let net = Network::unmeasured(pair);
    assert_eq!(inside(&net, 0, 1e6, 1e5, 0.0, 2.0).0, Inside::Chain);
}

#[test]
fn equal_links_give_equal_shares_and_unmeasured_networks_still_predict() {
    let net = four([[10.0; 4]; 4]);
    let f = shares(&net);
    assert!(f.iter().all(|x| (x - 0.25).abs() < 0.01), "{f:?}");
    let groups = vec![vec![NodeId::from_seed(1, 1)], vec![NodeId::from_seed(1, 2)]];
    let net = Network::unmeasured(groups);
    assert!(!net.complete());
    assert!(
        predict_all(&net, 1000, 8)
            .iter()
            .all(|p| p.seconds.is_finite())
    );
}

/// das-4's links as in the topology file, Mbit/s.
const DAS4: [[f64; 4]; 4] = [
    [0.0, 5.0, 26.0, 7.0],
    [3.5, 0.0, 4.0, 3.0],
    [28.0, 6.0, 0.0, 7.5],
    [6.0, 4.5, 6.5, 0.0],
];

#[test]
fn a_reduce_into_a_poorly_connected_cluster_relays_and_das4_allreduce_does_not() {
    let net = four(DAS4);
    let len = 4 << 20;
    let bits = len as f64 * 32.0;
    // Leiden takes 5 + 6 + 4.5 Mbit/s in: no reduce into it can beat that.
    let bound = bits / 15.5e6;
    let leiden = Some(net.groups[1][0]);
    let p = predict_to(&net, Algorithm::Clustered, len, 4, leiden);
    assert!(!p.relays.is_empty(), "{p:?}");
    assert_eq!(p.shares[1], len, "Leiden owns every chunk");
    let trees = relay::plan(&net.wide_rates(), len, p.chunk, 4, Some(1));
    assert!(relay::busiest(&net.wide_rates(), &trees.load) < 1.05 * bound);
    // Straight to the owners, the best shares still leave a link far busier: a link
    // c -> d carries d's partials, and c's results when d is the root's cluster.
    let f = shares_to(&net, Some(1));
    let straight = (0..4)
        .flat_map(|c| (0..4).filter(move |d| *d != c).map(move |d| (c, d)))
        .map(|(c, d)| {
            let carried = f[d] + if d == 1 { f[c] } else { 0.0 };
            bits * carried / net.wide(c, d)
        })
        .fold(0.0, f64::max);
    assert!(straight > 1.2 * bound, "{straight} against {bound}");
    // An allreduce on das-4 gains too little from trees: straight to the owners.
    let p = predict_to(&net, Algorithm::Clustered, len, 4, None);
    assert!(p.relays.is_empty());
    // Two clusters: nothing to relay through.
    let two = Network {
        groups: net.groups[..2].to_vec(),
        wide_bps: vec![vec![0.0, 1e6], vec![1e6, 0.0]],
        lan_bps: vec![400e6; 2],
        latency_s: vec![vec![1e-3; 2]; 2],
    };
    let p = predict_to(&two, Algorithm::Clustered, len, 4, Some(net.groups[1][0]));
    assert!(p.relays.is_empty());
}
