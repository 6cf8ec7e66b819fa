//! Minimal SVG line plots (CDFs and series) for the benchmark results in `docs/`.

use std::fmt::Write as _;

/// One line of a plot.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points `(x, y)`, in drawing order.
    pub points: Vec<(f64, f64)>,
}

const COLORS: [&str; 6] = [
    "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02",
];

/// The CDF of `values` as points (value, fraction of values at most it).
pub fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(i, x)| (*x, (i + 1) as f64 / n))
        .collect()
}

/// Fig. 5's chart: per contender (name, completion times in ms), the CDF of the times.
pub fn completion_cdf<'a>(
    title: &str,
    contenders: impl IntoIterator<Item = (&'a str, &'a [f64])>,
) -> String {
    let series: Vec<Series> = contenders
        .into_iter()
        .map(|(name, ms)| Series {
            name: name.to_string(),
            points: cdf(ms),
        })
        .collect();
    line_chart(
        title,
        "completion time (ms)",
        "fraction of nodes",
        &series,
        false,
    )
}

/// An SVG line chart of `series` with axis labels; `log_x` draws x on a log scale.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> String {
    let (w, h, ml, mr, mt, mb) = (720.0, 440.0, 70.0, 180.0, 40.0, 50.0);
    let tx = |x: f64| if log_x { x.max(1e-9).log10() } else { x };
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) =
        (f64::INFINITY, f64::NEG_INFINITY, 0.0f64, f64::NEG_INFINITY);
    for &(x, y) in pts {
        x0 = x0.min(tx(x));
        x1 = x1.max(tx(x));
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() || x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let px = |x: f64| ml + (tx(x) - x0) / (x1 - x0) * (w - ml - mr);
    let py = |y: f64| h - mb - (y - y0) / (y1 - y0) * (h - mt - mb);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" font-size="15">{}</text>"#,
        ml,
        esc(title)
    );
    // Axes and ticks.
    let _ = writeln!(
        out,
        r#"<path d="M{ml} {mt} V{} H{}" stroke="black" fill="none"/>"#,
        h - mb,
        w - mr
    );
    for i in 0..=5 {
        let fx = x0 + (x1 - x0) * i as f64 / 5.0;
        let xv = if log_x { 10f64.powf(fx) } else { fx };
        let x = ml + (w - ml - mr) * i as f64 / 5.0;
        let _ = writeln!(
            out,
            r#"<text x="{x}" y="{}" text-anchor="middle">{}</text>"#,
            h - mb + 16.0,
            fmt(xv)
        );
        let fy = y0 + (y1 - y0) * i as f64 / 5.0;
        let y = py(fy);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            ml - 6.0,
            y + 4.0,
            fmt(fy)
        );
        let _ = writeln!(out, r##"<path d="M{ml} {y} H{}" stroke="#ddd"/>"##, w - mr);
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (ml + w - mr) / 2.0,
        h - 12.0,
        esc(x_label)
    );
    let _ = writeln!(
        out,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{}</text>"#,
        (mt + h - mb) / 2.0,
        (mt + h - mb) / 2.0,
        esc(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut d = String::new();
        for (j, &(x, y)) in s.points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1} {:.1} ",
                if j == 0 { "M" } else { "L" },
                px(x),
                py(y)
            );
        }
        let _ = writeln!(
            out,
            r#"<path d="{d}" stroke="{color}" stroke-width="2" fill="none"/>"#
        );
        let ly = mt + 20.0 * i as f64 + 10.0;
        let _ = writeln!(
            out,
            r#"<path d="M{} {ly} h20" stroke="{color}" stroke-width="3"/>"#,
            w - mr + 10.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}">{}</text>"#,
            w - mr + 36.0,
            ly + 4.0,
            esc(&s.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
