//! Benchmark support: the baseline trees and cost model ([`trees`]), static trees over
//! real QUIC ([`quic_tree`]), the real-QUIC run ([`quic_run`], waiting for its trees in
//! `quic_wait`), summary statistics and SVG
//! plots ([`plot`]), and the large-broadcast benchmark ([`large`], its bandwidth bound
//! [`bandwidth`] and its tables [`large_report`]). The benchmark program is
//! `examples/bench/`.

pub mod bandwidth;
pub mod collectives_large;
pub mod collectives_large_report;
pub mod collectives_sim;
pub mod crossover;
pub mod large;
pub mod large_magpie;
pub mod large_report;
pub mod large_setup;
pub mod plot;
pub mod quic_run;
pub mod quic_tree;
mod quic_wait;
pub mod trees;

/// The `q`-quantile (0..=1) of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
