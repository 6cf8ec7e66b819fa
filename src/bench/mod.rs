//! Benchmark support: the baseline trees and cost model ([`trees`]), summary statistics
//! and SVG plots ([`plot`]). The benchmark program is `examples/bench.rs`.

pub mod plot;
pub mod trees;

/// The `q`-quantile (0..=1) of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
