//! Membership records and messages on the wire (SWIM-style gossip), handled by
//! [`crate::proto::gossip`].

use crate::proto::id::NodeId;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Whether a member is reachable, as membership gossip spreads it. At equal incarnation a
/// later state in this order wins (`Alive < Suspect < Dead < Left`); a higher incarnation
/// always wins, which is how a member refutes a suspicion or comes back after a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    /// Answering probes.
    Alive,
    /// A probe went unanswered; declared dead unless it refutes in time.
    Suspect,
    /// Declared dead after a suspicion timed out.
    Dead,
    /// Announced its departure.
    Left,
}

/// What gossip knows about one member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// The member's id (bound to its TLS key by the network driver).
    pub id: NodeId,
    /// A readable name chosen by the member (may be empty).
    pub name: String,
    /// The address its QUIC endpoint listens on.
    pub addr: std::net::SocketAddr,
    /// Bumped by the member itself to refute suspicion; starts high after a restart.
    pub incarnation: u64,
    /// Identifies one run of the member's process (its start time in ms): a new value
    /// means it restarted, so state held about its previous run must be dropped.
    pub boot: u64,
    /// Its state at this incarnation.
    pub state: Liveness,
    /// The groups it is a member of (sorted, at most [`MAX_GROUPS`] names of at most
    /// [`MAX_GROUP_NAME`] bytes); changed only by the member itself, with a new incarnation.
    pub groups: Vec<String>,
    /// The member's own proof of this record (its signature of everything in it but a
    /// suspicion or death, which others declare; see [`crate::proto::gossip::auth`]).
    /// Records whose proof does not verify are refused. Empty in the simulator.
    pub proof: Vec<u8>,
}

/// Most groups one member may be in.
pub const MAX_GROUPS: usize = 32;
/// Longest group name, in bytes.
pub const MAX_GROUP_NAME: usize = 64;

/// Whether `groups` is a valid group list for a record: sorted without repeats, within
/// [`MAX_GROUPS`], each name non-empty and within [`MAX_GROUP_NAME`].
pub fn groups_valid(groups: &[String]) -> bool {
    groups.len() <= MAX_GROUPS
        && groups.windows(2).all(|w| w[0] < w[1])
        && groups
            .iter()
            .all(|g| !g.is_empty() && g.len() <= MAX_GROUP_NAME)
}

/// Membership messages (SWIM-style: probes with piggybacked updates, indirect probes,
/// push-pull anti-entropy). They travel next to the tree protocol's
/// [`Message`](super::Message)s in a [`Packet`](super::Packet) and are handled by
/// [`crate::proto::gossip`], not by the tree core. Records are shared, not copied, by the
/// tables and messages that hold the same one (on the wire each is a plain record): in
/// the simulator a copy per node of every member's record was O(N²) memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GossipMessage {
    /// A new node asks a member to admit it; answered with [`GossipMessage::Sync`].
    Join { me: MemberRecord },
    /// Every record the sender knows; `reply` asks the receiver to answer with its own.
    Sync {
        members: Vec<Arc<MemberRecord>>,
        reply: bool,
    },
    /// News (a member joined, is suspected, died or left) pushed right away: whoever learns
    /// something new from it forwards it to a few random members, so news reaches everyone
    /// in O(log n) hops instead of waiting for probes to carry it.
    Rumor { updates: Vec<Arc<MemberRecord>> },
    /// Liveness probe; answered with [`GossipMessage::Ack`] carrying the same `seq`.
    Probe {
        seq: u64,
        updates: Vec<Arc<MemberRecord>>,
    },
    /// Answer to a probe. `target` is the member that was probed (differs from the sender
    /// when it relays an indirect probe).
    Ack {
        seq: u64,
        target: NodeId,
        updates: Vec<Arc<MemberRecord>>,
    },
    /// Ask the receiver to probe `target` on the sender's behalf (the sender's own probe
    /// went unanswered) and relay the ack.
    ProbeRequest {
        seq: u64,
        target: NodeId,
        updates: Vec<Arc<MemberRecord>>,
    },
    /// Periodic anti-entropy: a hash of the sender's live records (its own included) and
    /// their count. A receiver whose own differs starts a push-pull
    /// [`GossipMessage::Sync`]; one that agrees sends nothing, so a settled overlay
    /// spends a few bytes per period on it whatever its size.
    Digest { hash: u64, live: u32 },
}
