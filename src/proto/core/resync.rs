//! Resync after lost messages: a peer the transport may have lost messages to
//! ([`Input::LinkLost`](crate::proto::Input::LinkLost)) is sent our state again once it is
//! heard from.
//!
//! Owns the peers waiting for that resync and when each was last resynced ([`Resync`]),
//! which rate limits the resends while the transport keeps losing.

use super::Core;
use super::trees::entry_of;
use crate::proto::id::{IdMap as HashMap, NodeId};
use crate::proto::time::Time;
use std::collections::BTreeSet;
use std::time::Duration;

/// A peer is sent our state again after lost messages at most once per this share of the
/// serial period: while the transport keeps losing (a full writer queue), every resend
/// would be lost too, and the peer's replies would set off the next one.
const RESYNC_GAP_PER_SERIAL_PERIOD: u32 = 4;

/// Peers to resync after lost messages.
#[derive(Default)]
pub(super) struct Resync {
    /// Peers the transport may have lost messages to, resynced when next heard from.
    lost_to: BTreeSet<NodeId>,
    /// When each peer was last resynced (at most `RESYNC_GAP_PER_SERIAL_PERIOD` times per
    /// serial period).
    resynced_at: HashMap<NodeId, Time>,
}

impl Resync {
    /// The transport may have lost messages to `peer`.
    pub(super) fn lost(&mut self, peer: NodeId) {
        self.lost_to.insert(peer);
    }

    /// Whether `peer`, just heard from, is to be resynced now (serial period `period`);
    /// if so it no longer waits.
    fn take_due(&mut self, peer: &NodeId, now: Time, period: Duration) -> bool {
        if !self.lost_to.contains(peer) {
            return false;
        }
        let gap = period / RESYNC_GAP_PER_SERIAL_PERIOD;
        let due = (self.resynced_at.get(peer)).is_none_or(|at| now.saturating_since(*at) >= gap);
        if due {
            self.lost_to.remove(peer);
        }
        due
    }

    /// Forgets `peer` (it went away).
    pub(super) fn forget(&mut self, peer: &NodeId) {
        self.lost_to.remove(peer);
        self.resynced_at.remove(peer);
    }

    /// Forgets the resyncs older than a serial period (`period`).
    pub(super) fn expire(&mut self, now: Time, period: Duration) {
        self.resynced_at
            .retain(|_, at| now.saturating_since(*at) < period);
    }
}

impl Core {
    /// A message from `from`: resyncs it first if messages to it may have been lost.
    pub(super) fn resync_if_lost(&mut self, from: NodeId) {
        if self
            .resync
            .take_due(&from, self.now, self.config.serial_period)
        {
            self.resync_after_loss(from);
        }
    }

    /// Sends `peer` again what messages the transport lost may have carried: our full
    /// state if it takes our adverts, an attach in every tree it is our parent in (else
    /// it would stop refreshing us, and we would detach after six quiet serial periods),
    /// and our state in every tree it is our child in. Nothing for a peer we share none of
    /// these with (a closed connection that only carried measurements).
    fn resync_after_loss(&mut self, peer: NodeId) {
        let mut resent = self.nbrs.cands.is_advert_target(&peer);
        if resent {
            self.adverts.owe_full(peer);
        }
        resent |= self.resend_links(peer);
        if resent {
            self.stats.resyncs_after_loss += 1;
            self.resync.resynced_at.insert(peer, self.now);
        }
    }

    /// Sends `peer` an attach in every tree it is our parent in and our state in every
    /// tree it is our child in; whether there was any. `peer` may have lost them, or have
    /// declared us dead meanwhile and dropped us from its children (see
    /// `Core::handle_member_up`).
    pub(super) fn resend_links(&mut self, peer: NodeId) -> bool {
        let mut any = false;
        for t in self.trees.iter() {
            if t.parent == Some(peer) {
                self.out.attach(peer, t.root);
                any = true;
            } else if t.children.contains(&peer) {
                self.out.update(peer, entry_of(t));
                any = true;
            }
        }
        any
    }
}
