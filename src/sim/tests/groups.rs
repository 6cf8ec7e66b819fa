//! The verdict's groups: declared clusters merged where latency cannot tell them apart,
//! and trees judged on them.

use crate::proto::Config;
use crate::proto::clusters::ClusterParams;
use crate::sim::invariants::ParentView;
use crate::sim::metrics::{self, Layout, Scratch, TreeMetrics};
use crate::sim::{Groups, NetModel};
use crate::topology::Topology;
use std::time::Duration;

fn us(v: u64) -> Duration {
    Duration::from_micros(v)
}

/// A symmetric network of clusters with `intra[c]` inside and `between(a, b)` across, two
/// nodes per cluster, optional sites.
fn net(intra: &[u64], between: impl Fn(usize, usize) -> u64, sites: Option<&[usize]>) -> NetModel {
    let k = intra.len();
    let lat: Vec<Vec<Duration>> = (0..k)
        .map(|a| {
            (0..k)
                .map(|b| us(if a == b { intra[a] } else { between(a, b) }))
                .collect()
        })
        .collect();
    let names: Vec<String> = (0..k).map(|c| format!("K{c}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let initial: Vec<usize> = (0..k).flat_map(|c| [c, c]).collect();
    NetModel::new("hand", &names, &lat, sites, &initial)
}

/// Every shipped topology but split-site keeps its declared clusters and sites as the
/// verdict's groups, under every preset and dilated as the QUIC benchmarks dilate it: so
/// their verdicts and figures are the ones judged on the declared clusters.
#[test]
fn shipped_topologies_keep_their_declared_clusters() {
    let presets = [Config::wan(), Config::lan(), Config::test()];
    for name in Topology::builtin_names().filter(|&n| n != "split-site") {
        let topo = Topology::builtin(name).expect("shipped");
        for cfg in &presets {
            let g = NetModel::from_topology(&topo).grouped(&cfg.cluster_params());
            assert!(g.groups().is_declared(), "{name}: {:?}", g.groups());
        }
        for k in [20, 40] {
            let params = Config::wan().dilated(k).cluster_params();
            let g = NetModel::from_topology(&topo.dilated(k)).grouped(&params);
            assert!(g.groups().is_declared(), "{name} x{k}: {:?}", g.groups());
        }
    }
}

/// split-site: the three lyon clusters (30-60 µs apart) form one group; rennes and nancy
/// stay apart, and so do the sites.
#[test]
fn split_site_merges_the_three_lyon_clusters() {
    let topo = Topology::builtin("split-site").expect("shipped");
    let net = NetModel::from_topology(&topo).grouped(&Config::wan().cluster_params());
    let lyon: Vec<usize> = ["lyon-a", "lyon-b", "lyon-c"]
        .iter()
        .map(|n| topo.cluster_index(n).expect("a cluster"))
        .collect();
    assert_eq!(net.groups().merged(), vec![lyon.clone()]);
    assert_eq!(net.group_name(lyon[2]), "lyon-a+lyon-b+lyon-c");
    for c in 0..net.clusters() {
        assert_eq!(
            net.groups().site_of(c),
            net.site_of(c),
            "sites stay declared"
        );
    }
    // The old verdict's grouping, for contrast.
    assert!(!net.groups().is_declared());
}

/// The rule is the nodes' own, not a pairwise threshold: a merge folds into the one above
/// unless that is more than `gap` times higher. K0-K1 at 0.9 ms RTT (not above twice the
/// 0.5 ms floor: one group to a pairwise rule too), K2 joining at 1.9 ms (more than twice
/// 0.9 ms): the group {K0, K1} stands. With K2 at 1.8 ms instead, {K0, K1} folds into the
/// merge of everyone, and the nodes of K0 and K1 stand alone (loose), as the nodes see them;
/// a pairwise rule would still have made {K0, K1} a group and judged trees on it.
#[test]
fn chains_fold_as_the_nodes_fold_them() {
    let params = ClusterParams::default();
    for (k2_us, merged, loose) in [
        (950, vec![vec![0, 1]], [false; 3]),
        (900, vec![], [true, true, false]),
    ] {
        let n = net(
            &[20, 20, 20],
            |a, b| match (a.min(b), a.max(b)) {
                (0, 1) => 450,
                _ => k2_us,
            },
            None,
        )
        .grouped(&params);
        let g = n.groups();
        assert_eq!(g.merged(), merged, "K2 at {k2_us} µs one-way");
        assert_eq!([0, 1, 2].map(|c| g.is_loose(c)), loose, "K2 at {k2_us} µs");
    }
    // Far apart (the shipped topologies' case): nothing merges.
    let far = net(&[100, 100], |_, _| 1000, None).grouped(&params);
    assert!(far.groups().is_declared());
}

/// A group spanning two declared sites merges them, so every group lies in one site.
#[test]
fn a_group_across_declared_sites_merges_them() {
    let n = net(
        &[20, 20, 20],
        |a, b| {
            if a.min(b) == 0 && a.max(b) == 1 {
                40
            } else {
                9000
            }
        },
        Some(&[0, 1, 2]),
    )
    .grouped(&ClusterParams::default());
    assert_eq!(n.groups().merged(), vec![vec![0, 1]]);
    let sites: Vec<usize> = (0..3).map(|c| n.groups().site_of(c)).collect();
    assert_eq!(sites, vec![0, 0, 2]);
    assert_eq!(n.merged_site_name(0), "site0+site1");
    assert_eq!(Groups::declared(&[0, 1, 2]).merged_site(1), 1);
}

/// Metrics of `root`'s tree given as (node, parent) edges over `net`'s initial nodes.
fn judge(net: &NetModel, root: usize, edges: &[(usize, usize)]) -> TreeMetrics {
    let cluster_of = net.initial_clusters().to_vec();
    let n = cluster_of.len();
    let mut view = ParentView::new();
    for _ in 0..n {
        view.add_node();
    }
    for &(v, p) in edges {
        view.set(root, v, Some(p));
    }
    let mut per_cluster = vec![0; net.clusters()];
    let mut per_site = vec![0; net.sites()];
    for &c in &cluster_of {
        per_cluster[c] += 1;
        per_site[net.site_of(c)] += 1;
    }
    let alive = vec![true; n];
    let lay = Layout {
        alive: &alive,
        cluster_of: &cluster_of,
        net,
        live_per_cluster: &per_cluster,
        live_per_site: &per_site,
        live: n,
    };
    metrics::tree_metrics(root, view.row(root), &lay, &mut Scratch::default())
}

/// Clusters K0 and K1 40 µs apart, K2 9 ms away (nodes 0-1, 2-3, 4-5). A tree of node 4
/// that enters K0 and K1 by one wide-area edge is optimal however it crosses between K0 and
/// K1, and two wide-area edges into them are not; judged on the declared clusters, the
/// first tree would not be optimal.
#[test]
fn trees_are_judged_on_the_groups() {
    let close = |a: usize, b: usize| if a.max(b) == 1 { 40 } else { 9000 };
    let grouped = net(&[20, 20, 20], close, None).grouped(&ClusterParams::default());
    // 0 under 4 (wide area), 2 under 0, 1 under 2 (K1 -> K0 again), 3 under 2, 5 under 4.
    let one_entry = [(0, 4), (2, 0), (1, 2), (3, 2), (5, 4)];
    let m = judge(&grouped, 4, &one_entry);
    assert!(m.spanning && m.wide_area_optimal && m.site_optimal, "{m:?}");
    // 2 straight under 4 too: two wide-area edges into the group.
    let two_entries = [(0, 4), (2, 4), (1, 2), (3, 2), (5, 4)];
    let m = judge(&grouped, 4, &two_entries);
    assert!(m.spanning && !m.wide_area_optimal, "{m:?}");
    // The same tree judged on the declared clusters: K0 entered twice (from 4 and from 2).
    let declared = net(&[20, 20, 20], close, None);
    // (A rule that splits at any rise in latency, and no floor, keeps them.)
    let declared = declared.grouped(&ClusterParams {
        gap: 1.0,
        floor_us: 0,
    });
    assert!(declared.groups().is_declared());
    let m = judge(&declared, 4, &one_entry);
    assert!(m.spanning && !m.wide_area_optimal, "{m:?}");
}

/// Loose nodes (K0 and K1 of the folding chain above) are groups of their own: any edges
/// into them are right, while K2, a group, must still be entered exactly once.
#[test]
fn loose_nodes_are_never_wrongly_entered() {
    let chain = |a: usize, b: usize| if a.max(b) == 1 { 450 } else { 900 };
    let n = net(&[20, 20, 20], chain, None).grouped(&ClusterParams::default());
    assert!(n.groups().is_loose(0) && n.groups().is_loose(1));
    // Root 0 (loose): K1's nodes under K0's and each other, K2 entered once.
    let m = judge(&n, 0, &[(1, 0), (2, 1), (3, 0), (4, 3), (5, 4)]);
    assert!(m.spanning && m.wide_area_optimal, "{m:?}");
    // K2 entered twice.
    let m = judge(&n, 0, &[(1, 0), (2, 1), (3, 0), (4, 3), (5, 2)]);
    assert!(m.spanning && !m.wide_area_optimal, "{m:?}");
}
