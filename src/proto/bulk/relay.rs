//! Clustered reductions that relay through third clusters: each chunk's cluster partials
//! travel an in-tree of clusters to the chunk's owner, combined wherever two meet (a
//! reduce is the tree reversed), and an allreduce's result travels an out-tree back.
//!
//! Every cluster but the owner sends exactly one partial of each chunk, whatever the tree,
//! so a tree moves no more wide-area bytes than partials sent straight to their owner: it
//! only picks the links. The planner packs the chunks one by one (greedy widest-path
//! packing over the measured rates, as the relayed scatter and allgather do): for each it
//! tries every cluster as the owner (a reduce: the root's cluster), grows the in-tree and
//! the out-tree a link at a time, each time the link that would finish soonest given what
//! is already planned on it, and keeps the owner whose trees leave the busiest link least
//! loaded. The model ([`super::model::predict_to`]) keeps the trees only when they beat
//! the direct shares of [`super::model::shares_to`]; each participant derives its part
//! from the trees in [`super::route`].

use serde::{Deserialize, Serialize};

/// Above this many clusters the trees are not tried (the packing grows as the cube).
pub const MAX_CLUSTERS: usize = 12;

/// How one chunk crosses the clusters of a relayed clustered plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relay {
    /// Each group's next group towards the chunk's owner (the owner's: itself).
    pub up: Vec<u32>,
    /// Each group's group its result comes from (the owner's: itself; empty in a reduce).
    pub down: Vec<u32>,
}

/// A relayed clustered plan's wide-area part.
#[derive(Clone, Debug, PartialEq)]
pub struct Relayed {
    /// Elements each group owns, whole chunks in group order (the last chunk may be short).
    pub shares: Vec<u64>,
    /// One per chunk, in [`super::route::chunks`] order.
    pub relays: Vec<Relay>,
    /// Bits planned on each link, `load[c][d]` from group `c` to `d`.
    pub load: Vec<Vec<f64>>,
    /// The most wide-area hops a chunk takes up and (allreduce) down.
    pub hops: usize,
}

/// Packs `len` elements of `elem_size` bytes in chunks of `chunk` elements over links of
/// `rates` (bits per second from group `c` to `d`, `rates[c][d]`; see the module docs);
/// `root`: a reduce's root group.
pub fn plan(
    rates: &[Vec<f64>],
    len: u64,
    chunk: u64,
    elem_size: usize,
    root: Option<usize>,
) -> Relayed {
    let k = rates.len();
    let chunk = chunk.max(1);
    let count = len.div_ceil(chunk);
    let mut load = vec![vec![0.0f64; k]; k];
    let mut owned: Vec<(usize, u64, Relay)> = Vec::with_capacity(count as usize);
    let mut hops = 0;
    for i in 0..count {
        let bits = 8.0 * (chunk.min(len - i * chunk) * elem_size as u64) as f64;
        let owners: Vec<usize> = match root {
            Some(r) => vec![r],
            None => (0..k).collect(),
        };
        // Ties on the busiest link go to the owner whose trees take the least time in all.
        let mut best: Option<Pick> = None;
        for o in owners {
            let mut trial = load.clone();
            let up = grow(rates, &mut trial, o, bits, Way::In);
            let down = match root {
                Some(_) => Vec::new(),
                None => grow(rates, &mut trial, o, bits, Way::Out),
            };
            let cost = (busiest(rates, &trial), total(rates, &trial));
            if best.as_ref().is_none_or(|b| cost < b.cost) {
                let relay = Relay { up, down };
                best = Some(Pick {
                    cost,
                    owner: o,
                    relay,
                    load: trial,
                });
            }
        }
        let Some(Pick {
            owner: o,
            relay,
            load: trial,
            ..
        }) = best
        else {
            break;
        };
        load = trial;
        hops = hops.max(depth(&relay.up) + depth(&relay.down));
        owned.push((o, i, relay));
    }
    // Chunks in group order, as the shares lay them out.
    owned.sort_by_key(|(o, i, _)| (*o, *i));
    let mut shares = vec![0u64; k];
    for (o, i, _) in &owned {
        shares[*o] += chunk.min(len - i * chunk);
    }
    Relayed {
        shares,
        relays: owned.into_iter().map(|(_, _, r)| r).collect(),
        load,
        hops,
    }
}

/// One owner's trees for a chunk, as the packing weighs them.
struct Pick {
    /// The busiest link's seconds, then every link's added up.
    cost: (f64, f64),
    owner: usize,
    relay: Relay,
    /// The links' bits with these trees.
    load: Vec<Vec<f64>>,
}

#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// Partials towards the owner.
    In,
    /// Results from it.
    Out,
}

/// Grows a tree of every group around `owner`, a link at a time, the link that would
/// finish soonest with `bits` more on it; adds the bits to `load` and returns each
/// group's neighbour towards the owner.
fn grow(rates: &[Vec<f64>], load: &mut [Vec<f64>], owner: usize, bits: f64, way: Way) -> Vec<u32> {
    let k = rates.len();
    let mut next = vec![u32::MAX; k];
    next[owner] = owner as u32;
    for _ in 1..k {
        let mut best: Option<(f64, usize, usize)> = None;
        for c in (0..k).filter(|c| next[*c] == u32::MAX) {
            for x in (0..k).filter(|x| next[*x] != u32::MAX) {
                let (a, b) = if way == Way::In { (c, x) } else { (x, c) };
                let t = (load[a][b] + bits) / rates[a][b];
                // The owner first: a relay replaces it only when strictly sooner.
                if best.is_none_or(|(bt, _, _)| t < bt) {
                    best = Some((t, c, x));
                }
            }
        }
        let Some((_, c, x)) = best else { break };
        next[c] = x as u32;
        let (a, b) = if way == Way::In { (c, x) } else { (x, c) };
        load[a][b] += bits;
    }
    next
}

/// The busiest link's seconds.
pub fn busiest(rates: &[Vec<f64>], load: &[Vec<f64>]) -> f64 {
    let k = load.len();
    (0..k)
        .flat_map(|c| (0..k).filter(move |d| *d != c).map(move |d| (c, d)))
        .map(|(c, d)| load[c][d] / rates[c][d])
        .fold(0.0, f64::max)
}

/// Every link's seconds, added up.
fn total(rates: &[Vec<f64>], load: &[Vec<f64>]) -> f64 {
    let k = load.len();
    (0..k)
        .flat_map(|c| (0..k).filter(move |d| *d != c).map(move |d| (c, d)))
        .map(|(c, d)| load[c][d] / rates[c][d])
        .sum()
}

/// The most links from any group to the owner (0 for an empty tree).
fn depth(next: &[u32]) -> usize {
    (0..next.len())
        .map(|mut g| {
            let mut n = 0;
            while (next[g] as usize) != g && n <= next.len() {
                g = next[g] as usize;
                n += 1;
            }
            n
        })
        .max()
        .unwrap_or(0)
}

/// Whether `relay` is a pair of trees over `groups` groups rooted at `owner` (no `down`
/// in a reduce).
pub fn well_formed(relay: &Relay, groups: usize, owner: usize, reduce: bool) -> bool {
    let tree = |next: &[u32]| {
        next.len() == groups
            && next.get(owner) == Some(&(owner as u32))
            && (0..groups).all(|g| {
                let (mut at, mut n) = (g, 0);
                while at != owner {
                    match next.get(at) {
                        Some(x) if (*x as usize) < groups && n < groups => at = *x as usize,
                        _ => return false,
                    }
                    n += 1;
                }
                true
            })
    };
    tree(&relay.up)
        && if reduce {
            relay.down.is_empty()
        } else {
            tree(&relay.down)
        }
}
