//! Counters of what the core did.
//!
//! [`CoreStats`] is a field of the [`Core`](super::Core) itself, not of one part: every
//! concern counts what it does there.

/// Counters of what the core did, for diagnostics and the simulator's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CoreStats {
    /// Parent switches under conditions (1)-(4).
    pub switches_rules: u64,
    /// Parent switches by the shortcut rule.
    pub switches_shortcut: u64,
    /// Re-attachments of a node without a path.
    pub switches_repair: u64,
    /// Parent switches from one cluster neighbour to another, shallower one.
    pub switches_flatten: u64,
    /// Parents lost because they left or died.
    pub parents_lost: u64,
    /// Trees dropped while their root lives, the root being in another cluster than ours
    /// (shared trees, see the `shared` module of the core).
    pub trees_unshared: u64,
    /// Trees asked for again, not settled where they should be (shared trees: see
    /// `reask_unrouted` in the `shared` module of the core).
    pub reasks: u64,
    /// Parents dropped because they went quiet for six refresh periods.
    pub parents_quiet: u64,
    /// Advert requests and parent queries sent.
    pub asks: u64,
    /// Roots asked for their state because our route to them was much longer than the
    /// direct link.
    pub root_asks: u64,
    /// Parent queries sent.
    pub parent_queries: u64,
    /// Our state in a tree sent unasked to a cluster neighbour no worse off under us,
    /// with a parent query.
    pub states_told: u64,
    /// Our state in a tree we enter our cluster in, sent to a cluster neighbour: in every
    /// such tree when the sweep first met everyone, then where that state changed, and
    /// every such tree to a peer that became a cluster neighbour.
    pub entry_notices: u64,
    /// Members of our discovered cluster measured again because our own samples put
    /// them farther than a cluster neighbour.
    pub cluster_remeasures: u64,
    /// Our state sent to a cluster neighbour farther from the root that told us its own,
    /// while we enter our cluster in that tree.
    pub entry_answers: u64,
    /// Versions of its own cluster summary this node published.
    pub cluster_publishes: u64,
    /// Cluster discovery messages sent (summaries, digests, version lists).
    pub cluster_messages: u64,
    /// Their encoded bytes.
    pub cluster_bytes: u64,
    /// Full adverts sent (one entry per connected tree).
    pub full_adverts: u64,
    /// Entries carried by full adverts.
    pub full_advert_entries: u64,
    /// Adverts of the trees of the roots nearest us sent to new inbound probers.
    pub sampled_adverts: u64,
    /// Entries sent in adverts of changes.
    pub delta_advert_entries: u64,
    /// Peers newly watched as near peers (a full advert each way) or explorers (a sample
    /// of its state to us).
    pub watches: u64,
    /// Peers newly hinted (measured only).
    pub hinted: u64,
    /// Probes of ours that rode on our answer to the peer's probe
    /// ([`crate::proto::Message::PongPing`]).
    pub merged_probes: u64,
    /// Reports from the transport that messages to a peer may have been lost.
    pub links_lost: u64,
    /// Peers sent our state again after such a report, once heard from (those that take
    /// our adverts or share a tree link with us).
    pub resyncs_after_loss: u64,
}
