//! Inputs from outside the trees' own messages: members coming and going, and the dispatch of every received message.
//!
//! Owns no fields: a member coming or going touches nearly every part of the core, and a
//! message is handed to the part it is about.

use super::Core;
use super::trees::{entry_of, no_path};
use crate::proto::candidates::Role;
use crate::proto::id::NodeId;
use crate::proto::membership::MemberState;
use crate::proto::message::Message;
use crate::proto::{DownReason, Event};

/// Each message from a peer that is no member counts at least this many bytes against it
/// ([`Event::Unsolicited`]). Small, unlike a collective message's floor: a member declared
/// dead by mistake sends its backlog (up to a writer queue of mostly small frames) before
/// it hears, and must stay far below the allowance; a flood of tiny frames is still cut
/// off after 131,072 of them.
pub(crate) const NON_MEMBER_MIN_BYTES: u64 = 64;

/// Near candidates asked for their state in a member's tree when this node learns of the
/// member (see `handle_member_up`).
const LATE_ROOT_ASKS: usize = 4;

/// How far past its serial one serial request may move a root (see `Schedule::serial_asked`):
/// far more than a root's serial advances in days of refreshes.
const MAX_SERIAL_JUMP: u32 = 1 << 16;

impl Core {
    /// A member joined (or is known at start): a tree is tracked for it, and it is queued for the measuring sweep.
    pub(super) fn handle_member_up(&mut self, id: NodeId) {
        if id == self.id || !self.members.up(id) {
            return;
        }
        self.out.event(Event::MemberUp { id });
        self.discovery.table.touch();
        // Back after we declared it dead: we dropped it from our children in every tree,
        // and it may not have declared us dead in turn (failure detection is not
        // symmetric), so it may still count us as its parent and wait for our updates (a
        // refresh arrives only after minutes of quiet). Asked to resync, it sends its
        // attaches again.
        if self.trees.index_of(id).is_some() {
            self.send(id, Message::Resync);
        }
        self.update_sharing();
        // (Turning shared trees on or off may just have taken it up.)
        if self.tracks_tree(id) && self.trees.live_root(id).is_none() {
            self.start_tree(id);
        }
        // Measured by the sweep; the candidate set is topped up with random members at the
        // next probe round (taking the first members to arrive would make every node of a
        // fresh overlay watch the same few peers, and load them with everyone's traffic).
        self.probing.meet(id, self.config.sweep_limit);
    }

    /// A member left or died: everything about it is forgotten, its tree dropped, and the trees it was our parent in detached and re-judged.
    pub(super) fn handle_member_down(&mut self, id: NodeId, reason: DownReason) {
        let state = match reason {
            DownReason::Left => MemberState::Left,
            DownReason::Dead => MemberState::Dead,
        };
        if id == self.id || !self.members.down(id, state) {
            return;
        }
        self.out.event(Event::MemberDown { id, reason });
        self.discovery.table.remove(&id);
        self.discovery.named.remove(&id);
        self.nbrs.forget(&id);
        self.probing.forget(&id);
        self.bw.forget(&id);
        self.heard.forget(&id);
        self.adverts.forget_peer(&id);
        self.resync.forget(&id);
        self.asks.forget_peer(&id);
        self.end_tree(id);
        self.update_sharing();
        for ri in 0..self.trees.len() {
            let Some(t) = self.trees.get_mut(ri) else {
                continue;
            };
            t.children.remove(&id);
            if t.parent == Some(id) {
                self.stats.parents_lost += 1;
                self.detach(ri);
                self.evaluate_all(ri);
            }
        }
        self.refill();
    }

    /// Starts tracking `id`'s tree: the root joined, or is now of our concern (see
    /// `shared`).
    pub(super) fn start_tree(&mut self, id: NodeId) {
        self.trees.track(id, self.now);
        self.out.event(Event::RootAdded { root: id });
        self.ask_for_tree(id);
    }

    /// Asks for `id`'s tree as [`Core::start_tree`] does.
    pub(super) fn ask_for_tree(&mut self, id: NodeId) {
        // What our candidates told us about this root before we knew it was dropped
        // (`handle_entry` keeps entries of live roots only), and a candidate whose state in
        // the tree has settled advertises it again only in its periodic full advert (every
        // `full_advert_every` serial periods or more): until then this node would attach to
        // whatever entry it hears first, across the wide area if need be. So the nearest
        // few are asked now, answered at once by those that know the root. One settled
        // cluster mate is enough (the rules refine from there), and a member that has just
        // joined has no settled tree anywhere yet, so asking more would be wasted.
        let cands = &self.nbrs.cands;
        let mut near: Vec<(u32, NodeId)> = (cands.watched())
            .filter(|p| *p != id && cands.role(p) == Some(Role::Near))
            .filter_map(|p| self.nbrs.rtt_us(&p).map(|r| (r, p)))
            .collect();
        near.sort_unstable();
        for (_, peer) in near.into_iter().take(LATE_ROOT_ASKS) {
            self.stats.asks += 1;
            self.asks.queue_ask(peer, id, 0);
        }
        // With shared trees, nodes take up a tree as their view of the clusters places its
        // root, each at its own time: the near peers may not keep it yet, and the root's
        // state, settled, is not advertised again. The root always answers.
        if self.sharing().is_on() {
            self.stats.asks += 1;
            self.asks.queue_ask(id, id, 0);
        }
    }

    /// Stops tracking `id`'s tree, if we do: the root is gone, or no longer of our concern
    /// (see `shared`). Our children in it are told, and our parent.
    pub(super) fn end_tree(&mut self, id: NodeId) {
        let Some((ri, t)) = self.trees.drop_root(id) else {
            return;
        };
        if let Some(p) = t.parent {
            self.out.event(Event::ParentChanged {
                root: id,
                old: t.parent,
                new: None,
            });
            // A live root's tree we leave: the parent stops counting us.
            if self.members.is_alive(&id) {
                self.out.detach(p, id);
            }
        }
        self.out.event(Event::RootRemoved { root: id });
        // Children whose membership still counts the root alive would keep us as their
        // parent, and advertise a path through us, after we dropped the tree; if the root
        // comes back, our fresh state would take one of them as parent (any serial is new
        // to it): a cycle. Told now, they repair while we are gone.
        let gone = no_path(id, t.serial);
        for &c in &t.children {
            self.out.update(c, gone);
        }
        self.asks.forget_root(ri);
        self.hints.forget_root(ri);
        self.adverts.forget_root(ri);
        self.heard.forget_root(ri);
    }

    /// Dispatches one message from a live member.
    pub(super) fn handle_message(&mut self, from: NodeId, msg: Message) {
        if from == self.id {
            return;
        }
        if !self.members.is_alive(&from) {
            // Only members take part; late messages of departed ones are dropped, and held
            // against the sender: a peer that holds the token but is no member is cut off
            // once it sends more than an honest late sender would.
            let bytes = (msg.encoded_len() as u64).max(NON_MEMBER_MIN_BYTES);
            return self.out.event(Event::Unsolicited { from, bytes });
        }
        self.resync_if_lost(from);
        match msg {
            Message::Ping {
                sent_us,
                rtt_hint_us,
                watch,
            } => self.on_ping(from, sent_us, rtt_hint_us, watch, true),
            Message::Pong { sent_us } => self.on_pong(from, sent_us),
            Message::PongPing {
                sent_us,
                ping_sent_us,
                watch,
            } => {
                self.on_pong(from, sent_us);
                self.on_ping(from, ping_sent_us, None, watch, false);
            }
            Message::Advert { entries } => {
                self.measure_unwatched_sender(from);
                self.handle_entries(from, &entries, false)
            }
            Message::TreeUpdate(e) => self.handle_entry(from, e, true),
            Message::TreeUpdates(entries) => self.handle_entries(from, &entries, true),
            Message::Attach { root } => self.handle_link(from, root, true),
            Message::Detach { root } => self.handle_link(from, root, false),
            Message::Links { attach, detach } => {
                for root in detach {
                    self.handle_link(from, root, false);
                }
                for root in attach {
                    self.handle_link(from, root, true);
                }
            }
            Message::SerialRequest { root, serial } => {
                let own = self.trees.own().serial;
                if root == self.id && serial > own {
                    // At most `MAX_SERIAL_JUMP` past our serial per request, so that a
                    // hostile member cannot spend the serial space in a few requests.
                    let asked = serial.min(own.saturating_add(MAX_SERIAL_JUMP));
                    self.schedule.serial_asked = self.schedule.serial_asked.max(asked);
                    let period = self.config.serial_period;
                    self.schedule.tick_soon(
                        self.now,
                        self.config.serial_request_gap,
                        period / 4,
                        period,
                    );
                }
            }
            Message::AdvertRequest { roots } => {
                let mut now_entries = Vec::new();
                for (root, serial) in roots {
                    let Some(ri) = self.trees.live_root(root) else {
                        continue;
                    };
                    let t = self.trees.live(ri);
                    if t.serial >= serial {
                        now_entries.push(entry_of(t));
                    } else {
                        self.asks.wait(ri, from, serial, self.now);
                    }
                }
                if !now_entries.is_empty() {
                    self.send(
                        from,
                        Message::Advert {
                            entries: now_entries,
                        },
                    );
                }
            }
            Message::Collective(m) => {
                let now = self.now;
                self.with_collectives(|c, v| c.handle_message(now, v, from, m));
            }
            Message::Resync => {
                self.adverts.owe_full(from);
                self.resend_links(from);
            }
            Message::Cluster(m) => self.handle_cluster_message(from, m),
            Message::TrainRequest { id, packets, size } => {
                self.handle_train_request(from, id, packets, size)
            }
            Message::PathSaturated { kbps } => self.handle_path_saturated_heard(from, kbps),
            Message::ParentQuery { roots } => {
                let parents: Vec<(NodeId, NodeId)> = roots
                    .into_iter()
                    .filter_map(|r| self.trees.find(r).and_then(|t| t.parent).map(|p| (r, p)))
                    .collect();
                if !parents.is_empty() {
                    self.send(from, Message::ParentHint { parents });
                }
            }
            Message::ParentHint { parents } => {
                for (root, q) in parents {
                    if q == self.id || !self.members.is_alive(&q) {
                        continue;
                    }
                    let Some(ri) = self.trees.live_root(root) else {
                        continue;
                    };
                    let t = self.trees.live(ri);
                    if t.parent == Some(q) || t.children.contains(&q) {
                        continue;
                    }
                    // Measure q, and trade states in this one tree: q's answer lets us
                    // judge it, ours lets q judge us (it may be the one to move).
                    let (e, serial) = (entry_of(t), t.serial);
                    self.measure(q);
                    self.out.answer(q, e);
                    self.asks.queue_ask(q, root, serial);
                }
            }
        }
    }

    /// `from` attached to us (`true`) or detached from us in `root`'s tree.
    pub(super) fn handle_link(&mut self, from: NodeId, root: NodeId, attach: bool) {
        let Some(ri) = self.trees.live_root(root) else {
            if attach {
                // A tree we dropped (its root is dead to us): the child must not count on
                // us. A serial of 0 is older than any it holds, which a parent's "no path"
                // may be (see `apply_parent_state`).
                self.out.update(from, no_path(root, 0));
            }
            return;
        };
        let t = self.trees.live_mut(ri);
        if attach {
            if t.children.insert(from) {
                self.introduce_siblings(ri, from);
            }
            let e = entry_of(self.trees.live(ri));
            self.out.update(from, e);
        } else {
            t.children.remove(&from);
        }
    }
}
