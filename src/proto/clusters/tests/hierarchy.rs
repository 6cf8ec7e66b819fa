//! The hierarchy from full matrices, from the summaries alone, and from odd inputs.

use super::*;

#[test]
fn das_4_from_the_full_matrix_is_four_clusters_in_one_level() {
    let l = das4();
    let ids = ids(l.len());
    let v = compute(&ids, &l.all_edges(&ids), &ClusterParams::default());
    assert_eq!(v.depth(), 1, "{v:?}");
    assert_eq!(v.partition(1), l.partition(&ids, |c| c));
    let vu = v.group_of(1, &ids[0]).expect("in a group");
    assert_eq!(vu.members.len(), 16);
    assert_eq!(vu.rtt_us, Some(40));
    assert_eq!(vu.label, *vu.members.iter().min().expect("members"));
}

#[test]
fn sites_64_from_the_full_matrix_is_clusters_then_sites_then_wider() {
    let l = sites64();
    let ids = ids(l.len());
    let v = compute(&ids, &l.all_edges(&ids), &ClusterParams::default());
    assert_eq!(v.partition(1), l.partition(&ids, |c| c));
    assert_eq!(v.partition(2), l.partition(&ids, |c| c / 2));
    // Above the sites: ANL and NCSA (2.5 ms apart) join, then PSC, then SDSC.
    assert_eq!(v.partition(3), l.partition(&ids, |c| [0, 1, 1, 3][c / 2]));
    assert_eq!(v.partition(4), l.partition(&ids, |c| [0, 1, 1, 1][c / 2]));
    assert_eq!(v.depth(), 4);
    assert_eq!(v.group_of(2, &ids[0]).and_then(|g| g.rtt_us), Some(2_000));
    assert_eq!(v.group_of(3, &ids[20]).and_then(|g| g.rtt_us), Some(5_000));
    // SDSC stays one group from level 2 up.
    assert_eq!(v.group_of(4, &ids[0]), v.group_of(2, &ids[0]));
}

#[test]
fn a_wrong_partition_does_not_match() {
    let l = sites64();
    let ids = ids(l.len());
    let v = compute(&ids, &l.all_edges(&ids), &ClusterParams::default());
    assert_ne!(v.partition(1), l.partition(&ids, |c| c / 2));
    assert_ne!(v.partition(2), l.partition(&ids, |c| c));
    assert!(v.partition(9).is_empty());
}

#[test]
fn the_summaries_alone_recover_both_layouts_even_with_noise() {
    for seed in 1..=5 {
        for (l, levels) in [(das4(), 1usize), (sites64(), 2)] {
            let ids = ids(l.len());
            let v = compute(
                &ids,
                &l.published_edges(&ids, 0.3, seed),
                &ClusterParams::default(),
            );
            assert_eq!(v.partition(1), l.partition(&ids, |c| c), "seed {seed}");
            if levels == 2 {
                assert_eq!(v.partition(2), l.partition(&ids, |c| c / 2), "seed {seed}");
            }
        }
    }
}

#[test]
fn jitter_below_the_floor_does_not_split_a_lan() {
    let ids = ids(40);
    let mut rng = SplitMix64::new(3);
    let mut edges = Vec::new();
    for i in 0..40 {
        for j in i + 1..40 {
            edges.push((ids[i], ids[j], 30 + rng.below(470) as u32));
        }
    }
    let v = compute(&ids, &edges, &ClusterParams::default());
    assert_eq!(v.depth(), 1);
    assert_eq!(v.levels[0].len(), 1, "one LAN, one cluster");
}

#[test]
fn a_far_node_stands_alone_and_a_smooth_chain_is_not_cut() {
    let ids = ids(6);
    // 0..4 a LAN; 5 is 20 ms from all.
    let mut edges = Vec::new();
    for i in 0..5 {
        for j in i + 1..5 {
            edges.push((ids[i], ids[j], 100));
        }
        edges.push((ids[i], ids[5], 20_000));
    }
    let v = compute(&ids, &edges, &ClusterParams::default());
    assert_eq!(v.depth(), 1);
    assert_eq!(v.levels[0].len(), 2);
    let alone = v.group_of(1, &ids[5]).expect("listed");
    assert_eq!((alone.members.len(), alone.rtt_us), (1, None));
    // A chain whose links grow by less than the factor each step: one group.
    let chain: Vec<(NodeId, NodeId, u32)> = (0..5)
        .map(|i| (ids[i], ids[i + 1], 1_000 + 600 * i as u32))
        .collect();
    assert_eq!(
        compute(&ids, &chain, &ClusterParams::default()).levels[0].len(),
        1
    );
}

#[test]
fn odd_inputs_give_sane_views() {
    let ids = ids(4);
    let p = ClusterParams::default();
    assert_eq!(compute(&[], &[], &p), ClusterView::default());
    // No edges at all: everyone alone, one level.
    assert_eq!(compute(&ids, &[], &p).levels[0].len(), 4);
    // Self-loops, unknown nodes and duplicates are ignored; the lowest RTT of a pair counts.
    let stranger = NodeId::from_seed(7, 7);
    let edges = vec![
        (ids[0], ids[0], 1),
        (ids[0], stranger, 1),
        (ids[0], ids[1], 90_000),
        (ids[1], ids[0], 100),
        (ids[2], ids[3], 100),
    ];
    let v = compute(&ids, &edges, &p);
    assert_eq!(v.levels[0].len(), 2, "two separate pairs: {v:?}");
    assert_eq!(v.group_of(1, &ids[0]).and_then(|g| g.rtt_us), Some(100));
    // The same edges in another order give the same view.
    let mut rev = edges.clone();
    rev.reverse();
    assert_eq!(compute(&ids, &rev, &p), v);
}
