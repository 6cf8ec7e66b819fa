//! What the driver does with the node's events: deliveries (a striped broadcast's parts
//! put together, streamed payloads taken from the data plane), reports, and the rest
//! published to the application.

use super::Driver;
use crate::net::ops::Handled;
use crate::net::stripes;
use crate::net::view::{Delivery, NodeEvent};
use crate::proto::{Event, NodeInput};
use std::time::Instant;
use tracing::debug;

impl Driver {
    /// A core event: a delivery or report for the API's collectives, else a tree event.
    pub(super) fn core_event(&mut self, event: Event) {
        if let Event::Unsolicited { from, bytes } = event {
            return self.links.unsolicited(from, bytes);
        }
        let received = self.input_at.unwrap_or_else(Instant::now);
        if let Event::Delivered(d) = &event
            && d.payload.is_empty()
            && stripes::parse(d.op.nonce).is_some()
        {
            // A part of a striped broadcast: the whole is delivered once all are in.
            let part = self.streams.payload(d.op);
            self.streams.done_with(d.op);
            if let Some(payload) = part
                && let Some((whole, payload)) = self.stripes.part(d.op, payload)
            {
                self.ops.deliver(Delivery {
                    root: d.op.root,
                    op: whole,
                    kind: d.kind,
                    payload,
                    group: None,
                    received,
                });
            }
            return;
        }
        if let Event::Report(r) = &event
            && let Some(op) = r.op
        {
            // The root's own payload is no longer needed for retries.
            self.streams.done_with(op);
        }
        if let Event::Report(r) = &event
            && r.op.is_some_and(|op| stripes::parse(op.nonce).is_some())
        {
            let (starts, merged) = self.stripes.report(r, Instant::now());
            if let Some((whole, index, _)) = r.op.and_then(|op| stripes::parse(op.nonce)) {
                debug!(
                    whole,
                    index,
                    elapsed_ms = r.elapsed.as_millis() as u64,
                    "stripe part reported"
                );
                self.start_parts(whole, starts);
            }
            if let Some(merged) = merged {
                self.ops.event(received, &Event::Report(Box::new(merged)));
            }
            return;
        }
        if let Event::Delivered(d) = &event
            && d.payload.is_empty()
            && let Some(payload) = self.streams.payload(d.op)
        {
            self.streams.done_with(d.op);
            self.ops.deliver(Delivery {
                root: d.op.root,
                op: d.op.nonce,
                kind: d.kind,
                payload,
                group: d.group.clone(),
                received,
            });
            return;
        }
        match self.ops.event(received, &event) {
            Handled::Yes => {}
            // The application's handler answered: a new input, fed between two polls.
            Handled::Answer(cmd) => self.node.handle(self.now(), NodeInput::Command(cmd)),
            Handled::No => self.publish_core_event(event),
        }
    }

    fn publish_core_event(&mut self, event: Event) {
        let out = match event {
            Event::ParentChanged { root, old, new } => {
                debug!(root = %root, old = ?old, new = ?new, "parent changed");
                self.tree_log.parent_changed(root);
                NodeEvent::ParentChanged { root, parent: new }
            }
            Event::ConnectedChanged { root, connected } => {
                NodeEvent::TreeConnected { root, connected }
            }
            Event::RootAdded { root } => NodeEvent::TreeAdded { root },
            Event::RootRemoved { root } => NodeEvent::TreeRemoved { root },
            // Never output by the node: members come from its membership.
            Event::MemberUp { .. } | Event::MemberDown { .. } | Event::Left => return,
            // Handled by `Ops`, or above.
            Event::Delivered(_) | Event::ContributionNeeded { .. } | Event::Report(_) => return,
            Event::Unsolicited { .. } => return,
            Event::SendTrain {
                to,
                id,
                packets,
                size,
            } => {
                return self.send_train(to, id, packets, size);
            }
        };
        let _ = self.events.send(out);
    }
}
