//! Node identities.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A node's identity: 16 bytes derived from its TLS public key by the network driver
/// (and from a seed in the simulator). Ordered bytewise; the order breaks ties between
/// equal distances in the tree rules, so it must be total and the same on every node.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub [u8; 16]);

// Encoded as a byte string (one length byte + 16 bytes in postcard): one copy instead of
// sixteen serde calls, which matters when adverts carry an entry per root.
// Human-readable formats (JSON) get the 32 hex digits of [`NodeId::to_hex`] instead.
impl Serialize for NodeId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&self.to_hex())
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NodeId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("16 bytes of node id")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<NodeId, E> {
                NodeId::from_hex(v).ok_or_else(|| E::custom("expected 32 hex digits"))
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<NodeId, E> {
                let bytes: [u8; 16] = v
                    .try_into()
                    .map_err(|_| E::invalid_length(v.len(), &self))?;
                Ok(NodeId(bytes))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<NodeId, A::Error> {
                let mut bytes = [0u8; 16];
                for (i, b) in bytes.iter_mut().enumerate() {
                    *b = seq
                        .next_element()?
                        .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?;
                }
                Ok(NodeId(bytes))
            }
        }
        if d.is_human_readable() {
            d.deserialize_str(V)
        } else {
            d.deserialize_bytes(V)
        }
    }
}

/// Exactly `2 * N` hex digits (either case) as `N` bytes; `None` otherwise.
pub fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    decode_hex(s)?.try_into().ok()
}

/// An even number of hex digits (either case) as bytes; `None` otherwise.
pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    // Digits only: `from_str_radix` would also take a sign ("+f" as 0f), so two
    // spellings would parse to the same token or id.
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
        .collect()
}

/// Bytes as lowercase hex digits.
pub fn encode_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

impl NodeId {
    /// Builds an id from raw bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        NodeId(bytes)
    }

    /// A deterministic, well-spread id for simulations and tests: node `n` of seed `seed`.
    pub fn from_seed(seed: u64, n: u64) -> Self {
        let mut s =
            crate::proto::rng::SplitMix64::new(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let a = s.next_u64().to_be_bytes();
        let b = s.next_u64().to_be_bytes();
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&a);
        bytes[8..].copy_from_slice(&b);
        NodeId(bytes)
    }

    /// All 16 bytes as 32 lowercase hex digits (the full id, e.g. in JSON).
    pub fn to_hex(&self) -> String {
        encode_hex(&self.0)
    }

    /// Parses [`NodeId::to_hex`]'s output; `None` unless exactly 32 hex digits.
    pub fn from_hex(s: &str) -> Option<NodeId> {
        parse_hex(s).map(NodeId)
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
        assert_eq!(NodeId::from_hex(&a.to_hex()), Some(a));
        assert_eq!(NodeId::from_hex("zz"), None);
    }

    #[test]
    fn hex_is_digits_only_not_signed_numbers() {
        // Found by fuzzing the join token's parser: "+a" was read as 0a.
        assert_eq!(decode_hex("+a"), None);
        assert_eq!(decode_hex("0A"), Some(vec![10]));
        let signed = format!("+{}", &"ab".repeat(16)[1..]);
        assert_eq!(NodeId::from_hex(&signed), None);
    }
}

/// A fast hasher for maps keyed by [`NodeId`] (and small tuples of ids and indices). Ids
/// are already uniformly random bytes, so SipHash's protection buys nothing here and cost
/// most of the simulator's time; this mixes 8-byte words FxHash-style.
#[derive(Clone, Copy, Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A `HashMap` with [`IdHasher`].
pub type IdMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;
/// A `HashSet` with [`IdHasher`].
pub type IdSet<K> = std::collections::HashSet<K, std::hash::BuildHasherDefault<IdHasher>>;
