//! What the core has to say: messages and events waiting to be drained.
//!
//! Owns the transmit and event queues and the outbox of tree messages ([`Outputs`]): every
//! concern writes to them, the driver drains them (see the drain rule in
//! [`crate::proto`]). The outbox coalesces the tree messages of one input per peer and is
//! emptied into the transmit queue before [`Core::handle`](super::Core::handle) returns.

use crate::proto::id::NodeId;
use crate::proto::message::{AdvertEntry, Message};
use crate::proto::outbox::Outbox;
use crate::proto::{Event, Transmit};
use std::collections::VecDeque;

/// Messages and events waiting to be drained.
#[derive(Default)]
pub(super) struct Outputs {
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    /// Tree messages of the current input, coalesced per peer.
    outbox: Outbox,
}

impl Outputs {
    /// Queues `msg` to `to`.
    pub(super) fn send(&mut self, to: NodeId, msg: Message) {
        self.transmits.push_back(Transmit { to, msg });
    }

    /// Queues an event.
    pub(super) fn event(&mut self, e: Event) {
        self.events.push_back(e);
    }

    /// Next message to send, if any.
    pub(super) fn pop_transmit(&mut self) -> Option<Transmit> {
        crate::proto::drain::pop_front(&mut self.transmits)
    }

    /// Next event, if any.
    pub(super) fn pop_event(&mut self) -> Option<Event> {
        crate::proto::drain::pop_front(&mut self.events)
    }

    /// We chose `peer` as our parent in `root`'s tree (see [`Outbox::attach`]).
    pub(super) fn attach(&mut self, peer: NodeId, root: NodeId) {
        self.outbox.attach(peer, root);
    }

    /// `peer` is no longer our parent in `root`'s tree (see [`Outbox::detach`]).
    pub(super) fn detach(&mut self, peer: NodeId, root: NodeId) {
        self.outbox.detach(peer, root);
    }

    /// Pushes our state in `e.root`'s tree to the child `peer` (see [`Outbox::update`]).
    pub(super) fn update(&mut self, peer: NodeId, e: AdvertEntry) {
        self.outbox.update(peer, e);
    }

    /// Answers `peer`'s advert request (see [`Outbox::answer`]).
    pub(super) fn answer(&mut self, peer: NodeId, e: AdvertEntry) {
        self.outbox.answer(peer, e);
    }

    /// Suggests `parent` to `peer` in `root`'s tree (see [`Outbox::hint`]).
    pub(super) fn hint(&mut self, peer: NodeId, root: NodeId, parent: NodeId) {
        self.outbox.hint(peer, root, parent);
    }

    /// Turns the tree messages of the input into transmits (at the end of every input).
    pub(super) fn flush_outbox(&mut self) {
        if !self.outbox.is_empty() {
            let transmits = &mut self.transmits;
            self.outbox
                .drain(|to, msg| transmits.push_back(Transmit { to, msg }));
        }
    }
}
