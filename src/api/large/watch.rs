//! Watching and cancelling a long large collective: [`BulkWatch`] (progress and cancel
//! for any call, given in [`super::BulkOptions::watch`]) and [`BulkTask`] (a spawned call
//! that is a future, with its watch).
//!
//! Cancelling stops the call on this node at once with an error, and tells the operation's
//! planner, which stops it for every participant: they get an error naming this node
//! instead of waiting out their timeout, and nothing is committed. Only a cancel that
//! reaches the planner after every participant finished its part comes too late: the
//! others commit, the canceller gets its error.

use crate::api::NodeError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Where a watched call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkPhase {
    /// Not started yet.
    Idle,
    /// Ready sent: waiting for the plan (the other callers).
    Waiting,
    /// Moving this node's part of an attempt's plan.
    Running,
    /// This node's part is done: waiting for the others and the commit.
    Committing,
    /// Committed: the result is written.
    Finished,
    /// Ended with an error (a timeout, a refusal, a lost planner).
    Failed,
    /// Cancelled on this node.
    Cancelled,
}

impl BulkPhase {
    /// Whether the call has ended (finished, failed or cancelled).
    pub fn is_over(self) -> bool {
        matches!(
            self,
            BulkPhase::Finished | BulkPhase::Failed | BulkPhase::Cancelled
        )
    }

    const ALL: [BulkPhase; 7] = [
        BulkPhase::Idle,
        BulkPhase::Waiting,
        BulkPhase::Running,
        BulkPhase::Committing,
        BulkPhase::Finished,
        BulkPhase::Failed,
        BulkPhase::Cancelled,
    ];
}

/// A watched call's progress on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkProgress {
    /// Where the call is.
    pub phase: BulkPhase,
    /// The attempt being run (more than 0: a participant was lost and the rest went again).
    pub attempt: u32,
    /// Parts of this node's share of the current attempt done (chunks it moved through,
    /// ring steps, tree edges), out of `parts_total`.
    pub parts_done: u64,
    /// Parts this node has in the current attempt.
    pub parts_total: u64,
    /// Payload bytes this node sent for the operation, every attempt counted.
    pub sent_bytes: u64,
    /// Payload bytes this node received for the operation, every attempt counted.
    pub received_bytes: u64,
}

#[derive(Default)]
pub(crate) struct State {
    phase: AtomicU8,
    attempt: AtomicU32,
    parts_done: AtomicU64,
    parts_total: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    cancelled: AtomicBool,
    cancel: Notify,
    /// This node planned the operation and sent its commit: a cancel here comes too late
    /// for the others.
    committed: AtomicBool,
}

/// Progress and cancellation of one large collective call: put a clone in
/// [`super::BulkOptions::watch`], keep one to look at.
///
/// ```no_run
/// # async fn demo(node: overlay::Node) -> Result<(), overlay::NodeError> {
/// use overlay::bulk::{BulkOptions, BulkWatch, ReduceOp};
/// let watch = BulkWatch::new();
/// let options = BulkOptions { watch: Some(watch.clone()), ..Default::default() };
/// let mut v = vec![1.0f64; 1 << 22];
/// let call = node.allreduce_slice_with("big", &mut v, ReduceOp::Sum, options);
/// tokio::pin!(call);
/// loop {
///     tokio::select! {
///         done = &mut call => { done?; break; }
///         () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
///             let p = watch.progress();
///             println!("{:?}: {}/{} parts", p.phase, p.parts_done, p.parts_total);
///         }
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct BulkWatch {
    pub(crate) state: Arc<State>,
}

impl std::fmt::Debug for BulkWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BulkWatch").field(&self.progress()).finish()
    }
}

impl BulkWatch {
    /// A watch for one call.
    pub fn new() -> BulkWatch {
        BulkWatch::default()
    }

    /// The call's progress now.
    pub fn progress(&self) -> BulkProgress {
        let s = &self.state;
        let phase = BulkPhase::ALL
            .get(s.phase.load(Ordering::Relaxed) as usize)
            .copied()
            .unwrap_or(BulkPhase::Idle);
        BulkProgress {
            phase,
            attempt: s.attempt.load(Ordering::Relaxed),
            parts_done: s.parts_done.load(Ordering::Relaxed),
            parts_total: s.parts_total.load(Ordering::Relaxed),
            sent_bytes: s.sent.load(Ordering::Relaxed),
            received_bytes: s.received.load(Ordering::Relaxed),
        }
    }

    /// Stops the call: on this node it returns an error at once; the planner is told and
    /// stops the operation for every participant. A cancel that reaches the planner after
    /// every participant finished its part comes too late for the others: they commit,
    /// and this caller gets the error (its own result is not written). A watch is for one
    /// call: once cancelled it stays so.
    pub fn cancel(&self) {
        self.state.cancelled.store(true, Ordering::SeqCst);
        self.state.cancel.notify_waiters();
    }

    /// Whether [`BulkWatch::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.state.cancelled.load(Ordering::SeqCst)
    }

    /// Returns once the call is cancelled.
    pub(crate) async fn cancelled(&self) {
        loop {
            let notified = self.state.cancel.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }

    /// This node, the planner, is committing the operation.
    pub(crate) fn set_committed(&self) {
        self.state.committed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn committed(&self) -> bool {
        self.state.committed.load(Ordering::SeqCst)
    }

    pub(crate) fn set_phase(&self, phase: BulkPhase) {
        self.state.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// A new attempt's plan is being followed.
    pub(crate) fn start_attempt(&self, attempt: u32) {
        let s = &self.state;
        s.attempt.store(attempt, Ordering::Relaxed);
        s.parts_done.store(0, Ordering::Relaxed);
        s.parts_total.store(0, Ordering::Relaxed);
        self.set_phase(BulkPhase::Running);
    }

    pub(crate) fn attempt(&self) -> u32 {
        self.state.attempt.load(Ordering::Relaxed)
    }

    pub(crate) fn add_parts(&self, n: u64) {
        self.state.parts_total.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn part_done(&self) {
        self.state.parts_done.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn sent(&self, bytes: usize) {
        self.state.sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn received(&self, bytes: usize) {
        self.state
            .received
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// A large collective running in its own task ([`crate::Node::start_allreduce`],
/// [`crate::Node::start_allgather`], [`crate::Node::start_bulk`]): await it for the
/// result, look at its progress, cancel it. Dropping it cancels the call.
pub struct BulkTask<T> {
    pub(crate) join: JoinHandle<Result<T, NodeError>>,
    pub(crate) watch: BulkWatch,
    pub(crate) name: String,
}

impl<T> BulkTask<T> {
    /// The call's progress now.
    pub fn progress(&self) -> BulkProgress {
        self.watch.progress()
    }

    /// Stops the call ([`BulkWatch::cancel`]); awaiting the task then gives the error.
    pub fn cancel(&self) {
        self.watch.cancel();
    }

    /// The call's watch.
    pub fn watch(&self) -> &BulkWatch {
        &self.watch
    }
}

impl<T> Future for BulkTask<T> {
    type Output = Result<T, NodeError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let name = self.name.clone();
        Pin::new(&mut self.join).poll(cx).map(|joined| {
            joined.unwrap_or_else(|e| {
                Err(NodeError::Bulk {
                    name,
                    reason: format!("the call's task ended: {e}"),
                })
            })
        })
    }
}

impl<T> Drop for BulkTask<T> {
    fn drop(&mut self) {
        if !self.join.is_finished() {
            self.watch.cancel();
        }
    }
}
