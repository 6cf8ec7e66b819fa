//! Control traffic by message kind: how many messages, bytes and tree entries of each kind
//! were sent, so a run's bytes per node per second can be attributed (probes, adverts,
//! pushes to children, ...). Packet-train datagrams are counted too, under their own kind
//! ([`TRAIN`]), which the control figures leave out.

use crate::proto::Message;
use crate::proto::message::{ClusterMessage, GossipMessage};
use std::collections::BTreeMap;

/// Traffic of one message kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KindTraffic {
    /// Messages sent.
    pub messages: u64,
    /// Encoded bytes sent.
    pub bytes: u64,
    /// Tree entries (one per root) or roots carried, where the kind carries a list (for
    /// cluster versions and summaries: the versions or summaries carried).
    pub entries: u64,
}

/// Traffic per message kind, by kind name.
pub type TrafficByKind = BTreeMap<&'static str, KindTraffic>;

/// The kind name of `msg` and how many per-root entries it carries.
pub fn kind_of(msg: &Message) -> (&'static str, usize) {
    match msg {
        Message::Ping { .. } => ("ping", 0),
        Message::Pong { .. } => ("pong", 0),
        Message::PongPing { .. } => ("pong_ping", 0),
        Message::Advert { entries } => ("advert", entries.len()),
        Message::TreeUpdate(_) => ("tree_update", 1),
        Message::TreeUpdates(v) => ("tree_update", v.len()),
        Message::Attach { .. } | Message::Detach { .. } => ("links", 1),
        Message::Links { attach, detach } => ("links", attach.len() + detach.len()),
        Message::SerialRequest { .. } => ("serial_request", 1),
        Message::AdvertRequest { roots } => ("advert_request", roots.len()),
        Message::ParentQuery { roots } => ("parent_query", roots.len()),
        Message::ParentHint { parents } => ("parent_hint", parents.len()),
        Message::Resync => ("resync", 0),
        Message::TrainRequest { .. } => ("train_request", 0),
        Message::PathSaturated { .. } => ("path_saturated", 0),
        Message::Cluster(c) => match c {
            ClusterMessage::Digest { .. } => ("cluster_digest", 0),
            ClusterMessage::Buckets { .. } | ClusterMessage::FineBuckets { .. } => {
                ("cluster_buckets", 0)
            }
            ClusterMessage::Versions { versions, .. } => ("cluster_versions", versions.len()),
            ClusterMessage::Summaries { summaries } => ("cluster_summaries", summaries.len()),
        },
        Message::Collective(_) => ("collective", 0),
        #[allow(unreachable_patterns)]
        _ => ("other", 0),
    }
}

/// Adds one sent message of `bytes` to `t`.
pub fn record(t: &mut TrafficByKind, msg: &Message, bytes: usize) {
    let (kind, entries) = kind_of(msg);
    let k = t.entry(kind).or_default();
    k.messages += 1;
    k.bytes += bytes as u64;
    k.entries += entries as u64;
}

/// Prefix of the kinds of membership messages (`gossip_probe`, `gossip_sync`, ...).
pub const GOSSIP: &str = "gossip";

/// The kind name of a membership message and how many records it carries.
pub fn gossip_kind_of(msg: &GossipMessage) -> (&'static str, usize) {
    match msg {
        GossipMessage::Join { .. } => ("gossip_join", 1),
        GossipMessage::Sync { members, .. } => ("gossip_sync", members.len()),
        GossipMessage::Rumor { updates } => ("gossip_rumor", updates.len()),
        GossipMessage::Probe { updates, .. } => ("gossip_probe", updates.len()),
        GossipMessage::Ack { updates, .. } => ("gossip_ack", updates.len()),
        GossipMessage::ProbeRequest { updates, .. } => ("gossip_probe_request", updates.len()),
        GossipMessage::Digest { .. } => ("gossip_digest", 0),
    }
}

/// Adds one sent membership message of `bytes` to `t` (kinds starting with [`GOSSIP`]).
pub fn record_gossip(t: &mut TrafficByKind, msg: &GossipMessage, bytes: usize) {
    let (kind, records) = gossip_kind_of(msg);
    let k = t.entry(kind).or_default();
    k.messages += 1;
    k.bytes += bytes as u64;
    k.entries += records as u64;
}

/// Bytes of membership messages in `t` (every kind starting with [`GOSSIP`]).
pub fn gossip_bytes(t: &TrafficByKind) -> u64 {
    t.iter()
        .filter(|(k, _)| k.starts_with(GOSSIP))
        .map(|(_, v)| v.bytes)
        .sum()
}

/// Kind of the packet-train datagrams: measurement traffic, not control messages, so the
/// control figures leave it out (see [`crate::sim::Report`]).
pub const TRAIN: &str = "train";

/// Adds one packet train of `packets` datagrams of `size` bytes to `t` (kind [`TRAIN`];
/// `messages` counts datagrams).
pub fn record_train(t: &mut TrafficByKind, packets: u16, size: u16) {
    let k = t.entry(TRAIN).or_default();
    k.messages += u64::from(packets);
    k.bytes += u64::from(packets) * u64::from(size);
}

/// `now - then`, kind by kind.
pub fn since(now: &TrafficByKind, then: &TrafficByKind) -> TrafficByKind {
    now.iter()
        .map(|(k, v)| {
            let b = then.get(k).copied().unwrap_or_default();
            let d = KindTraffic {
                messages: v.messages - b.messages,
                bytes: v.bytes - b.bytes,
                entries: v.entries - b.entries,
            };
            (*k, d)
        })
        .collect()
}
