//! The application's stream of deliveries, bounded in memory.

use super::Node;
use crate::net::deliveries::{Budget, DeliverySink, cost};
use crate::net::view::{DecodeError, Delivery};
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// The default bound on the payload bytes a [`Deliveries`] stream holds unread.
pub const DEFAULT_DELIVERY_BUFFER: usize = 64 << 20;

/// Deliveries were dropped for a stream whose reader fell behind: `.0` of them, all after
/// the ones it had queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the reader fell behind: {0} deliveries were dropped for it")]
pub struct Lagged(pub u64);

/// What [`Node::deliveries_of`] yields besides values.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The reader fell behind (see [`Deliveries`]).
    #[error(transparent)]
    Lagged(#[from] Lagged),
    /// A broadcast whose payload is not a `T` (sent by another part of the application,
    /// or by another version of it).
    #[error("broadcast {op:016x} from {root}: {source}")]
    Decode {
        /// Who sent it.
        root: crate::proto::NodeId,
        /// Its number at the root.
        op: u64,
        /// Why it did not decode.
        #[source]
        source: DecodeError,
    },
}

/// Every payload delivered to this node from [`Node::deliveries`] on; `Unpin`, so
/// `.next().await` works without pinning.
///
/// Memory is bounded: the stream holds at most the node's delivery buffer
/// ([`NodeBuilder::delivery_buffer`](super::NodeBuilder::delivery_buffer), 64 MiB by
/// default) of unread payload (one larger payload still arrives into an empty queue).
/// The node never waits for its reader, since that would stall the overlay for every
/// member: what does not fit is dropped for this stream alone, and the stream yields
/// `Err(Lagged(n))` with their count before its next delivery. A reader that keeps up
/// sees every delivery exactly once.
pub struct Deliveries {
    rx: mpsc::UnboundedReceiver<Delivery>,
    budget: Arc<Budget>,
}

impl Deliveries {
    /// Bytes delivered to this stream and not read yet (payloads plus a small charge per
    /// delivery).
    pub fn queued_bytes(&self) -> usize {
        self.budget.queued()
    }
}

impl Stream for Deliveries {
    type Item = Result<Delivery, Lagged>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let missed = self.budget.take_missed();
        if missed > 0 {
            return Poll::Ready(Some(Err(Lagged(missed))));
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(d)) => {
                self.budget.release(cost(&d));
                Poll::Ready(Some(Ok(d)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Node {
    /// Every payload delivered to this node from now on: broadcasts (its own included),
    /// its scatter items, and the results of allreduce, allgather and barrier; bounded
    /// in memory, see [`Deliveries`].
    ///
    /// ```no_run
    /// # async fn f(node: overlay::Node) {
    /// use futures::StreamExt;
    /// let mut deliveries = node.deliveries();
    /// while let Some(d) = deliveries.next().await {
    ///     match d {
    ///         Ok(d) => println!("{} bytes from {}", d.payload.len(), d.root),
    ///         Err(lagged) => eprintln!("{lagged}"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn deliveries(&self) -> Deliveries {
        let budget = Budget::new(self.delivery_buffer);
        let (sink, rx) = DeliverySink::new(budget.clone());
        // In the driver's list before this returns (not at the first poll, nor when the
        // driver reads a command), so nothing delivered after this call is missed.
        self.subscribers.add(sink);
        Deliveries { rx, budget }
    }

    /// The broadcasts delivered to this node from now on, decoded as `T` (the other side
    /// of [`Node::broadcast_value`]); bounded as [`Deliveries`]. Scatter items and the
    /// results of allreduce, allgather and barrier are left out.
    ///
    /// ```no_run
    /// # async fn f(node: overlay::Node) -> Result<(), overlay::NodeError> {
    /// use futures::StreamExt;
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Step { n: u32 }
    /// let mut steps = node.deliveries_of::<Step>();
    /// node.broadcast_value(&Step { n: 1 }).await?;
    /// while let Some(Ok((from, step))) = steps.next().await {
    ///     println!("step {} from {from}", step.n);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn deliveries_of<T: DeserializeOwned + Send + 'static>(
        &self,
    ) -> impl Stream<Item = Result<(crate::proto::NodeId, T), DeliveryError>> + Send + Unpin + 'static
    {
        self.deliveries().filter_map(|d| {
            let item = match d {
                Err(lagged) => Some(Err(DeliveryError::Lagged(lagged))),
                Ok(d) if d.kind != crate::proto::DeliveryKind::Broadcast => None,
                Ok(d) => Some(d.decode::<T>().map(|v| (d.root, v)).map_err(|source| {
                    DeliveryError::Decode {
                        root: d.root,
                        op: d.op,
                        source,
                    }
                })),
            };
            std::future::ready(item)
        })
    }
}
