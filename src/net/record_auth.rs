//! Membership records signed with the node's Ed25519 key
//! ([`crate::proto::gossip::auth`] says what is signed and why).
//!
//! A proof is the owner's 32-byte public key followed by its 64-byte signature. The key
//! must hash to the record's id the way [`super::identity`] derives ids from certificates
//! (the first 16 bytes of SHA-256 over the SubjectPublicKeyInfo), so a proof made with any
//! other key is refused.

use super::identity::{Identity, IdentityError};
use crate::proto::NodeId;
use crate::proto::gossip::RecordAuth;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};

/// Length of a proof: public key, then signature.
pub const PROOF_LEN: usize = 32 + 64;

/// DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): the 32-byte key follows.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// Signs this node's records with its key and checks others' against their ids.
pub struct Ed25519Records {
    pair: Ed25519KeyPair,
}

impl Ed25519Records {
    /// The signer of `identity`'s records.
    ///
    /// ```
    /// use overlay::net::identity::Identity;
    /// use overlay::net::record_auth::Ed25519Records;
    /// use overlay::proto::gossip::RecordAuth;
    ///
    /// let me = Identity::generate()?;
    /// let records = Ed25519Records::new(&me)?;
    /// let proof = records.sign(b"statement");
    /// assert!(records.verify(&me.id(), b"statement", &proof));
    /// assert!(!records.verify(&me.id(), b"another statement", &proof));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(identity: &Identity) -> Result<Ed25519Records, IdentityError> {
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(identity.key_pkcs8())
            .map_err(|e| IdentityError::Generate(format!("Ed25519 key: {e}")))?;
        Ok(Ed25519Records { pair })
    }
}

/// The id bound to an Ed25519 public key (as [`super::identity::node_id_of`] derives it
/// from a certificate holding that key).
pub fn id_of_key(key: &[u8; 32]) -> NodeId {
    let mut spki = ED25519_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(key);
    let digest = ring::digest::digest(&ring::digest::SHA256, &spki);
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    NodeId(bytes)
}

impl RecordAuth for Ed25519Records {
    fn sign(&self, statement: &[u8]) -> Vec<u8> {
        let mut proof = Vec::with_capacity(PROOF_LEN);
        proof.extend_from_slice(self.pair.public_key().as_ref());
        proof.extend_from_slice(self.pair.sign(statement).as_ref());
        proof
    }

    fn verify(&self, id: &NodeId, statement: &[u8], proof: &[u8]) -> bool {
        if proof.len() != PROOF_LEN {
            return false;
        }
        let (key, signature) = proof.split_at(32);
        let key: &[u8; 32] = key.try_into().expect("32 bytes");
        id_of_key(key) == *id
            && UnparsedPublicKey::new(&ED25519, key)
                .verify(statement, signature)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_in_a_proof_hashes_to_the_id_of_the_certificate() {
        let me = Identity::generate().unwrap();
        let records = Ed25519Records::new(&me).unwrap();
        let proof = records.sign(b"x");
        assert_eq!(proof.len(), PROOF_LEN);
        let key: [u8; 32] = proof[..32].try_into().unwrap();
        assert_eq!(id_of_key(&key), me.id());
    }

    #[test]
    fn only_the_owner_of_an_id_can_vouch_for_it() {
        let (a, b) = (Identity::generate().unwrap(), Identity::generate().unwrap());
        let (ra, rb) = (
            Ed25519Records::new(&a).unwrap(),
            Ed25519Records::new(&b).unwrap(),
        );
        let proof = ra.sign(b"a is alive at 7");
        // Anyone checks it, with either signer.
        assert!(ra.verify(&a.id(), b"a is alive at 7", &proof));
        assert!(rb.verify(&a.id(), b"a is alive at 7", &proof));
        // B's own proof of a statement about A: its key does not hash to A's id.
        assert!(!ra.verify(&a.id(), b"a is alive at 7", &rb.sign(b"a is alive at 7")));
        // Another statement, a flipped bit, a cut proof, an empty one.
        assert!(!ra.verify(&a.id(), b"a is alive at 8", &proof));
        let mut flipped = proof.clone();
        flipped[40] ^= 1;
        assert!(!ra.verify(&a.id(), b"a is alive at 7", &flipped));
        assert!(!ra.verify(&a.id(), b"a is alive at 7", &proof[..PROOF_LEN - 1]));
        assert!(!ra.verify(&a.id(), b"a is alive at 7", &[]));
        // A's proof does not vouch for B.
        assert!(!ra.verify(&b.id(), b"a is alive at 7", &proof));
    }
}
