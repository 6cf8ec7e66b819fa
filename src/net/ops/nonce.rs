//! Operation numbers nobody can guess.
//!
//! A relay takes an operation whose id (root, number) it already holds for a duplicate.
//! Numbered in sequence, a root's next operations could be sent first by any member that
//! saw one, under the root's id: the nodes it reached would drop the real ones as
//! duplicates. So the numbers are a keyed permutation of a counter: a four-round Feistel
//! network over 48 bits whose round function is HMAC-SHA256 under a key drawn at start.
//! A permutation never repeats within a run (2^48 numbers), and without the key the next
//! number is no easier to guess than any other.
//!
//! 48 bits: the top bit marks the second half of composite operations, and bits 48-62
//! number the parts of a striped broadcast (`stripes`).

use ring::hmac;

const HALF_BITS: u32 = 24;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;
const ROUNDS: u8 = 4;

/// The numbers of one run's operations.
pub(super) struct NonceSeq {
    key: hmac::Key,
    counter: u64,
}

impl NonceSeq {
    /// A sequence keyed by fresh randomness and `seed`.
    pub(super) fn new(seed: u64) -> NonceSeq {
        let mut bytes = [0u8; 40];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        // Without the system's randomness (never seen on Linux) the seed alone keys it:
        // still a permutation, only guessable by who knows the seed.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes[8..]);
        NonceSeq {
            key: hmac::Key::new(hmac::HMAC_SHA256, &bytes),
            counter: 0,
        }
    }

    /// The next number: never 0, below 2^48, never the same twice in a run.
    pub(super) fn next_nonce(&mut self) -> u64 {
        loop {
            self.counter = (self.counter + 1) & ((1 << 48) - 1);
            let n = self.permute(self.counter);
            if n != 0 {
                return n;
            }
        }
    }

    fn permute(&self, x: u64) -> u64 {
        let (mut left, mut right) = (x >> HALF_BITS, x & HALF_MASK);
        for round in 0..ROUNDS {
            let mut msg = [0u8; 9];
            msg[0] = round;
            msg[1..].copy_from_slice(&right.to_le_bytes());
            let tag = hmac::sign(&self.key, &msg);
            let t = tag.as_ref();
            let f = u64::from(t[0]) | u64::from(t[1]) << 8 | u64::from(t[2]) << 16;
            (left, right) = (right, left ^ f);
        }
        (left << HALF_BITS) | right
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn numbers_are_distinct_within_48_bits_and_not_in_sequence() {
        let mut seq = NonceSeq::new(7);
        let numbers: Vec<u64> = (0..100_000).map(|_| seq.next_nonce()).collect();
        let distinct: HashSet<u64> = numbers.iter().copied().collect();
        assert_eq!(distinct.len(), numbers.len(), "no number twice");
        assert!(numbers.iter().all(|&n| n != 0 && n < 1 << 48));
        // One number does not tell the next: consecutive numbers differ in about half
        // their bits, and hardly ever by one.
        let steps_of_one = numbers.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(
            steps_of_one < 5,
            "{steps_of_one} numbers followed their predecessor"
        );
        let flipped: u32 = numbers.windows(2).map(|w| (w[0] ^ w[1]).count_ones()).sum();
        let mean = f64::from(flipped) / (numbers.len() - 1) as f64;
        assert!(
            (20.0..28.0).contains(&mean),
            "{mean} bits differ on average"
        );
    }

    #[test]
    fn two_runs_with_the_same_seed_number_differently() {
        let (mut a, mut b) = (NonceSeq::new(1), NonceSeq::new(1));
        let a: Vec<u64> = (0..8).map(|_| a.next_nonce()).collect();
        let b: Vec<u64> = (0..8).map(|_| b.next_nonce()).collect();
        assert_ne!(a, b);
    }
}
