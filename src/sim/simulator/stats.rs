//! The simulator's counters of a run.

use crate::proto::{NodeId, Time};
use crate::sim::traffic::TrafficByKind;
use std::collections::HashMap;
use std::time::Duration;

/// Counters of a run.
#[derive(Clone, Debug, Default)]
pub(super) struct Stats {
    pub(super) messages: u64,
    pub(super) bytes: u64,
    pub(super) delivered: u64,
    pub(super) dropped_loss: u64,
    pub(super) dropped_partition: u64,
    pub(super) dropped_dead: u64,
    pub(super) dropped_unknown: u64,
    pub(super) dropped_tail: u64,
    /// Packet trains sent, reported to their askers, and their datagrams lost.
    pub(super) trains_sent: u64,
    pub(super) trains_delivered: u64,
    pub(super) train_drops: u64,
    pub(super) parent_changes: u64,
    pub(super) parent_changes_intra: u64,
    pub(super) event_mismatches: u64,
    pub(super) unknown_ids: u64,
    pub(super) joins: u64,
    pub(super) leaves: u64,
    pub(super) crashes: u64,
    pub(super) ignored_actions: u64,
    /// Windows run, and how many of them were spread over threads.
    pub(super) windows: u64,
    pub(super) windows_spread: u64,
    pub(super) cpu_us: u128,
    pub(super) max_backlog: Duration,
    pub(super) max_backlog_at: Time,
    pub(super) max_backlog_node: usize,
    pub(super) traffic: TrafficByKind,
    /// Bytes of messages nobody asked for (`Event::Unsolicited`), per receiver and sender.
    pub(super) unsolicited: HashMap<(usize, NodeId), u64>,
}
