//! Questions to other nodes: advert requests, parent queries and serial requests, rate limited.
//!
//! Owns the pending requests both ways ([`Asks`]): the advert requests received that wait
//! for our serial, the requests sent (for rate limiting), and the requests batched until
//! the next advert flush. They are kept together because they are expired together and
//! forgotten together when a peer or a root goes away.

use super::Core;
use super::trees::RootIdx;
use crate::proto::id::{IdMap as HashMap, NodeId};
use crate::proto::message::Message;
use crate::proto::time::Time;
use crate::proto::tree::{CandidateView, TreeState, dist_moved};
use std::collections::BTreeMap;
use std::time::Duration;

/// The same parent query, with nothing changed on either side, is sent again only after
/// this long.
const REQUERY_AFTER: Duration = Duration::from_secs(60);

/// A parent query sent: when, and what would make asking again worth it.
#[derive(Clone, Copy)]
struct Query {
    at: Time,
    /// Our parent at the time.
    parent: Option<NodeId>,
    /// The candidate's dist at the time.
    dist_us: u32,
    /// How many times in a row it was asked with both unchanged.
    repeats: u8,
}

/// Advert requests, parent queries and serial requests, in and out.
#[derive(Default)]
pub(super) struct Asks {
    /// Advert requests received that wait for our serial to reach the asked one.
    waiting: HashMap<RootIdx, Vec<(NodeId, u32, Time)>>,
    /// Advert requests and parent queries sent, for rate limiting.
    asked: HashMap<(NodeId, RootIdx), (u32, Time)>,
    /// Parent queries sent, per (candidate, tree).
    queried: HashMap<(NodeId, RootIdx), Query>,
    /// Serial requests sent, per tree.
    serial_requested: HashMap<RootIdx, Time>,
    /// Advert requests batched until the next flush.
    out_asks: BTreeMap<NodeId, Vec<(NodeId, u32)>>,
    /// Parent queries batched until the next flush.
    out_queries: BTreeMap<NodeId, Vec<NodeId>>,
}

impl Asks {
    /// Batches an advert request to `peer` for `root`'s state at `serial` or later.
    pub(super) fn queue_ask(&mut self, peer: NodeId, root: NodeId, serial: u32) {
        self.out_asks.entry(peer).or_default().push((root, serial));
    }

    /// `from` asked for our state in tree `ri` once our serial reaches `serial`.
    pub(super) fn wait(&mut self, ri: RootIdx, from: NodeId, serial: u32, now: Time) {
        self.waiting
            .entry(ri)
            .or_default()
            .push((from, serial, now));
    }

    /// The peers whose requests in tree `ri` our serial `serial` now answers (no longer
    /// waiting).
    pub(super) fn answerable(&mut self, ri: RootIdx, serial: u32) -> Vec<NodeId> {
        let Some(waiting) = self.waiting.get_mut(&ri) else {
            return Vec::new();
        };
        let ready: Vec<NodeId> = waiting
            .iter()
            .filter(|(_, s, _)| *s <= serial)
            .map(|(p, _, _)| *p)
            .collect();
        waiting.retain(|(_, s, _)| *s > serial);
        ready
    }

    /// Whether requests wait for the next flush.
    pub(super) fn has_batched(&self) -> bool {
        !self.out_asks.is_empty() || !self.out_queries.is_empty()
    }

    /// The batched advert requests and parent queries, per peer.
    pub(super) fn take_batched(&mut self) -> (BatchedAsks, BatchedQueries) {
        (
            std::mem::take(&mut self.out_asks),
            std::mem::take(&mut self.out_queries),
        )
    }

    /// Forgets the requests batched to `peer` (it went away).
    pub(super) fn forget_peer(&mut self, peer: &NodeId) {
        self.out_asks.remove(peer);
        self.out_queries.remove(peer);
    }

    /// Forgets the requests waiting in tree `ri` (its root went away).
    pub(super) fn forget_root(&mut self, ri: RootIdx) {
        self.waiting.remove(&ri);
    }

    /// Drops requests that are over: waiting ones after two serial periods (`period`),
    /// the rate limits once they no longer hold.
    pub(super) fn expire(&mut self, now: Time, period: Duration) {
        for list in self.waiting.values_mut() {
            list.retain(|(_, _, at)| now.saturating_since(*at) < period * 2);
        }
        self.asked
            .retain(|_, (_, at)| now.saturating_since(*at) < period);
        self.queried
            .retain(|_, q| now.saturating_since(q.at) < REQUERY_AFTER * 2);
    }
}

/// Advert requests batched per peer: (root, serial wanted).
pub(super) type BatchedAsks = BTreeMap<NodeId, Vec<(NodeId, u32)>>;

/// Parent queries batched per peer: the roots asked about.
pub(super) type BatchedQueries = BTreeMap<NodeId, Vec<NodeId>>;

impl Core {
    /// Asks `view.id` for its state once its serial reaches ours; with `next`, once it
    /// reaches the one after ours, if what we heard is as new as ours (our feasibility
    /// distance blocks it): the root is then asked for that serial too, as none comes
    /// unasked for a long time.
    pub(super) fn ask(&mut self, ri: RootIdx, view: &CandidateView, next: bool) {
        let t = self.trees.live(ri);
        let blocked = next && view.serial >= t.serial;
        let want = if blocked { t.serial + 1 } else { t.serial };
        if blocked {
            self.request_serial(ri);
        }
        let t = self.trees.live(ri);
        let key = (view.id, ri);
        if let Some(&(s, at)) = self.asks.asked.get(&key)
            && s >= want
            && self.now.saturating_since(at) < self.config.serial_period
        {
            return;
        }
        self.asks.asked.insert(key, (want, self.now));
        self.stats.asks += 1;
        let root = t.root;
        self.asks.queue_ask(view.id, root, want);
    }

    /// Asks the root itself for its state in its tree when our route to it is longer than
    /// our direct link to it by more than the shortcut threshold: the shortcut rule would
    /// take the root (or a peer of its cluster after it), but nobody we trade with may
    /// ever tell us of a shorter route (a cluster's first entry often comes through a
    /// third cluster, and explorers carry samples). We measured the root when we met it;
    /// its answer is judged as any candidate's. Nothing is asked once the route is within
    /// the threshold of the direct link.
    ///
    /// The root is asked too when it is a cluster neighbour and our parent is not: our
    /// route leaves the root's own cluster and comes back, which no rule keeps once the
    /// root's state is heard (condition (2) takes the much closer root), yet where the
    /// cluster is larger than a candidate set, every neighbour we trade with may hang
    /// below us. Seen in the simulator at 75 nodes per cluster: a whole cluster under one
    /// entry for minutes, its WAN detour within the threshold.
    pub(super) fn ask_root_if_far(&mut self, ri: RootIdx) {
        let t = self.trees.live(ri);
        let root = t.root;
        if !t.connected || t.parent == Some(root) || !self.members.is_alive(&root) {
            return;
        }
        let Some(direct) = self.nbrs.lat_us(&root) else {
            return;
        };
        let threshold = self.config.shortcut_threshold.as_micros() as u32;
        let detour = direct <= self.near_us() && self.parent_is_far(t);
        if (t.dist_us <= direct.saturating_add(threshold) && !detour)
            || self
                .heard
                .get(&root, ri)
                .is_some_and(|h| h.serial >= t.serial)
        {
            return;
        }
        let view = CandidateView {
            id: root,
            serial: t.serial,
            dist_us: 0,
            connected: true,
            lat_us: direct,
        };
        self.stats.root_asks += 1;
        self.ask(ri, &view, false);
    }

    /// Asks `view.id` for its parent in this tree, at most once per serial period; and
    /// while neither our parent nor its dist changed, only once per `REQUERY_AFTER`: the
    /// same question would get the same answer (in a settled tree the candidate is often
    /// in our own subtree, and the walk up its ancestry only leads back to us).
    ///
    /// A leaf that entered its cluster over a long link, asking a cluster neighbour, backs
    /// off instead (see [`Core::entered_twice`]): it asks again after one serial period,
    /// then two, four and so on up to `REQUERY_AFTER`. The neighbour's ancestry may change
    /// under the same dist (two entries at the same dist, as exact latencies make them),
    /// and the first walks of a forming tree see subtrees still moving; a minute's wait
    /// then left a cluster entered twice for that minute. Entries with children do not:
    /// their walks often lead back into their own subtree, and asking every neighbour
    /// again each time the tree changed cost more than the queries of a settled overlay.
    pub(super) fn query_parent(&mut self, ri: RootIdx, view: &CandidateView) -> bool {
        let key = (view.id, ri);
        let walk = self.entered_twice(ri, view);
        let t = self.trees.live(ri);
        let (parent, root) = (t.parent, t.root);
        let mut repeats = 0;
        if let Some(q) = self.asks.queried.get(&key) {
            let age = self.now.saturating_since(q.at);
            // Dists as heard jitter a little (an answer carries the exact figure, adverts
            // only changes above 0.1%): the same bound as for adverts.
            let same = q.parent == parent && !dist_moved(q.dist_us, view.dist_us);
            let period = self.config.serial_period;
            let wait = match (same, walk) {
                (false, _) => period,
                (true, true) => (period * (1u32 << q.repeats.min(6))).min(REQUERY_AFTER),
                (true, false) => REQUERY_AFTER,
            };
            if age < wait {
                return false;
            }
            repeats = if same { q.repeats.saturating_add(1) } else { 0 };
        }
        let query = Query {
            at: self.now,
            parent,
            dist_us: view.dist_us,
            repeats,
        };
        self.asks.queried.insert(key, query);
        self.stats.parent_queries += 1;
        self.asks.out_queries.entry(view.id).or_default().push(root);
        true
    }

    /// Whether the parent query to `peer` in tree `ri` just sent is the first since our
    /// parent or its dist last changed (a repeat would get the same answer).
    pub(super) fn first_query(&self, peer: NodeId, ri: RootIdx) -> bool {
        (self.asks.queried.get(&(peer, ri))).is_some_and(|q| q.repeats == 0)
    }

    /// Whether asking `view.id` for its parent in tree `ri` means our cluster is entered
    /// twice: we are a connected leaf whose parent is not a cluster neighbour, and
    /// `view.id` is one (within a tenth of the shortcut threshold, the bound the
    /// oscillation guard calls a cluster neighbour). Its path to the root cannot pass
    /// through us, so it enters our cluster elsewhere.
    fn entered_twice(&self, ri: RootIdx, view: &CandidateView) -> bool {
        let t = self.trees.live(ri);
        t.connected
            && t.children.is_empty()
            && view.lat_us <= self.near_us()
            && self.parent_is_far(t)
    }

    /// Whether our parent in tree `t` is measured and not a cluster neighbour (farther
    /// than [`Core::near_us`]): we enter our cluster in that tree.
    pub(super) fn parent_is_far(&self, t: &TreeState) -> bool {
        self.parent_lat(t).is_some_and(|pl| pl > self.near_us())
    }

    /// Whether our parent in `t` is a cluster neighbour (measured within
    /// [`Core::near_us`]): we are a member of our cluster in that tree, not its entry.
    pub(super) fn parent_is_near(&self, t: &TreeState) -> bool {
        self.parent_lat(t).is_some_and(|pl| pl <= self.near_us())
    }

    /// Our latency estimate to our parent in `t`, if we have a parent and an estimate.
    fn parent_lat(&self, t: &TreeState) -> Option<u32> {
        t.parent.and_then(|p| self.nbrs.lat_us(&p))
    }

    /// Asks the root for a fresh serial: a node without a path needs one to accept a new
    /// parent (asked at most once per quarter serial period per tree), and so does a node
    /// whose feasibility distance blocks a better one (at most once per serial period).
    pub(super) fn request_serial(&mut self, ri: RootIdx) {
        let gap = if self.trees.live(ri).connected {
            self.config.serial_period
        } else {
            self.config.serial_period / 4
        };
        if (self.asks.serial_requested.get(&ri))
            .is_some_and(|at| self.now.saturating_since(*at) < gap)
        {
            return;
        }
        self.asks.serial_requested.insert(ri, self.now);
        let t = self.trees.live(ri);
        let (root, serial) = (t.root, t.serial + 1);
        self.send(root, Message::SerialRequest { root, serial });
    }
}
