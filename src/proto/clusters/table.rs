//! The summaries of every member, replicated on every node, and the messages that keep the
//! replicas equal. Pure: the core feeds it and sends what it returns.
//!
//! - News: a summary that is new here (ours, or a newer version of another's) is pushed at
//!   the next flush to a few random peers ([`ClusterTable::take_news`]); each node pushes
//!   each version once, so a version reaches nearly everyone in O(log n) hops.
//! - Anti-entropy: now and then a node sends a random peer the digest of its table
//!   ([`ClusterMessage::Digest`], 14 bytes). Where the digests differ, the peer answers
//!   with a digest per bucket of ids (split further where a bucket is full, see `buckets`),
//!   and the two exchange the versions of the buckets that differ and push each other
//!   what the other lacks. A summary in flight thus costs
//!   a few versions, and a node that has just joined gets the whole table.
//! - A summary of a node that is not an alive member is refused; a member that goes away
//!   is dropped ([`ClusterTable::remove`]). A node that sees its own summary in a version
//!   above its own (it restarted and others remember its previous run) takes a higher one.

use super::buckets::{self, Selection};
use super::views::ViewInputs;
use super::{ClusterParams, ClusterView, sanitize};
use crate::proto::id::{IdMap, NodeId};
use crate::proto::message::{
    BandwidthEdge, CLUSTER_BUCKETS, ClusterEdge, ClusterMessage, ClusterSummary,
    MAX_CLUSTER_SUMMARIES, MAX_CLUSTER_VERSIONS,
};
use crate::proto::time::Time;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The replicated summaries and the view computed from them.
#[derive(Clone, Debug)]
pub struct ClusterTable {
    me: NodeId,
    /// Every summary held, this node's own included, and when this node got it (the
    /// freshness of its bandwidth figures: a node publishes again when a figure moves).
    /// Summaries are shared with the messages that brought them and the view's inputs:
    /// in the simulator, every node holds every summary.
    entries: IdMap<NodeId, Held>,
    /// The fingerprints of `entries` (changed only with them, see `put` and `take`).
    prints: buckets::Fingerprints,
    /// Summaries to push at the next flush.
    news: BTreeSet<NodeId>,
    /// Whether the view's inputs (the members, the summaries' latencies) changed since
    /// the view was last recomputed.
    changed: bool,
    /// What the view is computed from, as of the last [`ClusterTable::recompute`] (shared
    /// with every table whose inputs are equal, see `views`), and the view once asked
    /// for: most views were replaced by the next recompute before anyone looked at them,
    /// and computing them was a tenth of the simulator's time at a thousand nodes.
    inputs: Arc<ViewInputs>,
}

/// A summary held and when it arrived.
#[derive(Clone, Debug)]
struct Held {
    summary: Arc<ClusterSummary>,
    got: Time,
}

impl ClusterTable {
    /// An empty table for node `me` (its own summary comes with [`ClusterTable::publish`]).
    pub fn new(me: NodeId) -> Self {
        ClusterTable {
            me,
            entries: IdMap::default(),
            prints: buckets::Fingerprints::default(),
            news: BTreeSet::new(),
            changed: false,
            inputs: ViewInputs::none(),
        }
    }

    /// This node's published edges (empty before the first publication).
    pub fn own_edges(&self) -> &[ClusterEdge] {
        self.entries
            .get(&self.me)
            .map_or(&[], |h| &h.summary.edges[..])
    }

    /// How many summaries are held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no summary is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The version held of `id`'s summary.
    pub fn version(&self, id: &NodeId) -> Option<u32> {
        self.entries.get(id).map(|h| h.summary.version)
    }

    /// This node's published bandwidth figures.
    pub fn own_bandwidth(&self) -> &[BandwidthEdge] {
        self.entries
            .get(&self.me)
            .map_or(&[], |h| &h.summary.bandwidth[..])
    }

    /// Every bandwidth figure held: the node that measured, what, and when it arrived here.
    pub fn bandwidth(&self) -> impl Iterator<Item = (NodeId, &[BandwidthEdge], Time)> + '_ {
        (self.entries.iter()).map(|(id, h)| (*id, &h.summary.bandwidth[..], h.got))
    }

    /// Every published latency: (who measured, the edge).
    pub fn edges(&self) -> impl Iterator<Item = (NodeId, &ClusterEdge)> + '_ {
        self.entries
            .iter()
            .flat_map(|(id, h)| h.summary.edges.iter().map(move |e| (*id, e)))
    }

    /// Replaces this node's own summary by `edges` and `bandwidth` under a new version, to
    /// be pushed.
    pub fn publish(&mut self, now: Time, edges: Vec<ClusterEdge>, bandwidth: Vec<BandwidthEdge>) {
        let version = self.version(&self.me).map_or(1, |v| v.saturating_add(1));
        let summary = Arc::new(ClusterSummary {
            node: self.me,
            version,
            edges: edges.into(),
            bandwidth: bandwidth.into(),
        });
        self.changed |= self.edges_differ(&summary);
        self.put(self.me, Held { summary, got: now });
        self.news.insert(self.me);
    }

    /// Whether `summary`'s latencies differ from those of the summary held for its node
    /// (or none is held): only then does the view change. Most versions published once
    /// the overlay settles carry new bandwidth figures alone, and each made every node
    /// recompute a view for nothing (once settled at 5000 nodes, the clusters' round,
    /// mostly views and their inputs, was 31 % of the simulator's time).
    fn edges_differ(&self, summary: &ClusterSummary) -> bool {
        (self.entries.get(&summary.node)).is_none_or(|h| h.summary.edges[..] != summary.edges[..])
    }

    /// Drops the summary of a member that left or died.
    pub fn remove(&mut self, id: &NodeId) {
        if *id != self.me && self.take(id) {
            self.news.remove(id);
            self.changed = true;
        }
    }

    /// The summaries to push now (each new version once), at most
    /// [`MAX_CLUSTER_SUMMARIES`] per returned batch.
    pub fn take_news(&mut self) -> Vec<Vec<Arc<ClusterSummary>>> {
        let ids: Vec<NodeId> = std::mem::take(&mut self.news).into_iter().collect();
        let all: Vec<Arc<ClusterSummary>> = ids.iter().filter_map(|id| self.summary(id)).collect();
        all.chunks(MAX_CLUSTER_SUMMARIES)
            .map(|c| c.to_vec())
            .collect()
    }

    /// Whether some news waits to be pushed.
    pub fn has_news(&self) -> bool {
        !self.news.is_empty()
    }

    /// The digest message of this table: an order-free fingerprint of `(id, version)`.
    pub fn digest(&self) -> ClusterMessage {
        ClusterMessage::Digest {
            hash: self.prints.hash,
            count: self.entries.len() as u32,
        }
    }

    /// Handles a message from a peer; returns the answers to send back to it. `is_member`
    /// says whether a node is an alive member (summaries of others are refused).
    pub fn handle(
        &mut self,
        now: Time,
        msg: ClusterMessage,
        is_member: impl Fn(&NodeId) -> bool,
    ) -> Vec<ClusterMessage> {
        match msg {
            ClusterMessage::Digest { .. } if msg == self.digest() => Vec::new(),
            ClusterMessage::Digest { .. } => vec![ClusterMessage::Buckets {
                hashes: self.prints.coarse.to_vec(),
            }],
            ClusterMessage::Buckets { hashes } => {
                let (mine, counts) = (&self.prints.coarse, &self.prints.counts);
                let (mut whole, mut split) = (0u32, 0u32);
                for b in (0..CLUSTER_BUCKETS).filter(|&b| hashes.get(b) != Some(&mine[b])) {
                    if counts[b] > buckets::FINE_SPLIT {
                        split |= 1 << b;
                    } else {
                        whole |= 1 << b;
                    }
                }
                let mut out = Vec::new();
                if whole != 0 {
                    out.push(self.versions(Selection::from_wire(whole, Vec::new()), true));
                }
                if split != 0 {
                    out.push(ClusterMessage::FineBuckets {
                        buckets: split,
                        hashes: buckets::fine_hashes(split, self.pairs()),
                    });
                }
                out
            }
            ClusterMessage::FineBuckets {
                buckets: mask,
                hashes,
            } => {
                let mine = buckets::fine_hashes(mask, self.pairs());
                match buckets::fine_differ(mask, &hashes, &mine) {
                    Some(fine) if !fine.is_empty() => {
                        vec![self.versions(Selection::from_wire(0, fine), true)]
                    }
                    _ => Vec::new(),
                }
            }
            ClusterMessage::Versions {
                versions,
                buckets: mask,
                fine,
                reply,
            } => {
                let sel = Selection::from_wire(mask, fine);
                let complete = versions.len() < MAX_CLUSTER_VERSIONS;
                let theirs: IdMap<NodeId, u32> = versions.into_iter().collect();
                let mut lacking: Vec<NodeId> = self
                    .entries
                    .iter()
                    .filter(|(id, _)| sel.contains(id))
                    .filter(|(id, h)| match theirs.get(*id) {
                        Some(t) => *t < h.summary.version,
                        None => complete,
                    })
                    .map(|(id, _)| *id)
                    .collect();
                lacking.sort_unstable();
                let all: Vec<Arc<ClusterSummary>> =
                    lacking.iter().filter_map(|id| self.summary(id)).collect();
                let mut out: Vec<ClusterMessage> = all
                    .chunks(MAX_CLUSTER_SUMMARIES)
                    .map(|c| ClusterMessage::Summaries {
                        summaries: c.to_vec(),
                    })
                    .collect();
                if reply && !sel.is_empty() {
                    out.push(self.versions(sel, false));
                }
                out
            }
            ClusterMessage::Summaries { summaries } => {
                for s in summaries.into_iter().take(MAX_CLUSTER_SUMMARIES) {
                    self.apply(now, s, &is_member);
                }
                Vec::new()
            }
        }
    }

    /// Recomputes the view if the table changed, over `alive` (the alive members; this
    /// node is added). Returns whether it was recomputed. (What is recorded here is the
    /// view's inputs; [`ClusterTable::view`] computes the view from them when asked, and
    /// the result is the same as computing it here.)
    pub fn recompute(&mut self, alive: &[NodeId], params: &ClusterParams) -> bool {
        if !self.changed {
            return false;
        }
        self.changed = false;
        let mut nodes = alive.to_vec();
        nodes.push(self.me);
        let summaries = (self.entries.values()).map(|h| Arc::clone(&h.summary));
        self.inputs = ViewInputs::shared(nodes, summaries.collect(), *params);
        true
    }

    /// Whether `id`'s own summary went into the view (as of the last recompute).
    pub fn in_view(&self, id: &NodeId) -> bool {
        self.inputs.holds(id)
    }

    /// Marks the view stale (the members changed without a summary changing).
    pub fn touch(&mut self) {
        self.changed = true;
    }

    /// The groups as of the last recompute.
    pub fn view(&self) -> &ClusterView {
        self.inputs.view()
    }

    /// The smallest member of `id`'s level-1 group as of the last recompute, if that group
    /// has two members or more.
    pub fn cluster_rep(&self, id: &NodeId) -> Option<NodeId> {
        self.inputs.rep(id)
    }

    fn apply(&mut self, now: Time, s: Arc<ClusterSummary>, is_member: &impl Fn(&NodeId) -> bool) {
        if s.node == self.me {
            // Others remember a summary of ours newer than ours, or as new but not the
            // same (from before a restart): ours must outrank it, or it would never spread.
            if let Some(own) = self.entries.get(&self.me)
                && (s.version > own.summary.version
                    || (s.version == own.summary.version && self.edges_differ(&s)))
            {
                let mut own = own.clone();
                Arc::make_mut(&mut own.summary).version = s.version.saturating_add(1);
                self.put(self.me, own);
                self.news.insert(self.me);
            }
            return;
        }
        // (Most summaries received are copies of one held: the version settles them
        // without a look at the member table.)
        if self.version(&s.node).is_some_and(|v| v >= s.version) || !is_member(&s.node) {
            return;
        }
        let summary = sanitize(s);
        let node = summary.node;
        self.changed |= self.edges_differ(&summary);
        self.put(node, Held { summary, got: now });
        self.news.insert(node);
    }

    /// Holds `held` as `id`'s entry (in place of any before), fingerprints kept.
    fn put(&mut self, id: NodeId, held: Held) {
        self.prints.add(&id, held.summary.version);
        if let Some(old) = self.entries.insert(id, held) {
            self.prints.remove(&id, old.summary.version);
        }
    }

    /// Drops `id`'s entry, fingerprints kept; whether there was one.
    fn take(&mut self, id: &NodeId) -> bool {
        let Some(old) = self.entries.remove(id) else {
            return false;
        };
        self.prints.remove(id, old.summary.version);
        true
    }

    fn summary(&self, id: &NodeId) -> Option<Arc<ClusterSummary>> {
        self.entries.get(id).map(|h| Arc::clone(&h.summary))
    }

    /// Every summary held as (id, version).
    fn pairs(&self) -> impl Iterator<Item = (&NodeId, u32)> + '_ {
        self.entries.iter().map(|(id, h)| (id, h.summary.version))
    }

    /// The versions of the summaries `sel` covers.
    fn versions(&self, sel: Selection, reply: bool) -> ClusterMessage {
        let mut versions = buckets::versions_of(self.pairs(), &sel);
        versions.truncate(MAX_CLUSTER_VERSIONS);
        ClusterMessage::Versions {
            versions,
            buckets: sel.coarse,
            fine: sel.fine,
            reply,
        }
    }
}

#[cfg(test)]
impl ClusterTable {
    /// [`ClusterTable::publish`] with latencies only, at time zero.
    pub fn publish_edges(&mut self, edges: Vec<ClusterEdge>) {
        self.publish(Time::from_micros(0), edges, Vec::new());
    }
}
