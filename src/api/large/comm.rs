//! Transfers of one operation attempt: sends over the node's connections (at most
//! [`WINDOW`] in flight per peer, taken in the order they were asked for, so chunks leave
//! in order and a pipeline keeps moving), receives from the node's mailbox.

use super::Shared;
use super::watch::BulkWatch;
use crate::api::{Node, NodeError};
use crate::net::driver::ApiCommand;
use crate::proto::NodeId;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{Semaphore, oneshot};

/// Transfers in flight to one peer.
pub const WINDOW: usize = 4;

/// Bytes to send: shared, or a range of the caller's vector, copied only once a send
/// window admits them (so a node that starts every chain does not hold a second copy of
/// its vector while its sends queue).
#[derive(Clone, Debug)]
pub enum Payload<'b> {
    Shared(Bytes),
    Borrowed(&'b [u8]),
}

impl Payload<'_> {
    /// The bytes, copied if borrowed.
    pub fn into_bytes(self) -> Bytes {
        match self {
            Payload::Shared(b) => b,
            Payload::Borrowed(s) => Bytes::copy_from_slice(s),
        }
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Shared(b) => b,
            Payload::Borrowed(s) => s,
        }
    }
}

impl From<Bytes> for Payload<'_> {
    fn from(b: Bytes) -> Self {
        Payload::Shared(b)
    }
}

impl From<&Bytes> for Payload<'_> {
    fn from(b: &Bytes) -> Self {
        Payload::Shared(b.clone())
    }
}

/// One attempt's sends and receives.
pub struct Comm<'a> {
    node: &'a Node,
    shared: &'a Shared,
    /// The attempt's operation number.
    pub op: u64,
    name: &'a str,
    windows: Mutex<HashMap<NodeId, Arc<Semaphore>>>,
    /// Where this attempt's bytes and parts are counted.
    watch: Option<BulkWatch>,
}

impl<'a> Comm<'a> {
    pub fn new(node: &'a Node, op: u64, name: &'a str) -> Comm<'a> {
        Comm {
            node,
            shared: &node.bulk,
            op,
            name,
            windows: Mutex::new(HashMap::new()),
            watch: None,
        }
    }

    /// Counts this comm's bytes and parts on `watch`.
    pub fn watched(mut self, watch: Option<&BulkWatch>) -> Comm<'a> {
        self.watch = watch.cloned();
        self
    }

    /// This node has `n` more parts to do in the attempt.
    pub fn parts(&self, n: usize) {
        if let Some(w) = &self.watch {
            w.add_parts(n as u64);
        }
    }

    /// Runs one part, counted done when it succeeds.
    pub async fn part<T>(
        &self,
        work: impl Future<Output = Result<T, NodeError>>,
    ) -> Result<T, NodeError> {
        let done = work.await?;
        if let Some(w) = &self.watch {
            w.part_done();
        }
        Ok(done)
    }

    /// The operation's name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// This node.
    pub fn me(&self) -> NodeId {
        self.node.id
    }

    /// An error of this operation.
    pub fn error(&self, reason: impl std::fmt::Display) -> NodeError {
        NodeError::Bulk {
            name: self.name.to_string(),
            reason: reason.to_string(),
        }
    }

    /// Sends `bytes` as transfer `tag` to `to` (to itself: straight into the mailbox).
    pub async fn send<'b>(
        &self,
        to: NodeId,
        tag: u32,
        bytes: impl Into<Payload<'b>>,
    ) -> Result<(), NodeError> {
        let bytes = bytes.into();
        let len = bytes.len();
        self.send_uncounted(to, tag, bytes).await?;
        if let Some(w) = &self.watch {
            w.sent(len);
        }
        Ok(())
    }

    async fn send_uncounted(
        &self,
        to: NodeId,
        tag: u32,
        bytes: Payload<'_>,
    ) -> Result<(), NodeError> {
        if to == self.node.id {
            return match self
                .shared
                .mailbox
                .post((self.op, to, tag), bytes.into_bytes())
            {
                true => Ok(()),
                false => Err(self.error("this node's mailbox is full")),
            };
        }
        let window = self
            .windows
            .lock()
            .expect("not poisoned")
            .entry(to)
            .or_insert_with(|| Arc::new(Semaphore::new(WINDOW)))
            .clone();
        let _permit = window.acquire().await.expect("never closed");
        // Counted as moving: the node sends no packet trains meanwhile.
        let _moving = self.shared.mailbox.activity().sending();
        let bytes = bytes.into_bytes();
        let conn = self.connection(to).await?;
        let sent = crate::net::bulk::send(&conn, to, self.op, tag, bytes.clone()).await;
        if sent.is_ok() {
            return Ok(());
        }
        // Perhaps a stale connection: once more on the one the driver has now (the
        // receiver keeps one copy per key, so a duplicate is harmless).
        self.shared.conns.lock().expect("not poisoned").remove(&to);
        let conn = self.connection(to).await?;
        crate::net::bulk::send(&conn, to, self.op, tag, bytes)
            .await
            .map_err(|e| self.error(e))
    }

    /// Sends the same bytes to several peers at once.
    pub async fn send_all<'b>(
        &self,
        to: &[NodeId],
        tag: u32,
        bytes: impl Into<Payload<'b>>,
    ) -> Result<(), NodeError> {
        let bytes = bytes.into();
        let sends = to.iter().map(|t| self.send(*t, tag, bytes.clone()));
        futures::future::try_join_all(sends).await.map(|_| ())
    }

    /// The bytes of transfer `tag` from `from` if they are in (never waits).
    pub fn try_recv(&self, from: NodeId, tag: u32) -> Option<Bytes> {
        self.shared.mailbox.try_take((self.op, from, tag))
    }

    /// The bytes of transfer `tag` from `from`, once they are in.
    pub async fn recv(&self, from: NodeId, tag: u32) -> Result<Bytes, NodeError> {
        let got = self
            .shared
            .mailbox
            .take((self.op, from, tag))
            .await
            .map_err(|_| self.error("the mailbox was dropped"))?;
        if let Some(w) = &self.watch {
            w.received(got.len());
        }
        Ok(got)
    }

    async fn connection(&self, to: NodeId) -> Result<quinn::Connection, NodeError> {
        if let Some(c) = self.shared.conns.lock().expect("not poisoned").get(&to)
            && c.close_reason().is_none()
        {
            return Ok(c.clone());
        }
        let (tx, rx) = oneshot::channel();
        self.node
            .commands
            .send(ApiCommand::Connect(to, tx))
            .await
            .map_err(|_| NodeError::Stopped)?;
        match rx.await {
            Ok(Some(conn)) => {
                self.shared
                    .conns
                    .lock()
                    .expect("not poisoned")
                    .insert(to, conn.clone());
                Ok(conn)
            }
            _ => Err(self.error(format!("cannot reach {}", to.short()))),
        }
    }
}
