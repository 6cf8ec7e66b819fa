//! The tables and the plot of `collectives-large` ([`super::collectives_large`]).

use super::collectives_large::{Collective, Contender, Outcome, Row};
use super::large::size_label;
use super::plot::{Series, line_chart};
use crate::api::{Algorithm, TuneEntry};
use std::fmt::Write as _;

fn row(o: &Outcome, collective: Collective, bytes: u64, c: Contender) -> Option<&Row> {
    o.rows
        .iter()
        .find(|r| r.collective == collective && r.bytes == bytes && r.contender == c)
}

/// The fastest of `set` forced at this size, and its median completion (s).
fn fastest(
    o: &Outcome,
    collective: Collective,
    bytes: u64,
    set: &[Algorithm],
) -> Option<(Algorithm, f64)> {
    (set.iter())
        .filter_map(|&a| {
            row(o, collective, bytes, Contender::Forced(a)).map(|r| (a, r.completion_s))
        })
        .min_by(|x, y| x.1.total_cmp(&y.1))
}

/// One collective's table as markdown: completion per contender, what the default ran,
/// the default over the best contender (every forced algorithm but ours) and over the best
/// candidate (every algorithm it could have picked, forced), and the default *settled*:
/// its calls that ran what its last call ran, once its table had tried what it would.
pub fn markdown(o: &Outcome, collective: Collective) -> String {
    let algorithms = collective.algorithms();
    let mut out = String::from("| size | default s |");
    for a in &algorithms {
        let _ = write!(out, " {} s |", a.name());
    }
    out.push_str(
        " default ran | default / best contender | default / best candidate | settled / best candidate |\n|---|---|",
    );
    out.push_str(&"---|".repeat(algorithms.len() + 4));
    out.push('\n');
    let mut sizes: Vec<u64> = (o.rows.iter())
        .filter(|r| r.collective == collective)
        .map(|r| r.bytes)
        .collect();
    sizes.dedup();
    for bytes in sizes {
        let secs = |c: Contender| row(o, collective, bytes, c).map(|r| r.completion_s);
        let fmt = |s: Option<f64>| s.map_or_else(|| "-".into(), |s| format!("{s:.3}"));
        let best = |set: &[Algorithm]| fastest(o, collective, bytes, set);
        let ratio = |b: Option<(Algorithm, f64)>| match (secs(Contender::Default), b) {
            (Some(d), Some((a, s))) => format!("{:.2} ({})", d / s, a.name()),
            _ => "-".into(),
        };
        let ran: Vec<&str> = row(o, collective, bytes, Contender::Default)
            .map(|r| r.calls.iter().map(|c| c.0.name()).collect())
            .unwrap_or_default();
        let settled = match (
            row(o, collective, bytes, Contender::Default),
            best(&algorithms),
        ) {
            (Some(r), Some((a, s))) => settled(r).map_or_else(
                || "-".into(),
                |(last, n, d)| format!("{:.2} ({} x{n} / {})", d / s, last.name(), a.name()),
            ),
            _ => "-".into(),
        };
        let _ = write!(
            out,
            "| {} | {} |",
            size_label(bytes),
            fmt(secs(Contender::Default))
        );
        for a in &algorithms {
            let _ = write!(out, " {} |", fmt(secs(Contender::Forced(*a))));
        }
        let _ = writeln!(
            out,
            " {} | {} | {} | {settled} |",
            ran.join(", "),
            ratio(best(&algorithms[1..])),
            ratio(best(&algorithms)),
        );
    }
    out
}

/// The default's settled calls in `r`: the algorithm its last call ran, how many of its
/// calls ran it, and their median seconds.
fn settled(r: &Row) -> Option<(Algorithm, usize, f64)> {
    let last = r.calls.last()?.0;
    let mut times: Vec<f64> = (r.calls.iter())
        .filter(|c| c.0 == last)
        .map(|c| c.1)
        .collect();
    times.sort_by(f64::total_cmp);
    Some((last, times.len(), times[times.len() / 2]))
}

/// The planner's decision table as markdown.
pub fn table_markdown(table: &[TuneEntry]) -> String {
    let mut out = String::from(
        "| collective | size class | chosen | predicted s | measured s | calls | switches |\n|---|---|---|---|---|---|---|\n",
    );
    for e in table {
        let predicted: Vec<String> = e
            .predicted_s
            .iter()
            .map(|(a, s)| format!("{} {s:.3}", a.name()))
            .collect();
        let measured: Vec<String> = e
            .measured_s
            .iter()
            .map(|(a, s)| format!("{} {s:.3}", a.name()))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            e.collective,
            size_label(1 << e.class),
            e.chosen.map_or("-", Algorithm::name),
            predicted.join(", "),
            measured.join(", "),
            e.calls,
            e.switches
        );
    }
    out
}

/// The tables of every collective measured, each under a heading.
pub fn tables(o: &Outcome) -> String {
    let mut out = String::new();
    for c in Collective::ALL {
        if o.rows.iter().any(|r| r.collective == c) {
            let _ = writeln!(out, "**{}**\n\n{}", c.name(), markdown(o, c));
        }
    }
    out
}

/// Where the fastest algorithm changes with the size, per collective: the best candidate's
/// algorithm over the sizes (runs of sizes with the same one, and the crossovers between
/// them), and the same for the default's settled choice (what its last call ran).
pub fn crossovers(o: &Outcome) -> String {
    let mut out = String::from(
        "| collective | best candidate | its crossovers | default settled on | its crossovers |\n|---|---|---|---|---|\n",
    );
    for c in Collective::ALL {
        let mut sizes: Vec<u64> = (o.rows.iter())
            .filter(|r| r.collective == c)
            .map(|r| r.bytes)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.is_empty() {
            continue;
        }
        let best: Vec<(u64, Algorithm)> = (sizes.iter())
            .filter_map(|&b| fastest(o, c, b, &c.algorithms()).map(|(a, _)| (b, a)))
            .collect();
        let chosen: Vec<(u64, Algorithm)> = (sizes.iter())
            .filter_map(|&b| {
                let r = row(o, c, b, Contender::Default)?;
                Some((b, r.calls.last()?.0))
            })
            .collect();
        let (best_runs, best_cross) = runs(&best);
        let (chosen_runs, chosen_cross) = runs(&chosen);
        let _ = writeln!(
            out,
            "| {} | {best_runs} | {best_cross} | {chosen_runs} | {chosen_cross} |",
            c.name()
        );
    }
    out
}

/// `(size, algorithm)` in ascending size as runs (`direct 64 KiB-256 KiB, relayed 1 MiB`)
/// and the crossovers between them (`direct to relayed between 256 KiB and 1 MiB`).
fn runs(by_size: &[(u64, Algorithm)]) -> (String, String) {
    let mut groups: Vec<(Algorithm, u64, u64)> = Vec::new();
    for &(bytes, a) in by_size {
        match groups.last_mut() {
            Some(g) if g.0 == a => g.2 = bytes,
            _ => groups.push((a, bytes, bytes)),
        }
    }
    let span = |lo: u64, hi: u64| match lo == hi {
        true => size_label(lo),
        false => format!("{}-{}", size_label(lo), size_label(hi)),
    };
    let listed: Vec<String> = (groups.iter())
        .map(|g| format!("{} {}", g.0.name(), span(g.1, g.2)))
        .collect();
    let crossings: Vec<String> = (groups.windows(2))
        .map(|w| {
            format!(
                "{} to {} between {} and {}",
                w[0].0.name(),
                w[1].0.name(),
                size_label(w[0].2),
                size_label(w[1].1)
            )
        })
        .collect();
    let or_none = |v: Vec<String>, none: &str| match v.is_empty() {
        true => none.to_string(),
        false => v.join(", "),
    };
    (or_none(listed, "-"), or_none(crossings, "none"))
}

/// The online-tuning run as markdown: one row per default call.
pub fn tuning_markdown(o: &Outcome) -> String {
    let mut out = String::from("| call | links | ran | s | predicted s |\n|---|---|---|---|---|\n");
    for (i, c) in o.tuning.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} | {:.3} |",
            i + 1,
            if c.after_change {
                "slowed"
            } else {
                "as in the file"
            },
            c.algorithm.name(),
            c.seconds,
            c.predicted_s
        );
    }
    out
}

/// The report printed by `bench collectives-large`.
pub fn text(o: &Outcome) -> String {
    let mut out = format!(
        "{} on {} ({} nodes), {:.0} s wall\n{}\nCrossovers:\n{}\nThe planners' decision tables (default calls only):\n{}",
        o.benchmark,
        o.topology,
        o.nodes,
        o.wall_s,
        tables(o),
        crossovers(o),
        table_markdown(&o.table),
    );
    if !o.tuning.is_empty() {
        let _ = write!(
            out,
            "\nOnline tuning (default scatters of {} from the root; then the links between the other clusters slow to {}% of their rate):\n{}",
            size_label(super::collectives_large::TUNING_BYTES),
            super::collectives_large::TUNING_SLOWED * 100.0,
            tuning_markdown(o)
        );
    }
    out
}

/// Completion time against size: every allreduce contender, the default and static
/// hierarchical reduce, and the default and direct scatter, gather and allgather.
pub fn svg(o: &Outcome) -> String {
    let mut lines: Vec<(Collective, Contender)> = Collective::Allreduce
        .contenders()
        .into_iter()
        .map(|c| (Collective::Allreduce, c))
        .collect();
    lines.push((Collective::Reduce, Contender::Default));
    lines.push((
        Collective::Reduce,
        Contender::Forced(Algorithm::Hierarchical),
    ));
    for c in [
        Collective::Scatter,
        Collective::Gather,
        Collective::Allgather,
    ] {
        lines.push((c, Contender::Default));
        lines.push((c, Contender::Forced(Algorithm::Direct)));
    }
    let series: Vec<Series> = lines
        .into_iter()
        .filter(|(col, _)| o.rows.iter().any(|r| r.collective == *col))
        .map(|(col, c)| Series {
            name: format!("{} {}", col.name(), c.name()),
            points: (o.rows.iter())
                .filter(|r| r.collective == col && r.contender == c)
                .map(|r| (r.bytes as f64 / 1024.0, r.completion_s))
                .collect(),
        })
        .collect();
    line_chart(
        &format!(
            "{}, {} nodes: large collectives ({})",
            o.topology, o.nodes, o.benchmark
        ),
        "bytes in all (KiB, log scale)",
        "completion (s)",
        &series,
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::collectives_large::Row;

    #[test]
    fn the_table_names_the_best_contender_and_candidate() {
        let r = |bytes, contender, s: f64, a| Row {
            collective: Collective::Allreduce,
            bytes,
            contender,
            completion_s: s,
            calls: vec![(a, s, s)],
        };
        let o = Outcome {
            benchmark: "collectives-large".into(),
            topology: "das-4".into(),
            nodes: 16,
            rows: vec![
                r(16 << 20, Contender::Default, 10.0, Algorithm::Clustered),
                r(
                    16 << 20,
                    Contender::Forced(Algorithm::Clustered),
                    9.5,
                    Algorithm::Clustered,
                ),
                r(
                    16 << 20,
                    Contender::Forced(Algorithm::Hierarchical),
                    25.0,
                    Algorithm::Hierarchical,
                ),
                r(
                    16 << 20,
                    Contender::Forced(Algorithm::Ring),
                    50.0,
                    Algorithm::Ring,
                ),
                r(
                    16 << 20,
                    Contender::Forced(Algorithm::Tree),
                    80.0,
                    Algorithm::Tree,
                ),
            ],
            table: Vec::new(),
            tuning: Vec::new(),
            wall_s: 1.0,
        };
        let md = markdown(&o, Collective::Allreduce);
        assert!(
            md.contains("| 16 MiB | 10.000 | 9.500 | 25.000 | 50.000 | 80.000 | clustered | 0.40 (hierarchical) | 1.05 (clustered) | 1.05 (clustered x1 / clustered) |"),
            "{md}"
        );
        assert!(svg(&o).contains("<svg"));
        assert!(
            crossovers(&o)
                .contains("| allreduce | clustered 16 MiB | none | clustered 16 MiB | none |"),
            "{}",
            crossovers(&o)
        );
    }

    #[test]
    fn crossovers_are_where_the_algorithm_changes_with_the_size() {
        use Algorithm::{Direct, Hierarchical, Relayed};
        let by_size = [
            (64 << 10, Direct),
            (256 << 10, Direct),
            (1 << 20, Relayed),
            (4 << 20, Hierarchical),
            (16 << 20, Relayed),
        ];
        let (listed, crossings) = runs(&by_size);
        assert_eq!(
            listed,
            "direct 64 KiB-256 KiB, relayed 1 MiB, hierarchical 4 MiB, relayed 16 MiB"
        );
        assert_eq!(
            crossings,
            "direct to relayed between 256 KiB and 1 MiB, relayed to hierarchical between 1 MiB and 4 MiB, hierarchical to relayed between 4 MiB and 16 MiB"
        );
        assert_eq!(runs(&[]), ("-".to_string(), "none".to_string()));
    }
}
