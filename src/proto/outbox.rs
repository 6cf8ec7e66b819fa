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
///
/// Links, pushes and answers are kept as flat lists of `(peer, root, order, what)` and
/// sorted when drained (one allocation per list, reused from input to input, instead of a
/// map node per peer and root): the result is what per-peer maps of per-root maps with
/// "the last word per root wins" would give.
#[derive(Debug, Default)]
pub struct Outbox {
    /// (peer, root, order, attach (true) or detach (false)); the last word per root wins,
    /// which is also what the receiver would end up with.
    links: Vec<(NodeId, NodeId, u32, bool)>,
    /// (peer, root, order, latest state pushed to that child).
    updates: Vec<(NodeId, NodeId, u32, AdvertEntry)>,
    /// (peer, root, order, latest state owed as an answer to an advert request).
    answers: Vec<(NodeId, NodeId, u32, AdvertEntry)>,
    /// peer -> (root, suggested parent) pairs to pass on.
    hints: BTreeMap<NodeId, Vec<(NodeId, NodeId)>>,
    /// Order of the next addition (ties between equal (peer, root) keys go to the latest).
    seq: u32,
}

impl Outbox {
    fn next(&mut self) -> u32 {
        self.seq += 1;
        self.seq
    }

    /// We chose `peer` as our parent in `root`'s tree.
    pub fn attach(&mut self, peer: NodeId, root: NodeId) {
        let n = self.next();
        self.links.push((peer, root, n, true));
    }

    /// `peer` is no longer our parent in `root`'s tree (or never was).
    pub fn detach(&mut self, peer: NodeId, root: NodeId) {
        let n = self.next();
        self.links.push((peer, root, n, false));
    }

    /// Push our state in `e.root`'s tree to the child `peer`.
    pub fn update(&mut self, peer: NodeId, e: AdvertEntry) {
        let n = self.next();
        self.updates.push((peer, e.root, n, e));
    }

    /// Answer `peer`'s advert request with our state in `e.root`'s tree.
    pub fn answer(&mut self, peer: NodeId, e: AdvertEntry) {
        let n = self.next();
        self.answers.push((peer, e.root, n, e));
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
        self.seq = 0;
        last_words(&mut self.links);
        for roots in self.links.chunk_by(|a, b| a.0 == b.0) {
            let peer = roots[0].0;
            let (mut attach, mut detach) = (Vec::new(), Vec::new());
            for &(_, root, _, up) in roots {
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
        self.links.clear();
        last_words(&mut self.updates);
        for roots in self.updates.chunk_by(|a, b| a.0 == b.0) {
            let peer = roots[0].0;
            if let [(_, _, _, e)] = roots {
                send(peer, Message::TreeUpdate(*e));
            } else {
                send(
                    peer,
                    Message::TreeUpdates(roots.iter().map(|r| r.3).collect()),
                );
            }
        }
        self.updates.clear();
        last_words(&mut self.answers);
        // Peers in the order first owed: a sender that ranks them (an entry notice goes to
        // the mates nearest the root first) gets that order on the wire, where each send
        // costs time and the last of a hundred mates hears two milliseconds late.
        let mut owed: Vec<&[_]> = self.answers.chunk_by(|a, b| a.0 == b.0).collect();
        owed.sort_by_key(|roots| roots.iter().map(|r| r.2).min());
        for roots in owed {
            let entries = roots.iter().map(|r| r.3).collect();
            send(roots[0].0, Message::Advert { entries });
        }
        self.answers.clear();
        for (peer, parents) in std::mem::take(&mut self.hints) {
            send(peer, Message::ParentHint { parents });
        }
    }
}

/// Sorts `list` by (peer, root, order) and keeps only the last word for every (peer, root):
/// peers ascending, and each peer's roots ascending.
fn last_words<T: Copy>(list: &mut Vec<(NodeId, NodeId, u32, T)>) {
    list.sort_unstable_by_key(|w| (w.0, w.1, w.2));
    let mut kept = 0;
    for i in 0..list.len() {
        // The last of a run of equal (peer, root) is the latest word.
        let w = list[i];
        if list.get(i + 1).is_none_or(|n| (n.0, n.1) != (w.0, w.1)) {
            list[kept] = w;
            kept += 1;
        }
    }
    list.truncate(kept);
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

    #[test]
    fn answers_leave_in_the_order_first_owed_not_by_peer_id() {
        let mut o = Outbox::default();
        let mut peers: Vec<NodeId> = (1..=6).map(id).collect();
        peers.sort();
        peers.reverse(); // owed from the highest id down
        for (i, p) in peers.iter().enumerate() {
            o.answer(*p, entry(id(20), i as u32));
        }
        o.answer(peers[0], entry(id(21), 9)); // a second root joins its peer's message
        let mut out = Vec::new();
        o.drain(|to, _| out.push(to));
        assert_eq!(out, peers);
    }
}
