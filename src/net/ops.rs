//! The driver's side of collective operations: API calls waiting for their reports,
//! contribution handlers, delivery subscribers and barrier waiters. The driver hands every
//! [`OpCommand`] and every collective [`Event`] of the core to [`Ops`].

use super::deliveries::Subscribers;
use super::view::Delivery;
use crate::proto::collective::{BarrierOutcome, DeliveryKind, ReduceFn};
use crate::proto::{Command, Event, Node, NodeInput, OpReport, Start, StartKind, Time};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;
use tracing::{debug, warn};

mod nonce;

/// Answers gathers and reduces naming a key: gets the request, returns this node's value
/// (`None` declines). Runs on the node's driver task, so it must be quick.
pub type Handler = Arc<dyn Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync>;

/// Collective requests from the API.
pub enum OpCommand {
    /// Start an operation; the report comes back on the channel.
    Start(Start, oneshot::Sender<OpReport>),
    /// Broadcast a large payload on the data plane (`digest`: its SHA-256).
    StartStream {
        payload: Bytes,
        digest: [u8; 32],
        timeout: std::time::Duration,
        /// The group it is for (then it goes down the latency tree, never striped).
        group: Option<String>,
        reply: oneshot::Sender<OpReport>,
    },
    /// Arrive at a barrier; its outcome comes back when it is released.
    Barrier {
        name: String,
        timeout: std::time::Duration,
        reply: oneshot::Sender<BarrierOutcome>,
    },
    /// Publish this node's value for a key.
    Publish { key: String, value: Vec<u8> },
    /// Withdraw a published value.
    Withdraw { key: String },
    /// Answer requests for a key with a handler.
    Handle { key: String, handler: Handler },
    /// Register a named reducer.
    RegisterReducer { name: String, f: ReduceFn },
    /// Answered once every command sent before it is applied (commands are handled in
    /// order): a publish is then visible to requests from other nodes.
    Applied(oneshot::Sender<()>),
}

/// What [`Ops::event`] made of a core event.
pub enum Handled {
    /// Not a collective event: the driver publishes it.
    No,
    /// Taken care of.
    Yes,
    /// The application's answer to a contribution request: feed it to the node.
    Answer(Command),
}

/// The driver's bookkeeping of collective operations. Its maps are owned by the driver task
/// alone (the API reaches them only through [`OpCommand`]s on the driver's channel), so they
/// are plain `HashMap`s: nothing reads them concurrently.
pub struct Ops {
    waiting: HashMap<u64, oneshot::Sender<OpReport>>,
    handlers: HashMap<String, Handler>,
    /// Shared with the API handles, which subscribe without waiting for the driver.
    subscribers: Subscribers,
    barriers: HashMap<String, Vec<oneshot::Sender<BarrierOutcome>>>,
    nonces: nonce::NonceSeq,
}

impl Drop for Ops {
    /// The driver stopped: the `deliveries()` streams end (the API handles hold the list
    /// too, so it would not go away with the driver).
    fn drop(&mut self) {
        self.subscribers.close();
    }
}

impl Ops {
    /// Bookkeeping whose operation numbers are drawn from a sequence keyed by `seed` and
    /// by fresh randomness (see `ops/nonce.rs`): distinct within a run, unlike a
    /// restarted node's previous run's, and unpredictable to the members that see them.
    pub fn new(seed: u64, subscribers: Subscribers) -> Ops {
        Ops {
            waiting: HashMap::new(),
            handlers: HashMap::new(),
            subscribers,
            barriers: HashMap::new(),
            nonces: nonce::NonceSeq::new(seed),
        }
    }

    fn nonce(&mut self) -> u64 {
        self.nonces.next_nonce()
    }

    /// Numbers an operation the driver starts itself and keeps its report's channel.
    pub fn register(&mut self, reply: oneshot::Sender<OpReport>) -> u64 {
        let nonce = self.nonce();
        self.waiting.insert(nonce, reply);
        nonce
    }

    /// Hands a delivery to every subscriber.
    pub fn deliver(&mut self, delivery: Delivery) {
        self.subscribers.offer(&delivery);
    }

    /// Handles one API request.
    pub fn command(&mut self, node: &mut Node, now: Time, cmd: OpCommand) {
        let input = match cmd {
            OpCommand::Start(mut s, reply) => {
                s.nonce = self.nonce();
                self.waiting.insert(s.nonce, reply);
                Command::Start(s)
            }
            OpCommand::Barrier {
                name,
                timeout,
                reply,
            } => {
                self.barriers.entry(name.clone()).or_default().push(reply);
                Command::Start(Start {
                    group: None,
                    nonce: self.nonce(),
                    timeout,
                    what: StartKind::Barrier { name },
                })
            }
            OpCommand::StartStream { .. } => unreachable!("started by the driver (data plane)"),
            OpCommand::Publish { key, value } => Command::Publish { key, value },
            OpCommand::Withdraw { key } => Command::Withdraw { key },
            OpCommand::Handle { key, handler } => {
                self.handlers.insert(key, handler);
                return;
            }
            OpCommand::RegisterReducer { name, f } => {
                node.register_reducer(name, f);
                return;
            }
            OpCommand::Applied(reply) => {
                let _ = reply.send(());
                return;
            }
        };
        node.handle(now, NodeInput::Command(input));
    }

    /// Handles a collective event of the core.
    pub fn event(&mut self, received: Instant, event: &Event) -> Handled {
        match event {
            Event::Delivered(d) => {
                if d.kind == DeliveryKind::Barrier
                    && let Ok(outcome) = postcard::from_bytes::<BarrierOutcome>(&d.payload)
                {
                    for w in self.barriers.remove(&outcome.name).unwrap_or_default() {
                        let _ = w.send(outcome.clone());
                    }
                }
                let delivery = Delivery {
                    root: d.op.root,
                    op: d.op.nonce,
                    kind: d.kind,
                    payload: Bytes::from(d.payload.clone()),
                    group: d.group.clone(),
                    received,
                };
                self.subscribers.offer(&delivery);
            }
            Event::ContributionNeeded { op, key, request } => {
                let value = match self.handlers.get(key) {
                    Some(h) => h(request),
                    // Asked about a barrier this node has not reached yet (the runner's
                    // gather came first): no answer now. The node's own `barrier` call
                    // publishes the key, which answers; else the runner's deadline
                    // reports it missing, as a barrier should.
                    None if key.starts_with(crate::proto::collective::BARRIER_KEY_PREFIX) => {
                        return Handled::Yes;
                    }
                    None => {
                        debug!(%key, root = %op.root, "no value or handler for a gather; declined");
                        None
                    }
                };
                return Handled::Answer(Command::Contribute { op: *op, value });
            }
            Event::Report(r) => {
                let Some(op) = r.op else {
                    return Handled::Yes;
                };
                match self.waiting.remove(&op.nonce) {
                    Some(w) => {
                        let _ = w.send((**r).clone());
                    }
                    None if op.nonce & (1 << 63) != 0 => {} // second half of a composite
                    None if r.purpose.is_some_and(|p| {
                        matches!(p, crate::proto::Purpose::BarrierRelease { .. })
                    }) => {}
                    None => warn!(nonce = op.nonce, "report of an operation nobody waits for"),
                }
            }
            _ => return Handled::No,
        }
        Handled::Yes
    }
}
