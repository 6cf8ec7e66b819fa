//! What became of a node's peer connections ([`LinkCounters`]).

use serde::{Deserialize, Serialize};

/// How a node's admitted peer connections came and went since it started.
///
/// Every connection costs both ends a TLS handshake and a token proof, several times what
/// a settled node spends on a second of its messages: on an idle overlay connections
/// should be opened rarely and kept. `measure_dialed` and `closed_idle_measure` count the
/// connections opened only to time a peer once (closed soon after when nothing else used
/// them); `duplicates` the connections opened while one to the same peer was up (both
/// ends dialed at once, or the peer restarted).
///
/// ```
/// let c = overlay::LinkCounters::default();
/// assert_eq!(c.dialed + c.accepted, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkCounters {
    /// Connections this node dialed that were admitted.
    pub dialed: u64,
    /// Of those, dials for a one-off measurement.
    pub measure_dialed: u64,
    /// Connections the peer dialed that were admitted.
    pub accepted: u64,
    /// Connections opened while another one to the same peer was up.
    pub duplicates: u64,
    /// Connections this node closed after their idle limit.
    pub closed_idle: u64,
    /// Of those, connections that only ever carried measurements.
    pub closed_idle_measure: u64,
    /// Connections the peer closed for idleness with nothing in flight.
    pub closed_idle_by_peer: u64,
    /// Connections that closed otherwise (lost, refused, the peer left).
    pub closed_otherwise: u64,
}
