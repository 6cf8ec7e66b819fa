//! Node identities.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A node's identity: 16 bytes derived from its TLS public key by the network driver
/// (and from a seed in the simulator). Ordered bytewise; the order breaks ties between
/// equal distances in the tree rules, so it must be total and the same on every node.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub [u8; 16]);

const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

impl NodeId {
    /// Builds an id from raw bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        NodeId(bytes)
    }

    /// A deterministic, well-spread id for simulations and tests: node `n` of seed `seed`.
    pub fn from_seed(seed: u64, n: u64) -> Self {
        let mut s = crate::proto::rng::SplitMix64::new(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let a = s.next_u64().to_be_bytes();
        let b = s.next_u64().to_be_bytes();
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&a);
        bytes[8..].copy_from_slice(&b);
        NodeId(bytes)
    }

    /// The first 8 base32 characters: how ids are shown in logs and the CLI.
    pub fn short(&self) -> String {
        let mut out = String::with_capacity(8);
        let bits = u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"));
        for i in 0..8 {
            let idx = (bits >> (59 - 5 * i)) & 31;
            out.push(BASE32[idx as usize] as char);
        }
        out
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.short())
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_is_eight_base32_chars_and_seeded_ids_differ() {
        let a = NodeId::from_seed(1, 0);
        let b = NodeId::from_seed(1, 1);
        assert_ne!(a, b);
        assert_eq!(a, NodeId::from_seed(1, 0));
        let s = a.short();
        assert_eq!(s.len(), 8);
        assert!(s.bytes().all(|c| BASE32.contains(&c)));
    }
}
