//! Where two cluster tables differ, found in two steps of 32 buckets each.
//!
//! A summary's id falls in one of [`CLUSTER_BUCKETS`] coarse buckets (by its first byte) and,
//! inside it, in one of [`CLUSTER_BUCKETS`] fine buckets (by its second byte). Two nodes
//! whose digests differ compare the coarse buckets' fingerprints; a coarse bucket that
//! differs and holds at most [`FINE_SPLIT`] summaries is settled by exchanging its versions,
//! a fuller one by comparing its fine buckets first. Below about 500 members every coarse
//! bucket is that small and the exchange is the one-step one; at 5000 a coarse bucket holds
//! about 156 summaries (3 KB of versions each way) and a fine one about 5, so a summary in
//! flight costs a few hundred bytes to reconcile instead of kilobytes.

use crate::proto::id::NodeId;
use crate::proto::message::CLUSTER_BUCKETS;

/// A coarse bucket holding more summaries than this is compared by its fine buckets.
pub(super) const FINE_SPLIT: usize = 16;

/// The fine buckets in all: one index per (coarse, fine) pair.
pub(super) const FINE_BUCKETS: usize = CLUSTER_BUCKETS * CLUSTER_BUCKETS;

// The coarse buckets travel as the bits of a u32, the fine ones as u16 indices.
const _: () = assert!(CLUSTER_BUCKETS <= 32 && FINE_BUCKETS <= u16::MAX as usize);

/// The coarse bucket of a node id (ids are uniformly random bytes).
pub(super) fn coarse(id: &NodeId) -> usize {
    id.0[0] as usize % CLUSTER_BUCKETS
}

/// The index of the fine bucket of a node id, among all [`FINE_BUCKETS`].
pub(super) fn fine(id: &NodeId) -> u16 {
    (coarse(id) * CLUSTER_BUCKETS + id.0[1] as usize % CLUSTER_BUCKETS) as u16
}

/// A well-spread 64-bit value of `(id, version)`, XORed into the fingerprints.
pub(super) fn mix(id: &NodeId, version: u32) -> u64 {
    let a = u64::from_le_bytes(id.0[..8].try_into().unwrap_or_default());
    let b = u64::from_le_bytes(id.0[8..].try_into().unwrap_or_default());
    let mut r = crate::proto::rng::SplitMix64::new(a ^ b.rotate_left(29) ^ u64::from(version));
    r.next_u64()
}

/// The fingerprints of a table, kept up to date as its entries change: folding the whole
/// table for every digest received was a twentieth of the simulator's time at 5000 nodes.
#[derive(Clone, Debug, Default)]
pub(super) struct Fingerprints {
    /// The digest's hash: every `(id, version)` mixed and XORed.
    pub(super) hash: u64,
    /// Each coarse bucket's fingerprint (the low half of the same mixes).
    pub(super) coarse: [u32; CLUSTER_BUCKETS],
    /// How many summaries each coarse bucket holds.
    pub(super) counts: [usize; CLUSTER_BUCKETS],
}

impl Fingerprints {
    /// Counts `(id, version)` in.
    pub(super) fn add(&mut self, id: &NodeId, version: u32) {
        self.flip(id, version);
        self.counts[coarse(id)] += 1;
    }

    /// Counts `(id, version)` out (it must have been counted in).
    pub(super) fn remove(&mut self, id: &NodeId, version: u32) {
        self.flip(id, version);
        let count = &mut self.counts[coarse(id)];
        *count = count.saturating_sub(1);
    }

    fn flip(&mut self, id: &NodeId, version: u32) {
        let m = mix(id, version);
        self.hash ^= m;
        self.coarse[coarse(id)] ^= m as u32;
    }
}

/// The fingerprints of the fine buckets of every coarse bucket set in `mask`, in order of
/// the coarse buckets, [`CLUSTER_BUCKETS`] per coarse bucket.
pub(super) fn fine_hashes<'a>(
    mask: u32,
    entries: impl Iterator<Item = (&'a NodeId, u32)>,
) -> Vec<u32> {
    // Where each selected coarse bucket's fine hashes start.
    let mut start = [usize::MAX; CLUSTER_BUCKETS];
    let mut next = 0;
    for (b, s) in start.iter_mut().enumerate() {
        if mask & 1 << b != 0 {
            *s = next;
            next += CLUSTER_BUCKETS;
        }
    }
    let mut hashes = vec![0u32; next];
    for (id, v) in entries {
        let s = start[coarse(id)];
        if s != usize::MAX {
            hashes[s + fine(id) as usize % CLUSTER_BUCKETS] ^= mix(id, v) as u32;
        }
    }
    hashes
}

/// The fine buckets where `theirs` (fine fingerprints of the coarse buckets of `mask`, as
/// [`fine_hashes`] lays them out) differs from `mine`; `None` if `theirs` has the wrong
/// length.
pub(super) fn fine_differ(mask: u32, theirs: &[u32], mine: &[u32]) -> Option<Vec<u16>> {
    if theirs.len() != mine.len() {
        return None;
    }
    let coarse_set = (0..CLUSTER_BUCKETS).filter(|b| mask & 1 << b != 0);
    let mut differ = Vec::new();
    for (k, b) in coarse_set.enumerate() {
        for f in 0..CLUSTER_BUCKETS {
            let i = k * CLUSTER_BUCKETS + f;
            if theirs[i] != mine[i] {
                differ.push((b * CLUSTER_BUCKETS + f) as u16);
            }
        }
    }
    Some(differ)
}

/// The summaries a version list covers: whole coarse buckets and single fine ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Selection {
    /// Coarse buckets, bit `i` for bucket `i`.
    pub(super) coarse: u32,
    /// Fine buckets, sorted, no duplicates, each below [`FINE_BUCKETS`].
    pub(super) fine: Vec<u16>,
}

impl Selection {
    /// The selection a peer sent: the fine list sorted, deduplicated and cut to the valid
    /// indices.
    pub(super) fn from_wire(coarse: u32, mut fine: Vec<u16>) -> Self {
        fine.retain(|f| (*f as usize) < FINE_BUCKETS);
        fine.sort_unstable();
        fine.dedup();
        Selection { coarse, fine }
    }

    /// Whether `id`'s summary is covered.
    pub(super) fn contains(&self, id: &NodeId) -> bool {
        self.coarse & 1 << coarse(id) != 0 || self.fine.binary_search(&fine(id)).is_ok()
    }

    /// Whether nothing is covered.
    pub(super) fn is_empty(&self) -> bool {
        self.coarse == 0 && self.fine.is_empty()
    }
}

/// The versions of the entries `sel` covers, sorted by id.
pub(super) fn versions_of<'a>(
    entries: impl Iterator<Item = (&'a NodeId, u32)>,
    sel: &Selection,
) -> Vec<(NodeId, u32)> {
    let mut versions: Vec<(NodeId, u32)> = entries
        .filter(|(id, _)| sel.contains(id))
        .map(|(id, v)| (*id, v))
        .collect();
    versions.sort_unstable();
    versions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(a: u8, b: u8) -> NodeId {
        let mut bytes = [7u8; 16];
        bytes[0] = a;
        bytes[1] = b;
        NodeId(bytes)
    }

    #[test]
    fn fine_buckets_nest_in_coarse_ones_and_differences_are_found_per_fine_bucket() {
        let x = id(3, 70);
        assert_eq!(coarse(&x), 3);
        assert_eq!(fine(&x), 3 * 32 + 70 % 32);
        let entries = [(id(3, 1), 1), (id(3, 2), 1), (id(5, 1), 1)];
        let mine = fine_hashes(1 << 3 | 1 << 5, entries.iter().map(|(i, v)| (i, *v)));
        assert_eq!(mine.len(), 64);
        let changed = [(id(3, 1), 1), (id(3, 2), 2), (id(5, 1), 1)];
        let theirs = fine_hashes(1 << 3 | 1 << 5, changed.iter().map(|(i, v)| (i, *v)));
        assert_eq!(
            fine_differ(1 << 3 | 1 << 5, &theirs, &mine),
            Some(vec![3 * 32 + 2])
        );
        assert_eq!(
            fine_differ(1 << 3, &theirs, &mine[..32]),
            None,
            "bad length"
        );
    }

    #[test]
    fn fingerprints_kept_by_steps_equal_those_folded_afresh() {
        let mut kept = Fingerprints::default();
        kept.add(&id(3, 1), 1);
        kept.add(&id(3, 2), 1);
        kept.add(&id(5, 1), 4);
        kept.remove(&id(3, 2), 1);
        kept.add(&id(3, 2), 2);
        kept.remove(&id(5, 1), 4);
        let mut fresh = Fingerprints::default();
        fresh.add(&id(3, 2), 2);
        fresh.add(&id(3, 1), 1);
        assert_eq!(
            (kept.hash, kept.coarse, kept.counts),
            (fresh.hash, fresh.coarse, fresh.counts)
        );
        assert_eq!(kept.counts[3], 2);
        assert_eq!(
            kept.coarse[3],
            (mix(&id(3, 1), 1) ^ mix(&id(3, 2), 2)) as u32
        );
    }

    #[test]
    fn a_selection_from_a_peer_is_cleaned_and_covers_its_buckets() {
        let sel = Selection::from_wire(1 << 4, vec![3 * 32 + 2, 5000, 3 * 32 + 2]);
        assert_eq!(sel.fine, vec![3 * 32 + 2]);
        assert!(sel.contains(&id(4, 9)) && sel.contains(&id(3, 2)) && sel.contains(&id(3, 34)));
        assert!(!sel.contains(&id(3, 3)) && !sel.is_empty());
        assert!(Selection::default().is_empty());
    }
}
