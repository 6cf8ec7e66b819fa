//! What a packet is for, in a few kinds: the unit in which traffic is counted (the
//! `status` and metrics' messages and bytes by kind). Kinds group the messages an operator
//! reasons about together (every tree-state message is an advert), so the set stays small
//! and stable while messages are added.

use super::message::{Message, Packet};

/// The kind of a [`Packet`] (see [`Packet::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// RTT probes and their answers.
    Probe,
    /// Tree state: adverts, tree updates and the requests for them.
    Advert,
    /// Tree links: attach, detach, serial requests, parent queries and hints.
    TreeLink,
    /// Collective operations travelling the trees.
    Collective,
    /// Cluster summaries.
    Cluster,
    /// Bandwidth probing: packet-train requests.
    Bandwidth,
    /// Membership gossip (joins, probes, rumours, syncs).
    Membership,
    /// Operator queries (who is your parent).
    Query,
    /// Headers of streamed payloads.
    Data,
    /// Headers of large collectives' transfers.
    Bulk,
    /// A rotated join token.
    Admission,
}

impl PacketKind {
    /// Every kind, in the order of [`PacketKind::index`].
    pub const ALL: [PacketKind; 11] = [
        PacketKind::Probe,
        PacketKind::Advert,
        PacketKind::TreeLink,
        PacketKind::Collective,
        PacketKind::Cluster,
        PacketKind::Bandwidth,
        PacketKind::Membership,
        PacketKind::Query,
        PacketKind::Data,
        PacketKind::Bulk,
        PacketKind::Admission,
    ];

    /// The kind's position in [`PacketKind::ALL`] (for arrays of counters).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The lowercase name used in `status --json` and metric labels.
    ///
    /// ```
    /// use overlay::proto::packet_kind::PacketKind;
    /// assert_eq!(PacketKind::TreeLink.as_str(), "tree_link");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            PacketKind::Probe => "probe",
            PacketKind::Advert => "advert",
            PacketKind::TreeLink => "tree_link",
            PacketKind::Collective => "collective",
            PacketKind::Cluster => "cluster",
            PacketKind::Bandwidth => "bandwidth",
            PacketKind::Membership => "membership",
            PacketKind::Query => "query",
            PacketKind::Data => "data",
            PacketKind::Bulk => "bulk",
            PacketKind::Admission => "admission",
        }
    }
}

impl Packet {
    /// What this packet is for.
    pub fn kind(&self) -> PacketKind {
        match self {
            Packet::Overlay(m) => match m {
                Message::Ping { .. } | Message::Pong { .. } | Message::PongPing { .. } => {
                    PacketKind::Probe
                }
                Message::Advert { .. }
                | Message::TreeUpdate(_)
                | Message::TreeUpdates(_)
                | Message::AdvertRequest { .. }
                | Message::Resync => PacketKind::Advert,
                Message::Attach { .. }
                | Message::Detach { .. }
                | Message::Links { .. }
                | Message::SerialRequest { .. }
                | Message::ParentQuery { .. }
                | Message::ParentHint { .. } => PacketKind::TreeLink,
                Message::Collective(_) => PacketKind::Collective,
                Message::Cluster(_) => PacketKind::Cluster,
                Message::TrainRequest { .. } | Message::PathSaturated { .. } => {
                    PacketKind::Bandwidth
                }
            },
            Packet::Gossip(_) => PacketKind::Membership,
            Packet::Query(_) => PacketKind::Query,
            Packet::Data(_) => PacketKind::Data,
            Packet::Bulk(_) => PacketKind::Bulk,
            Packet::Token(_) => PacketKind::Admission,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_follow_all_and_names_are_distinct() {
        for (i, k) in PacketKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
        }
        let names: std::collections::HashSet<_> =
            PacketKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), PacketKind::ALL.len());
        let ping = Packet::Overlay(Message::Ping {
            sent_us: 1,
            rtt_hint_us: None,
            watch: false,
        });
        assert_eq!(ping.kind(), PacketKind::Probe);
        assert_eq!(Packet::Overlay(Message::Resync).kind(), PacketKind::Advert);
    }
}
