//! Per-peer coalescing of the tree messages produced while handling one input.
//!
//! One input can change many trees at once (an advert with hundreds of entries, a batch of
//! pushed updates): without coalescing, each change would cost its own message and, at a
//! per-message CPU cost, a thousand-root overlay drowns in them at startup. Attach/detach
//! notices, pushes to children and answers to advert requests are therefore collected per
//! destination and sent as one message per kind when the input has been handled. Nothing
//! is delayed: the outbox is emptied before [`Core::handle`](super::Core::handle) returns.

use super::id::NodeId;
use super::message::{AdvertEntry, Message};
use std::collections::BTreeMap;

/// Tree messages waiting for the end of the current input, per destination.
#[derive(Debug, Default)]
pub struct Outbox {
    /// peer -> root -> attach (true) or detach (false); the last word per root wins,
    /// which is also what the receiver would end up with.
    links: BTreeMap<NodeId, BTreeMap<NodeId, bool>>,
    /// peer -> root -> latest state pushed to that child.
    updates: BTreeMap<NodeId, BTreeMap<NodeId, AdvertEntry>>,
    /// peer -> root -> latest state owed as an answer to an advert request.
    answers: BTreeMap<NodeId, BTreeMap<NodeId, AdvertEntry>>,
    /// peer -> (root, suggested parent) pairs to pass on.
    hints: BTreeMap<NodeId, Vec<(NodeId, NodeId)>>,
}

impl Outbox {
    /// We chose `peer` as our parent in `root`'s tree.
    pub fn attach(&mut self, peer: NodeId, root: NodeId) {
        self.links.entry(peer).or_default().insert(root, true);
    }

    /// `peer` is no longer our parent in `root`'s tree (or never was).
    pub fn detach(&mut self, peer: NodeId, root: NodeId) {
        self.links.entry(peer).or_default().insert(root, false);
    }

    /// Push our state in `e.root`'s tree to the child `peer`.
    pub fn update(&mut self, peer: NodeId, e: AdvertEntry) {
        self.updates.entry(peer).or_default().insert(e.root, e);
    }

    /// Answer `peer`'s advert request with our state in `e.root`'s tree.
    pub fn answer(&mut self, peer: NodeId, e: AdvertEntry) {
        self.answers.entry(peer).or_default().insert(e.root, e);
    }

    /// Suggest `parent` to `peer` as a parent worth measuring in `root`'s tree.
    pub fn hint(&mut self, peer: NodeId, root: NodeId, parent: NodeId) {
        let v = self.hints.entry(peer).or_default();
        if !v.contains(&(root, parent)) {
            v.push((root, parent));
        }
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
            && self.updates.is_empty()
            && self.answers.is_empty()
            && self.hints.is_empty()
    }

    /// Turns everything waiting into messages, one per destination and kind (the single-root
    /// forms when there is just one root, so a quiet overlay sends what it always sent).
    pub fn drain(&mut self, mut send: impl FnMut(NodeId, Message)) {
        for (peer, roots) in std::mem::take(&mut self.links) {
            let (mut attach, mut detach) = (Vec::new(), Vec::new());
            for (root, up) in roots {
                if up {
                    attach.push(root);
                } else {
                    detach.push(root);
                }
            }
            match (attach.as_slice(), detach.as_slice()) {
                ([root], []) => send(peer, Message::Attach { root: *root }),
                ([], [root]) => send(peer, Message::Detach { root: *root }),
                _ => send(peer, Message::Links { attach, detach }),
            }
        }
        for (peer, roots) in std::mem::take(&mut self.updates) {
            let mut entries: Vec<AdvertEntry> = roots.into_values().collect();
            if entries.len() == 1 {
                send(peer, Message::TreeUpdate(entries.pop().expect("one")));
            } else {
                send(peer, Message::TreeUpdates(entries));
            }
        }
        for (peer, roots) in std::mem::take(&mut self.answers) {
            let entries = roots.into_values().collect();
            send(peer, Message::Advert { entries });
        }
        for (peer, parents) in std::mem::take(&mut self.hints) {
            send(peer, Message::ParentHint { parents });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> NodeId {
        NodeId::from_seed(9, n)
    }

    fn entry(root: NodeId, dist_us: u32) -> AdvertEntry {
        AdvertEntry {
            root,
            serial: 1,
            dist_us,
            connected: true,
        }
    }

    #[test]
    fn one_message_per_peer_and_kind_and_the_last_word_per_root_wins() {
        let mut o = Outbox::default();
        let (p, q) = (id(1), id(2));
        o.attach(p, id(10));
        o.detach(p, id(11));
        o.detach(p, id(12));
        o.attach(p, id(12)); // switched away and back within one input: attach
        o.detach(q, id(10));
        o.update(p, entry(id(10), 5));
        o.update(p, entry(id(10), 7)); // a later state replaces the earlier one
        o.answer(q, entry(id(11), 3));
        let mut out = Vec::new();
        o.drain(|to, m| out.push((to, m)));
        assert!(o.is_empty());
        let mut attach = vec![id(10), id(12)];
        attach.sort();
        assert!(out.contains(&(
            p,
            Message::Links {
                attach,
                detach: vec![id(11)]
            }
        )));
        assert!(out.contains(&(q, Message::Detach { root: id(10) })));
        assert!(out.contains(&(p, Message::TreeUpdate(entry(id(10), 7)))));
        assert!(out.contains(&(
            q,
            Message::Advert {
                entries: vec![entry(id(11), 3)]
            }
        )));
        assert_eq!(out.len(), 4);
    }
}
