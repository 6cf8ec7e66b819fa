//! A set of root indices as a bitmap: the roots whose adverts are due.
//!
//! Owns no part of the core: the set type of the adverts due in `adverts`.

use super::trees::RootIdx;

/// A set of [`RootIdx`] kept as one bit per root. Root indices are dense (one per root ever
/// tracked), so the bitmap is small, and it is written on nearly every tree entry received:
/// an insert is one bit set, where a sorted set walked its nodes. Iterates in ascending
/// order, like a `BTreeSet<RootIdx>`.
#[derive(Clone, Debug, Default)]
pub(super) struct RootSet {
    words: Vec<u64>,
    len: usize,
}

impl RootSet {
    /// Adds `ri`; returns whether it was not in the set.
    pub(super) fn insert(&mut self, ri: RootIdx) -> bool {
        let (w, bit) = (ri / 64, 1u64 << (ri % 64));
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        let fresh = self.words[w] & bit == 0;
        self.words[w] |= bit;
        self.len += usize::from(fresh);
        fresh
    }

    /// Removes `ri`; returns whether it was in the set.
    pub(super) fn remove(&mut self, ri: RootIdx) -> bool {
        let (w, bit) = (ri / 64, 1u64 << (ri % 64));
        let Some(word) = self.words.get_mut(w) else {
            return false;
        };
        let was = *word & bit != 0;
        *word &= !bit;
        self.len -= usize::from(was);
        was
    }

    /// Whether `ri` is in the set.
    pub(super) fn contains(&self, ri: RootIdx) -> bool {
        (self.words.get(ri / 64)).is_some_and(|w| w & (1u64 << (ri % 64)) != 0)
    }

    /// Whether the set is empty.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of roots in the set.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Empties the set, returning its roots in ascending order.
    pub(super) fn take(&mut self) -> Vec<RootIdx> {
        let mut out = Vec::with_capacity(self.len);
        for (w, word) in self.words.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                out.push(w * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
        self.len = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn behaves_like_a_sorted_set() {
        let mut set = RootSet::default();
        let mut model = BTreeSet::new();
        let mut x = 12345u64;
        for _ in 0..5000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let ri = (x >> 33) as usize % 300;
            match (x >> 20) % 7 {
                0 => assert_eq!(set.remove(ri), model.remove(&ri)),
                1 => {
                    let got = set.take();
                    let want: Vec<RootIdx> = std::mem::take(&mut model).into_iter().collect();
                    assert_eq!(got, want);
                }
                _ => assert_eq!(set.insert(ri), model.insert(ri)),
            }
            assert_eq!(set.contains(ri), model.contains(&ri));
            assert_eq!(set.len(), model.len());
            assert_eq!(set.is_empty(), model.is_empty());
        }
    }
}
