//! The message trace of one pair of nodes ([`crate::sim::SimConfig::trace`]).

use super::Sim;
use crate::proto::{Packet, Time};
use crate::sim::node::SimNode;

/// Lines kept at most: a trace of a long run must not grow without bound.
const TRACE_MAX: usize = 100_000;
/// Characters of a message's text kept from the traced root's id on, and before it (the
/// start of its entry: `AdvertEntry { root: `).
const AROUND: (usize, usize) = (20, 160);

impl<N: SimNode> Sim<N> {
    /// Records `packet` from node `from` to node `to`, departing at `depart`, if it passes
    /// between the traced pair: membership gossip only when it names the root, anything
    /// else always, with the part about the root's tree when there is one.
    pub(super) fn trace_packet(&mut self, from: usize, to: usize, packet: &Packet, depart: Time) {
        let Some(tr) = self.cfg.trace else {
            return;
        };
        let between = (from, to) == (tr.a, tr.b) || (from, to) == (tr.b, tr.a);
        if !between || self.traced.len() >= TRACE_MAX {
            return;
        }
        let Some(root) = self.ids.get(tr.root) else {
            return;
        };
        let text = format!("{packet:?}");
        let kind: String = text.chars().take_while(|c| *c != '{').collect();
        let at = depart.as_micros() as f64 / 1000.0;
        let line = match text.find(&format!("{root:?}")) {
            Some(i) => {
                let lo = text.floor_char_boundary(i.saturating_sub(AROUND.0));
                let hi = text.ceil_char_boundary((i + AROUND.1).min(text.len()));
                format!(
                    "{at:.3} ms {from}->{to} {kind}[root {}] ...{}",
                    tr.root,
                    &text[lo..hi]
                )
            }
            None if matches!(packet, Packet::Gossip(_)) => return,
            None => format!("{at:.3} ms {from}->{to} {kind}"),
        };
        self.traced.push(line);
    }

    /// The messages recorded by [`crate::sim::SimConfig::trace`], one line each, in send
    /// order.
    pub fn traced(&self) -> &[String] {
        &self.traced
    }
}
