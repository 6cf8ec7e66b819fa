//! The join tokens a node holds, so the overlay's token can be rotated while it runs.
//!
//! A rotation ([`TokenRing::rotate`]) makes a new random token of the next *generation*;
//! the old one becomes the *previous* token. The new token spreads to every member over
//! the authenticated, encrypted connections ([`crate::proto::Packet::Token`]): the node
//! that adopts a newer token sends it to every peer it is connected to, and each peer
//! that finds it newer does the same, so it floods the overlay once. Newer means a higher
//! generation, and between two rotations of one generation (made at once on two nodes) the
//! larger token, so every member ends on the same one.
//!
//! Admission ([`super::auth`]) sends a proof for each token held (the current one, then
//! the previous one) and accepts a peer that proves
//! - our current token (with its current or its previous one: a peer already rotated
//!   sends us the new token after admission), or
//! - our previous token, only if the peer is a member already (alive, suspected or even
//!   declared dead after a crash; not one that left): a member that missed the rotation
//!   (not connected while the token spread, or restarting) is admitted and sent the new
//!   token at once. A newcomer holding only an old token is refused: that is what a
//!   rotation is for. Members that are connected stay connected throughout.

use super::token::{JoinToken, PROOF_LEN, Role};
use std::sync::RwLock;
use tokio::sync::watch;

/// How a peer's proofs matched the tokens held here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    /// The peer proved the current token; nothing to send.
    Current,
    /// The peer proved an older token than ours (or a sibling of one generation): it is
    /// admitted only if it is a member already, and is then sent our current token.
    Behind,
}

/// The tokens held now.
#[derive(Clone, Debug)]
struct Held {
    current: JoinToken,
    generation: u64,
    previous: Option<JoinToken>,
}

/// Called with the current token, its generation and the previous token whenever they
/// change (to persist them); called under the ring's lock, so writes never cross.
pub type OnChange =
    Box<dyn Fn(&JoinToken, u64, Option<&JoinToken>) -> std::io::Result<()> + Send + Sync>;

/// How far ahead of this node's clock a generation from a peer may be: one that is
/// further (a peer pinning the overlay to a token of its choice) is refused.
const MAX_SKEW_MS: u64 = 24 * 3600 * 1000;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A node's current join token, its generation, and the token before it.
pub struct TokenRing {
    held: RwLock<Held>,
    changed: watch::Sender<u64>,
    on_change: Option<OnChange>,
}

impl std::fmt::Debug for TokenRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.held.read().expect("token lock");
        f.debug_struct("TokenRing")
            .field("generation", &held.generation)
            .finish_non_exhaustive()
    }
}

impl TokenRing {
    /// A ring holding `token` of `generation` (and the token before it, if any), calling
    /// `on_change` on every later change.
    pub fn new(
        token: JoinToken,
        generation: u64,
        previous: Option<JoinToken>,
        on_change: Option<OnChange>,
    ) -> TokenRing {
        let previous = previous.filter(|p| *p != token);
        TokenRing {
            held: RwLock::new(Held {
                current: token,
                generation,
                previous,
            }),
            changed: watch::channel(generation).0,
            on_change,
        }
    }

    /// The current token and its generation.
    pub fn current(&self) -> (JoinToken, u64) {
        let held = self.held.read().expect("token lock");
        (held.current.clone(), held.generation)
    }

    /// Signals every change of the current token (the value is its generation).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Replaces the current token by a new random one of a newer generation: the wall
    /// clock in milliseconds (or one past the current generation if that is larger), so a
    /// later rotation wins even on a node that joined with the token and never learned
    /// its generation.
    pub fn rotate(&self) -> (JoinToken, u64) {
        let token = JoinToken::generate();
        let mut held = self.held.write().expect("token lock");
        let generation = held.generation.saturating_add(1).max(now_ms());
        self.replace(&mut held, generation, token);
        (held.current.clone(), held.generation)
    }

    /// Takes `token` of `generation` (from a peer) if it is newer than the current one;
    /// true if so. A generation more than a day ahead of this node's clock is refused. The
    /// current token with a higher generation only updates the generation (a node that
    /// joined with the token learns it).
    pub fn adopt(&self, generation: u64, token: JoinToken) -> bool {
        if generation > now_ms().saturating_add(MAX_SKEW_MS) {
            return false;
        }
        let mut held = self.held.write().expect("token lock");
        if token == held.current {
            if generation > held.generation {
                held.generation = generation;
                self.persist_logged(&held);
            }
            return false;
        }
        let newer = (generation, token.as_bytes()) > (held.generation, held.current.as_bytes());
        if !newer {
            return false;
        }
        self.replace(&mut held, generation, token);
        true
    }

    /// Writes the tokens held with `on_change` (under the lock: writes never cross).
    pub fn persist_now(&self) -> std::io::Result<()> {
        let held = self.held.write().expect("token lock");
        match &self.on_change {
            Some(f) => f(&held.current, held.generation, held.previous.as_ref()),
            None => Ok(()),
        }
    }

    fn persist_logged(&self, held: &Held) {
        if let Some(f) = &self.on_change
            && let Err(e) = f(&held.current, held.generation, held.previous.as_ref())
        {
            tracing::warn!(error = %e, "cannot store the join token");
        }
    }

    /// Makes `token` current. The token it replaces becomes the previous one, except a
    /// sibling of the same generation (two rotations at once): the previous one stays the
    /// token both came from, which members that missed both still hold.
    fn replace(&self, held: &mut Held, generation: u64, token: JoinToken) {
        let old = std::mem::replace(&mut held.current, token);
        if generation > held.generation || held.previous.is_none() {
            held.previous = Some(old);
        }
        held.generation = generation;
        self.persist_logged(held);
        self.changed.send_replace(generation);
    }

    /// This side's proofs for a session: one per token held, the current one first.
    pub fn proofs(&self, role: Role, exporter: &[u8]) -> Vec<u8> {
        let held = self.held.read().expect("token lock");
        let mut out = held.current.proof(role, exporter).to_vec();
        if let Some(previous) = &held.previous {
            out.extend_from_slice(&previous.proof(role, exporter));
        }
        out
    }

    /// How the peer's `proofs` (made for `role`) match the tokens held; `None` if none
    /// does. Garbage of any length is no match.
    pub fn verify(&self, role: Role, exporter: &[u8], proofs: &[u8]) -> Option<Match> {
        if proofs.is_empty()
            || !proofs.len().is_multiple_of(PROOF_LEN)
            || proofs.len() > 2 * PROOF_LEN
        {
            return None;
        }
        let held = self.held.read().expect("token lock");
        let mut theirs = proofs.chunks(PROOF_LEN);
        let their_current = theirs.next()?;
        let their_previous = theirs.next();
        // Ours proved by their current token, or (they rotated since) by their previous.
        if held.current.verify(role, exporter, their_current)
            || their_previous.is_some_and(|p| held.current.verify(role, exporter, p))
        {
            return Some(Match::Current);
        }
        // They hold our previous token as their current one (they missed our rotation),
        // or both rotated from the same token at once.
        let previous = held.previous.as_ref()?;
        let behind = previous.verify(role, exporter, their_current)
            || their_previous.is_some_and(|p| previous.verify(role, exporter, p));
        behind.then_some(Match::Behind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotation_keeps_the_previous_token_for_members_behind() {
        let t0 = JoinToken::generate();
        let persisted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = persisted.clone();
        let a = TokenRing::new(
            t0.clone(),
            0,
            None,
            Some(Box::new(move |_, g, _| {
                log.lock().unwrap().push(g);
                Ok(())
            })),
        );
        let b = TokenRing::new(t0.clone(), 0, None, None);
        let session = [5u8; 32];
        let (d, acc) = (Role::Dialer, Role::Acceptor);
        assert_eq!(
            a.verify(d, &session, &b.proofs(d, &session)),
            Some(Match::Current)
        );

        let (t1, g1) = a.rotate();
        assert!(g1 > 1_700_000_000_000, "a wall-clock generation");
        assert_eq!(*persisted.lock().unwrap(), vec![g1]);
        // b is behind a; a, rotated, still verifies b's old token but flags it.
        assert_eq!(
            a.verify(d, &session, &b.proofs(d, &session)),
            Some(Match::Behind)
        );
        // a's proofs (new, old) still verify at b, which just has not rotated yet.
        assert_eq!(
            b.verify(acc, &session, &a.proofs(acc, &session)),
            Some(Match::Current)
        );
        // A newcomer holding only the new token is admitted by a, not by b (until b adopts).
        let newcomer = TokenRing::new(t1.clone(), 0, None, None);
        assert_eq!(
            a.verify(d, &session, &newcomer.proofs(d, &session)),
            Some(Match::Current)
        );
        assert_eq!(b.verify(d, &session, &newcomer.proofs(d, &session)), None);
        assert!(b.adopt(g1, t1.clone()));
        assert!(!b.adopt(g1, t1), "the same token twice is no change");
        assert!(!b.adopt(0, t0.clone()), "an older generation is no change");
        assert_eq!(
            b.verify(d, &session, &newcomer.proofs(d, &session)),
            Some(Match::Current)
        );
        // Someone holding only the old token, e.g. a leaked copy, matches only as behind.
        let stale = TokenRing::new(t0, 0, None, None);
        assert_eq!(
            a.verify(d, &session, &stale.proofs(d, &session)),
            Some(Match::Behind)
        );
        // Garbage never matches.
        for bad in [&[][..], &[1u8; 31], &[1u8; 32], &[1u8; 96]] {
            assert_eq!(a.verify(d, &session, bad), None);
        }
    }

    #[test]
    fn two_rotations_of_one_generation_settle_on_the_same_token() {
        let t0 = JoinToken::generate();
        let a = TokenRing::new(t0.clone(), 0, None, None);
        let b = TokenRing::new(t0, 0, None, None);
        let ta = JoinToken::generate();
        let tb = JoinToken::generate();
        assert!(a.adopt(1, ta.clone()) && b.adopt(1, tb.clone()));
        let session = [9u8; 32];
        // Siblings: each sees the other as behind, and each sends its token.
        let (d, acc) = (Role::Dialer, Role::Acceptor);
        assert_eq!(
            a.verify(d, &session, &b.proofs(d, &session)),
            Some(Match::Behind)
        );
        assert_eq!(
            b.verify(acc, &session, &a.proofs(acc, &session)),
            Some(Match::Behind)
        );
        a.adopt(1, tb.clone());
        b.adopt(1, ta.clone());
        assert_eq!(a.current().0, b.current().0, "both keep the larger token");
    }

    #[test]
    fn pinned_generations_are_refused_and_siblings_keep_the_common_previous() {
        let t0 = JoinToken::generate();
        let a = TokenRing::new(t0.clone(), 0, None, None);
        assert!(
            !a.adopt(u64::MAX, JoinToken::generate()),
            "a far-future generation"
        );
        // Learning the generation of the token already held changes nothing else.
        assert!(!a.adopt(5, t0.clone()));
        assert_eq!(a.current(), (t0.clone(), 5));
        let (t1, g1) = a.rotate();
        assert!(g1 > 5 && t1 != t0);
        // A sibling of the same generation replaces t1 if larger; t0 stays the previous.
        let sibling = JoinToken::generate();
        let took = a.adopt(g1, sibling.clone());
        assert_eq!(took, sibling.as_bytes() > t1.as_bytes());
        let session = [3u8; 32];
        let stale = TokenRing::new(t0, 0, None, None);
        assert_eq!(
            a.verify(
                Role::Dialer,
                &session,
                &stale.proofs(Role::Dialer, &session)
            ),
            Some(Match::Behind),
            "a member holding the token both came from is still let in"
        );
    }
}
