//! The performance model: predicted completion of each algorithm on the measured
//! clusters, and the clustered algorithm's shares.
//!
//! The model is a LogP-style sum of what the busiest resource carries over its rate plus
//! the pipeline's fill. Rates are the measured cluster bandwidths; where a figure is
//! missing a default stands in and the tuning table ([`super::tune`]) corrects the pick
//! from measured call times.

use super::relay::{self, Relay};
use super::{Algorithm, Inside};
use crate::proto::NodeId;

/// Stands in for an unmeasured link between clusters.
pub const DEFAULT_WIDE_BPS: f64 = 10e6;
/// Stands in for an unmeasured cluster inside.
pub const DEFAULT_LAN_BPS: f64 = 400e6;
/// Stands in for an unknown one-way latency between clusters, seconds.
pub const DEFAULT_WIDE_LATENCY_S: f64 = 5e-3;
/// What a transfer costs beyond its bytes (a stream opened, a task woken), seconds.
pub const TRANSFER_OVERHEAD_S: f64 = 5e-4;

/// The participants' clusters and what was measured between them.
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    /// Participants by cluster, each sorted.
    pub groups: Vec<Vec<NodeId>>,
    /// Bits per second from cluster `c` to `d` (`wide_bps[c][d]`; 0: not measured).
    pub wide_bps: Vec<Vec<f64>>,
    /// Bits per second between two members of a cluster (0: not measured).
    pub lan_bps: Vec<f64>,
    /// One-way latency between clusters, seconds (`latency_s[c][c]`: inside).
    pub latency_s: Vec<Vec<f64>>,
}

impl Network {
    /// A network of `groups` with nothing measured.
    pub fn unmeasured(groups: Vec<Vec<NodeId>>) -> Network {
        let k = groups.len();
        Network {
            groups,
            wide_bps: vec![vec![0.0; k]; k],
            lan_bps: vec![0.0; k],
            latency_s: vec![vec![0.0; k]; k],
        }
    }

    /// The rate from cluster `c` to `d`: measured, else the default.
    pub fn wide(&self, c: usize, d: usize) -> f64 {
        match self.wide_bps[c][d] {
            b if b > 0.0 => b,
            _ => DEFAULT_WIDE_BPS,
        }
    }

    /// Every link's rate, `[c][d]` from cluster `c` to `d` (see [`Network::wide`]).
    pub fn wide_rates(&self) -> Vec<Vec<f64>> {
        let k = self.groups.len();
        (0..k)
            .map(|c| (0..k).map(|d| self.wide(c, d)).collect())
            .collect()
    }

    /// The rate inside cluster `c`: measured, else the default.
    pub fn lan(&self, c: usize) -> f64 {
        match self.lan_bps[c] {
            b if b > 0.0 => b,
            _ => DEFAULT_LAN_BPS,
        }
    }

    /// One-way latency from `c` to `d`: measured, else the default.
    pub fn latency(&self, c: usize, d: usize) -> f64 {
        match self.latency_s[c][d] {
            l if l > 0.0 => l,
            _ if c == d => 1e-4,
            _ => DEFAULT_WIDE_LATENCY_S,
        }
    }

    /// Whether every cluster pair and inside has a measured figure.
    pub fn complete(&self) -> bool {
        let k = self.groups.len();
        (0..k).all(|c| {
            (self.lan_bps[c] > 0.0 || self.groups[c].len() < 2)
                && (0..k).all(|d| c == d || self.wide_bps[c][d] > 0.0)
        })
    }

    fn members(&self) -> Vec<(NodeId, usize)> {
        let mut all: Vec<(NodeId, usize)> = self
            .groups
            .iter()
            .enumerate()
            .flat_map(|(g, m)| m.iter().map(move |id| (*id, g)))
            .collect();
        all.sort();
        all
    }
}

/// One algorithm's predicted completion for a size.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    pub algorithm: Algorithm,
    pub seconds: f64,
    /// Elements per share of each group (the clustered algorithm's; empty otherwise).
    pub shares: Vec<u64>,
    /// Elements per chunk.
    pub chunk: u64,
    /// How each group's chunks flow inside it (clustered and hierarchical; empty
    /// otherwise).
    pub inside: Vec<Inside>,
    /// The clustered algorithm's chunks relayed through third clusters ([`relay`]; empty:
    /// straight to their owners, which the model keeps unless the trees are sooner).
    pub relays: Vec<Relay>,
}

/// The chunk for a vector of `bytes`: about a 64th of it, 32 KiB to 1 MiB.
pub fn chunk_bytes(bytes: u64) -> u64 {
    (bytes / 64).clamp(32 * 1024, 1024 * 1024)
}

/// Predictions of every algorithm for an allreduce of `len` elements of `elem_size` bytes.
pub fn predict_all(net: &Network, len: u64, elem_size: usize) -> Vec<Prediction> {
    predict_all_to(net, len, elem_size, None)
}

/// Predictions of every algorithm for an allreduce (`root` none) or a reduce to `root`.
pub fn predict_all_to(
    net: &Network,
    len: u64,
    elem_size: usize,
    root: Option<NodeId>,
) -> Vec<Prediction> {
    Algorithm::ALLREDUCE
        .into_iter()
        .map(|a| predict_to(net, a, len, elem_size, root))
        .collect()
}

/// The prediction for one allreduce algorithm.
pub fn predict(net: &Network, algorithm: Algorithm, len: u64, elem_size: usize) -> Prediction {
    predict_to(net, algorithm, len, elem_size, None)
}

/// The prediction for one algorithm of an allreduce (`root` none) or a reduce to `root`:
/// a reduce is the allreduce's first half, with the results sent to the root instead of
/// back to everyone.
pub fn predict_to(
    net: &Network,
    algorithm: Algorithm,
    len: u64,
    elem_size: usize,
    root: Option<NodeId>,
) -> Prediction {
    let bytes = (len * elem_size as u64) as f64;
    let chunk = (chunk_bytes(len * elem_size as u64) / elem_size as u64).max(1);
    let chunk_b = (chunk * elem_size as u64) as f64 * 8.0;
    let bits = bytes * 8.0;
    let r = root.and_then(|id| net.groups.iter().position(|g| g.contains(&id)));
    // Passes along the in-cluster chains: reduce and back (allreduce), reduce only.
    let passes = if r.is_some() { 1.0 } else { 2.0 };
    let mut relays = Vec::new();
    let (seconds, shares, inside) = match algorithm {
        Algorithm::Clustered => {
            let f = shares_to(net, r);
            let load = |c: usize, d: usize| bits * share_terms(c, d, r).map(|x| f[x]).sum::<f64>();
            let (t, inside) = grouped(net, bits, chunk_b, load, 0.0, passes, 2.0);
            let direct = (t, split(len, &f), inside);
            match relayed(net, len, (chunk, elem_size), r, chunk_b, passes) {
                // Trees only when they are clearly sooner: partials straight to their
                // owner take the fewest hops.
                Some(p) if p.seconds < 0.97 * direct.0 => {
                    relays = p.relays;
                    (p.seconds, p.shares, p.inside)
                }
                _ => direct,
            }
        }
        Algorithm::Hierarchical => {
            let k = net.groups.len() as f64;
            let (t, inside) = match r {
                // The coordinator also sends the whole vector to every other cluster.
                None => grouped(
                    net,
                    bits,
                    chunk_b,
                    |_, _| bits,
                    bits * (k - 1.0),
                    passes,
                    2.0,
                ),
                // Every coordinator sends its whole partial to the root, which takes them all.
                Some(r) => {
                    let load = |_: usize, d: usize| if d == r { bits } else { 0.0 };
                    grouped(net, bits, chunk_b, load, bits * (k - 1.0), passes, 2.0)
                }
            };
            (t, Vec::new(), inside)
        }
        Algorithm::Ring => (ring(net, bits, root), Vec::new(), Vec::new()),
        Algorithm::Tree => (tree(net, bits, root), Vec::new(), Vec::new()),
        // Not allreduce algorithms: never picked.
        Algorithm::Relayed | Algorithm::Direct => (f64::INFINITY, Vec::new(), Vec::new()),
    };
    Prediction {
        algorithm,
        seconds,
        shares,
        chunk,
        inside,
        relays,
    }
}

/// The clustered algorithm relayed through third clusters ([`relay`]); none with fewer
/// than three clusters (nothing to relay through) or more than [`relay::MAX_CLUSTERS`].
fn relayed(
    net: &Network,
    len: u64,
    (chunk, elem_size): (u64, usize),
    r: Option<usize>,
    chunk_b: f64,
    passes: f64,
) -> Option<Prediction> {
    let k = net.groups.len();
    if !(3..=relay::MAX_CLUSTERS).contains(&k) {
        return None;
    }
    let bits = (len * elem_size as u64) as f64 * 8.0;
    let planned = relay::plan(&net.wide_rates(), len, chunk, elem_size, r);
    let load = |c: usize, d: usize| planned.load[c][d];
    let hops = planned.hops.max(1) as f64;
    let (seconds, inside) = grouped(net, bits, chunk_b, load, 0.0, passes, hops);
    Some(Prediction {
        algorithm: Algorithm::Clustered,
        seconds,
        shares: planned.shares,
        chunk,
        inside,
        relays: planned.relays,
    })
}

/// Clustered and hierarchical: the busiest wide link or member, plus the pipeline fill
/// (`passes` inside the clusters, `wide_hops` wide-area hops); and the pattern inside
/// each cluster that makes its part soonest.
fn grouped(
    net: &Network,
    bits: f64,
    chunk_b: f64,
    wide_load: impl Fn(usize, usize) -> f64,
    gateway_extra: f64,
    passes: f64,
    wide_hops: f64,
) -> (f64, Vec<Inside>) {
    let k = net.groups.len();
    let mut busiest: f64 = 0.0;
    let mut fill = 0.0f64;
    let mut wide_fill: f64 = 0.0;
    let mut patterns = Vec::with_capacity(k);
    for c in 0..k {
        let (pattern, busy, hops) = inside(net, c, bits, chunk_b, gateway_extra, passes);
        patterns.push(pattern);
        busiest = busiest.max(busy);
        fill = fill.max(hops);
        for d in 0..k {
            if c != d {
                busiest = busiest.max(wide_load(c, d) / net.wide(c, d));
                wide_fill = wide_fill.max(chunk_b / net.wide(c, d) + net.latency(c, d));
            }
        }
    }
    let t = busiest + fill + wide_hops * (wide_fill + TRANSFER_OVERHEAD_S);
    (t, patterns)
}

/// The pattern inside cluster `c` that finishes its part soonest, with that part's
/// seconds at its busiest member (`extra`: bits its gateway also sends) and its pipeline
/// fill. A chain: every member takes and sends the vector once per pass, a chunk crosses
/// `m - 1` hops. A binomial tree: `ceil(log2 m)` hops, but its gateway takes that many
/// copies of the vector per pass. Ties go to the chain.
pub fn inside(
    net: &Network,
    c: usize,
    bits: f64,
    chunk_b: f64,
    extra: f64,
    passes: f64,
) -> (Inside, f64, f64) {
    let m = net.groups[c].len() as f64;
    let lan = net.lan(c);
    let hop = chunk_b / lan + net.latency(c, c) + TRANSFER_OVERHEAD_S;
    let chain_busy = (if m > 1.0 { passes * bits } else { 0.0 } + extra) / lan;
    let chain = (Inside::Chain, chain_busy, passes * (m - 1.0) * hop);
    let depth = m.log2().ceil().max(0.0);
    let tree_busy = (if m > 1.0 { passes * depth * bits } else { 0.0 } + extra) / lan;
    let tree = (Inside::Binomial, tree_busy, passes * depth * hop);
    match tree.1 + tree.2 < chain.1 + chain.2 {
        true => tree,
        false => chain,
    }
}

/// Ring in id order: 2(n-1) steps of a segment, each as slow as its slowest edge (edges
/// crossing the same cluster pair share that link). A reduce to `root` is the first n-1
/// steps, then every member's reduced segment to the root.
fn ring(net: &Network, bits: f64, root: Option<NodeId>) -> f64 {
    let all = net.members();
    let n = all.len();
    if n < 2 {
        return 0.0;
    }
    let k = net.groups.len();
    let mut count = vec![vec![0usize; k]; k];
    for i in 0..n {
        count[all[i].1][all[(i + 1) % n].1] += 1;
    }
    let seg = bits / n as f64;
    let mut step: f64 = 0.0;
    for (c, row) in count.iter().enumerate() {
        for (d, &m) in row.iter().enumerate() {
            if m > 0 {
                let rate = if c == d {
                    net.lan(c)
                } else {
                    net.wide(c, d) / m as f64
                };
                step = step.max(seg / rate + net.latency(c, d));
            }
        }
    }
    let Some(r) = root.and_then(|id| all.iter().find(|(m, _)| *m == id).map(|(_, g)| *g)) else {
        return 2.0 * (n - 1) as f64 * (step + TRANSFER_OVERHEAD_S);
    };
    // The segments to the root: its own cluster's over the LAN, the others over their link.
    let mut gather = (n - 1) as f64 * seg / net.lan(r);
    for c in (0..k).filter(|c| *c != r) {
        let from = net.groups[c].len() as f64;
        gather = gather.max(from * seg / net.wide(c, r) + net.latency(c, r));
    }
    (n - 1) as f64 * (step + TRANSFER_OVERHEAD_S) + gather + TRANSFER_OVERHEAD_S
}

/// Binary tree in id order (a reduce's rooted at its root), whole vectors stored and
/// forwarded, up then (allreduce) down; the two children of a node share its link when
/// they sit in the same cluster.
fn tree(net: &Network, bits: f64, root: Option<NodeId>) -> f64 {
    let mut all = net.members();
    if let Some(p) = root.and_then(|id| all.iter().position(|(m, _)| *m == id)) {
        let r = all.remove(p);
        all.insert(0, r);
    }
    let down_too = if root.is_some() { 0.0 } else { 1.0 };
    let n = all.len();
    let mut total = 0.0;
    let mut level_start = 1;
    let mut width = 2;
    while level_start < n {
        let level_end = (level_start + width).min(n);
        let mut up: f64 = 0.0;
        let mut down: f64 = 0.0;
        for i in level_start..level_end {
            let (c, p) = (all[i].1, all[(i - 1) / 2].1);
            let sibling = if i % 2 == 1 { i + 1 } else { i - 1 };
            let shared = sibling < n && all[sibling].1 == c && c != p;
            let share: f64 = if shared { 2.0 } else { 1.0 };
            let (to_parent, to_child) = if c == p {
                (net.lan(c), net.lan(c) / share.max(1.0))
            } else {
                (net.wide(c, p) / share, net.wide(p, c) / share)
            };
            up = up.max(bits / to_parent + net.latency(c, p));
            down = down.max(bits / to_child + net.latency(p, c));
        }
        total += up + down_too * down + (1.0 + down_too) * TRANSFER_OVERHEAD_S;
        level_start = level_end;
        width *= 2;
    }
    total
}

/// The clusters whose shares the clustered algorithm's link `c -> d` carries: `d`'s
/// partials, and `c`'s results (to everyone in an allreduce; to the root's cluster `r` in
/// a reduce).
fn share_terms(c: usize, d: usize, r: Option<usize>) -> impl Iterator<Item = usize> {
    let results = r.is_none_or(|r| d == r);
    std::iter::once(d).chain(results.then_some(c))
}

/// The fraction of the vector each cluster owns in an allreduce: see [`shares_to`].
pub fn shares(net: &Network) -> Vec<f64> {
    shares_to(net, None)
}

/// The fraction of the vector each cluster owns: the wide-area time of the clustered
/// algorithm is `max over c != d of (sum of the shares link c -> d carries) * bits /
/// rate(c, d)`, where the link carries the partials of d's share and c's results (to
/// everyone in an allreduce; only into the root's cluster `r` in a reduce).
/// Exponentiated gradient on a soft maximum of the link times (sharpened as it goes): a
/// cluster on many busy links sheds share faster than one on a single busy link.
pub fn shares_to(net: &Network, r: Option<usize>) -> Vec<f64> {
    let k = net.groups.len();
    if k <= 1 {
        return vec![1.0; k];
    }
    let links: Vec<(Vec<usize>, f64)> = (0..k)
        .flat_map(|c| (0..k).filter(move |d| *d != c).map(move |d| (c, d)))
        .map(|(c, d)| (share_terms(c, d, r).collect(), 1.0 / net.wide(c, d)))
        .collect();
    let load = |f: &[f64], terms: &[usize]| terms.iter().map(|x| f[*x]).sum::<f64>();
    let worst = |f: &[f64]| {
        links
            .iter()
            .map(|(terms, inv)| load(f, terms) * inv)
            .fold(0.0, f64::max)
    };
    let mut f = vec![1.0 / k as f64; k];
    let mut best = f.clone();
    let mut best_t = worst(&f);
    for round in 0..2000 {
        let t = worst(&f);
        if t < best_t {
            best_t = t;
            best = f.clone();
        }
        // Soft-max weights of the links, relative to the worst (sharper over time).
        let beta = 5.0 + round as f64 / 20.0;
        let mut grad = vec![0.0f64; k];
        for (terms, inv) in &links {
            let w = (beta * (load(&f, terms) * inv / t - 1.0)).exp();
            for x in terms {
                grad[*x] += w * inv;
            }
        }
        let scale = grad.iter().cloned().fold(0.0, f64::max).max(1e-300);
        for c in 0..k {
            f[c] *= (-0.5 * grad[c] / scale).exp();
        }
        let sum: f64 = f.iter().sum::<f64>() + 1e-300;
        f.iter_mut().for_each(|x| *x /= sum);
    }
    best
}

/// `len` elements split by fractions `f` (the last takes the rounding).
pub fn split(len: u64, f: &[f64]) -> Vec<u64> {
    let mut out: Vec<u64> = f.iter().map(|x| (x * len as f64).floor() as u64).collect();
    let used: u64 = out.iter().sum();
    if let Some(last) = out.last_mut() {
        *last += len - used;
    }
    out
}

#[cfg(test)]
mod tests;
