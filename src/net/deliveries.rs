//! The queue between the driver and one `deliveries()` stream: bounded in bytes, never
//! waited on. The driver must not stall the overlay for a slow application, so a delivery
//! that does not fit is dropped for that stream alone and counted; the stream reports the
//! count as `Lagged` before its next delivery. A delivery always fits an empty queue, so
//! one payload larger than the bound still arrives.

use super::view::Delivery;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// What the driver and the stream share: bytes queued, deliveries dropped.
#[derive(Debug, Default)]
pub struct Budget {
    /// Bytes charged (see [`cost`]) for what is queued and not read.
    queued: AtomicUsize,
    /// Deliveries dropped since the stream last reported it.
    missed: AtomicU64,
    /// The bound on `queued`.
    limit: usize,
}

impl Budget {
    /// A budget of `limit` payload bytes.
    pub fn new(limit: usize) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            ..Budget::default()
        })
    }

    /// Bytes charged (see [`cost`]) for what is queued and not read.yet.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Takes the count of deliveries dropped since the last call.
    pub fn take_missed(&self) -> u64 {
        self.missed.swap(0, Ordering::Relaxed)
    }

    /// Gives back the bytes of a delivery that was read.
    pub fn release(&self, bytes: usize) {
        self.queued.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// What a queued delivery is charged beyond its payload: its own size and the channel's
/// slot, so that a flood of empty payloads is bounded as well.
pub const OVERHEAD: usize = 128;

/// The bytes a queued delivery is charged for.
pub fn cost(delivery: &Delivery) -> usize {
    delivery.payload.len() + OVERHEAD
}

/// The driver's end of one stream.
pub struct DeliverySink {
    tx: mpsc::UnboundedSender<Delivery>,
    budget: Arc<Budget>,
}

impl DeliverySink {
    /// A sink and the receiver of its stream.
    pub fn new(budget: Arc<Budget>) -> (DeliverySink, mpsc::UnboundedReceiver<Delivery>) {
        // Unbounded as a channel, it cannot grow past `budget.limit` bytes: `offer` is the
        // only sender and queues nothing beyond it (it counts the delivery missed, so the
        // reader gets `Lagged`); every delivery costs at least `OVERHEAD`, so empty
        // payloads count too.
        let (tx, rx) = mpsc::unbounded_channel(); // bounded by `budget` (see `offer`)
        (DeliverySink { tx, budget }, rx)
    }

    /// Queues `delivery` if it fits (or the queue is empty), else counts it as missed.
    /// False once the stream is gone.
    pub fn offer(&self, delivery: &Delivery) -> bool {
        if self.tx.is_closed() {
            return false;
        }
        let len = cost(delivery);
        let queued = self.budget.queued.load(Ordering::Relaxed);
        if queued > 0 && queued + len > self.budget.limit {
            self.budget.missed.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        self.budget.queued.fetch_add(len, Ordering::Relaxed);
        if self.tx.send(delivery.clone()).is_err() {
            self.budget.release(len);
            return false;
        }
        true
    }
}

/// The streams deliveries go to, shared by the node's handles and its driver: a stream is
/// in the list when `deliveries()` returns, not when the driver gets round to a command, so
/// a delivery the driver hands out after that call reaches it even when the driver is busy.
/// Closed when the driver stops: every stream then ends, and so does one taken later.
#[derive(Clone, Default)]
pub struct Subscribers(Arc<Mutex<SubscriberList>>);

#[derive(Default)]
struct SubscriberList {
    sinks: Vec<DeliverySink>,
    /// The driver stopped: nothing will be delivered any more.
    closed: bool,
}

impl Subscribers {
    /// Adds a stream; it gets every delivery offered from now on (none once closed: the
    /// sink is dropped, so the stream ends).
    pub fn add(&self, sink: DeliverySink) {
        let mut list = self.0.lock().expect("not poisoned");
        if !list.closed {
            list.sinks.push(sink);
        }
    }

    /// Offers `delivery` to every stream, forgetting the streams that are gone.
    pub fn offer(&self, delivery: &Delivery) {
        let mut list = self.0.lock().expect("not poisoned");
        list.sinks.retain(|s| s.offer(delivery));
    }

    /// The driver stopped: drops every sink, so that every stream ends after what it holds.
    pub fn close(&self) {
        let mut list = self.0.lock().expect("not poisoned");
        list.closed = true;
        list.sinks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn delivery(len: usize) -> Delivery {
        Delivery {
            root: crate::proto::NodeId([1; 16]),
            op: 1,
            kind: crate::proto::DeliveryKind::Broadcast,
            payload: Bytes::from(vec![0u8; len]),
            group: None,
            received: std::time::Instant::now(),
        }
    }

    #[test]
    fn what_does_not_fit_is_counted_and_an_empty_queue_takes_anything() {
        let budget = Budget::new(1000);
        let (sink, mut rx) = DeliverySink::new(budget.clone());
        assert!(
            sink.offer(&delivery(5000)),
            "one payload larger than the bound"
        );
        assert!(sink.offer(&delivery(10)));
        assert_eq!(budget.queued(), 5000 + OVERHEAD);
        assert_eq!(budget.take_missed(), 1);
        let first = rx.try_recv().expect("queued");
        budget.release(cost(&first));
        for _ in 0..150 {
            sink.offer(&delivery(0));
        }
        let fit = 1000 / OVERHEAD;
        assert_eq!(
            budget.queued(),
            fit * OVERHEAD,
            "empty payloads fill it too"
        );
        assert_eq!(budget.take_missed(), 150 - fit as u64);
        drop(rx);
        assert!(!sink.offer(&delivery(1)), "a closed stream is dropped");
    }
}
