//! Unit tests of the striping schedule (kept apart for size).

use super::*;

fn route(n: u8) -> Vec<(NodeId, NodeId)> {
    vec![(NodeId([0; 16]), NodeId([n; 16]))]
}

/// Runs a schedule where lane i really carries `true_bps[i]` (its parts in flight
/// sharing it) and reports come back `feedback` after a part is in; returns when the
/// last part completed and the parts per lane.
fn simulate(planned: &[f64], true_bps: &[f64], mib: u64) -> (f64, Vec<usize>) {
    let t0 = Instant::now();
    let routes = (0..planned.len()).map(|i| route(i as u8 + 1)).collect();
    let payload = Bytes::from(vec![7u8; (mib << 20) as usize]);
    let mut s = Schedule::new(
        payload,
        routes,
        planned,
        127,
        false,
        t0,
        Duration::from_secs(600),
    );
    // (lane, index, bits left)
    let mut flying: Vec<(usize, usize, f64)> = Vec::new();
    let add = |flying: &mut Vec<(usize, usize, f64)>, starts: Vec<PartStart>| {
        for p in starts {
            flying.push((p.lane, p.index, p.bytes.len() as f64 * 8.0));
        }
    };
    add(&mut flying, s.start(t0));
    let dt = 0.001;
    let mut t = 0.0;
    let mut delivered = 0;
    while delivered < s.count() {
        t += dt;
        for (lane, &bps) in true_bps.iter().enumerate() {
            let n = flying.iter().filter(|f| f.0 == lane).count();
            for f in flying.iter_mut().filter(|f| f.0 == lane) {
                f.2 -= bps / n as f64 * dt;
            }
        }
        let now = t0 + Duration::from_secs_f64(t);
        let done: Vec<usize> = flying.iter().filter(|f| f.2 <= 0.0).map(|f| f.1).collect();
        flying.retain(|f| f.2 > 0.0);
        for index in done {
            delivered += 1;
            add(&mut flying, s.done(index, now));
        }
        assert!(t < 1000.0, "the schedule stalled");
    }
    (t, s.carried())
}

#[test]
fn parts_shrink_towards_the_end_add_up_and_are_bounded_in_number() {
    for (len, lanes) in [(1u64 << 20, 7), (16 << 20, 7), (64 << 20, 8), (1 << 30, 8)] {
        let sizes = part_sizes(len, lanes, 127);
        assert_eq!(sizes.iter().sum::<u64>(), len);
        assert!(sizes.len() <= 127, "{len}: {} parts", sizes.len());
        assert!(
            sizes
                .windows(2)
                .all(|w| w[0] >= w[1] || w[1] - w[0] < MIN_PART)
        );
        let last = *sizes.last().unwrap();
        assert!(
            last <= MIN_PART.max(len / 64),
            "{len}: the last part is {last}"
        );
    }
    assert_eq!(
        part_sizes(100_000, 4, 127),
        vec![100_000],
        "small payloads stay whole"
    );
    assert_eq!(part_sizes(16 << 20, 4, 1), vec![16 << 20]);
    let now = Instant::now();
    let payload = Bytes::from(vec![1u8; 10 << 20]);
    let mut s = Schedule::new(
        payload,
        vec![route(1)],
        &[1e7],
        127,
        false,
        now,
        Duration::from_secs(9),
    );
    assert!(s.count() > 40, "{}", s.count());
    let mut total = 0;
    let mut starts = s.start(now);
    assert_eq!(starts.len(), WINDOW, "one lane, a window of parts");
    while let Some(p) = starts.pop() {
        total += p.bytes.len();
        starts.extend(s.done(p.index, now + Duration::from_millis(10)));
    }
    assert_eq!(total, 10 << 20);
}

#[test]
fn lanes_slower_than_planned_get_fewer_parts_and_the_whole_ends_near_the_sum_of_rates() {
    // Planned 10+5, but QUIC shares the common link evenly: 7.5 each, plus a slow 2.
    let (t, carried) = simulate(&[10e6, 5e6, 2e6], &[7.5e6, 7.5e6, 2e6], 16);
    let ideal = (16u64 << 20) as f64 * 8.0 / 17e6;
    assert!(t < ideal * 1.08, "{t:.2} s against {ideal:.2} s");
    assert!(carried[2] < carried[0], "{carried:?}");
    // A static split by the planned rates would take the 5e6 lane's share at 7.5 and
    // the 10e6 lane's at 7.5: 16 MiB * 10/17 / 7.5 Mbit/s.
    let fixed = (16u64 << 20) as f64 * 8.0 * (10.0 / 17.0) / 7.5e6;
    assert!(t < fixed * 0.85, "{t:.2} s, a fixed split {fixed:.2} s");
}

#[test]
fn without_routes_the_parts_go_down_the_overlays_tree() {
    let now = Instant::now();
    let payload = Bytes::from(vec![1u8; 1 << 20]);
    let mut s = Schedule::new(
        payload,
        Vec::new(),
        &[],
        127,
        true,
        now,
        Duration::from_secs(9),
    );
    let starts = s.start(now);
    assert!(!starts.is_empty() && starts.iter().all(|p| p.route.is_empty()));
}

#[test]
fn a_lane_far_slower_than_the_rest_is_left_idle_at_the_end() {
    let (t, carried) = simulate(&[10e6, 0.2e6], &[10e6, 0.2e6], 4);
    let alone = (4u64 << 20) as f64 * 8.0 / 10e6;
    assert!(
        t < alone * 1.05,
        "{t:.2} s against {alone:.2} s: {carried:?}"
    );
}

#[test]
fn a_tree_with_a_long_round_trip_keeps_its_rate_in_flight() {
    // Two trees at 20 Mbit/s, one 300 ms round trip long: at the start, the long one may
    // take up to what 20 Mbit/s carries over 300 ms beside the two parts of the window
    // (as long as it would finish them by the projected end), the short one the window.
    let t0 = Instant::now();
    let payload = Bytes::from(vec![7u8; 4 << 20]);
    let mut s = Schedule::new(
        payload,
        vec![route(1), route(2)],
        &[20e6, 20e6],
        127,
        false,
        t0,
        Duration::from_secs(60),
    )
    .with_delays(&[0.0, 0.3]);
    let starts = s.start(t0);
    let on = |lane| starts.iter().filter(|p| p.lane == lane).count();
    let part_bits = starts[0].bytes.len() as f64 * 8.0;
    let extra = (20e6 * 0.3 / part_bits).floor() as usize;
    assert_eq!(on(0), WINDOW);
    assert!(extra >= 1, "{extra}");
    assert!(
        on(1) > WINDOW && on(1) <= WINDOW + extra,
        "{} parts on the long tree",
        on(1)
    );
    // Without the delay both keep the window only.
    let mut plain = Schedule::new(
        Bytes::from(vec![7u8; 4 << 20]),
        vec![route(1), route(2)],
        &[20e6, 20e6],
        127,
        false,
        t0,
        Duration::from_secs(60),
    );
    assert_eq!(plain.start(t0).len(), 2 * WINDOW);
}
