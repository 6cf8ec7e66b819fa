//! Large collectives: allreduce of big typed vectors, planned on the measured network and
//! run as point-to-point transfers, with the algorithm chosen, and corrected, at run time.
//!
//! Every participant calls the same operation (same name, same length and type); the
//! member with the smallest id plans it (see [`crate::proto::bulk`]):
//!
//! 1. each caller sends it a *ready*; it waits for every live member (up to
//!    [`BulkOptions::rendezvous`]; members that die meanwhile are not waited for);
//! 2. it predicts every algorithm on the clusters and bandwidths it measured, takes the
//!    best score of its decision table ([`Node::collective_table`]) unless the caller
//!    forced one, and sends the plan;
//! 3. each participant runs its part ([`exec`]) and says *done*; when all are done the
//!    planner says *commit* and every caller writes the result into its slice. A
//!    participant lost before that makes the planner start a new attempt with the others,
//!    so the result is always exact over the contributors the report names.
//!
//! ```no_run
//! # async fn demo(node: overlay::Node) -> Result<(), overlay::NodeError> {
//! use overlay::bulk::ReduceOp;
//! let mut gradient = vec![0.5f32; 1 << 20];
//! let report = node.allreduce_slice("step-1", &mut gradient, ReduceOp::Sum).await?;
//! println!("{} contributors, {}", report.contributors.len(), report.algorithm.name());
//! # Ok(()) }
//! ```

pub(super) mod comm;
mod exec;
mod network;
mod planner;
mod routes;
mod session;
mod spread;
mod value;
mod watch;

pub use self::watch::{BulkPhase, BulkProgress, BulkTask, BulkWatch};
pub use crate::proto::bulk::model::Prediction;
pub use crate::proto::bulk::{Algorithm, Elem, Inside, ReduceOp, TuneEntry, combine::Element};

use self::session::{Input, Job, Output};
use crate::api::{Node, NodeError};
use crate::net::bulk::Mailbox;
use crate::proto::NodeId;
use crate::proto::bulk::Tuner;
use crate::proto::bulk::paths::Direction;
use bytes::Bytes;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A node's state for large collectives, shared by its API handles.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) mailbox: Arc<Mailbox>,
    conns: Mutex<HashMap<NodeId, quinn::Connection>>,
    /// Calls made per name (part of the operation number).
    calls: Mutex<HashMap<String, u64>>,
    tuner: Mutex<Tuner>,
}

impl Shared {
    pub(crate) fn new(mailbox: Arc<Mailbox>) -> Shared {
        Shared {
            mailbox,
            ..Shared::default()
        }
    }
}

/// Options of one large collective call.
#[derive(Clone, Debug)]
pub struct BulkOptions {
    /// Use this algorithm instead of the node's choice (only the planner's matters).
    pub algorithm: Option<Algorithm>,
    /// The clusters to use instead of the discovered ones (a static configuration).
    pub groups: Option<Vec<Vec<NodeId>>>,
    /// How long the whole call may take.
    pub timeout: Duration,
    /// How long the planner waits for every live member to call.
    pub rendezvous: Duration,
    /// Progress and cancellation of the call ([`BulkWatch`]).
    pub watch: Option<BulkWatch>,
    /// Only these members take part (a group's, or a rendezvous round's, see
    /// [`crate::api::Group`]); `None`: every live member. Listed members that are not live
    /// are left out; every participant must pass the same list.
    pub members: Option<Vec<NodeId>>,
    /// Use this pattern inside every cluster instead of the model's choice (clustered and
    /// hierarchical allreduce and reduce, where a star is an error; the relayed allgather;
    /// only the planner's matters).
    pub inside: Option<Inside>,
    /// Whether a clustered allreduce or reduce relays its chunks through third clusters
    /// (`Some(true)`; with three clusters or more) or sends every partial straight to its
    /// owner (`Some(false)`), instead of the model's choice; only the planner's matters.
    pub relays: Option<bool>,
}

impl Default for BulkOptions {
    fn default() -> Self {
        BulkOptions {
            algorithm: None,
            groups: None,
            timeout: Duration::from_secs(600),
            rendezvous: Duration::from_secs(30),
            watch: None,
            members: None,
            inside: None,
            relays: None,
        }
    }
}

/// What a large collective did.
#[derive(Clone, Debug, PartialEq)]
pub struct BulkReport {
    /// Whose vectors are in the result, in id order.
    pub contributors: Vec<NodeId>,
    /// Live members that are not in it (did not call in time, were lost, or mismatched).
    pub missing: Vec<NodeId>,
    /// How the data moved.
    pub algorithm: Algorithm,
    /// What the model predicted for it.
    pub predicted: Duration,
    /// This call's time on this node.
    pub elapsed: Duration,
    /// Attempts made (more than one: a participant was lost and the rest went again).
    pub attempts: u32,
    /// How the chunks flowed inside each cluster, in the plan's group order (a clustered
    /// or hierarchical allreduce or reduce, or a relayed allgather; empty for the others).
    pub inside: Vec<Inside>,
    /// Whether a clustered allreduce or reduce relayed its chunks through third clusters.
    pub relayed: bool,
}

impl Node {
    /// Combines `data` element by element with the same-named call of every live member
    /// and leaves the result in `data` on all of them. See the module docs.
    pub async fn allreduce_slice<T: Element>(
        &self,
        name: &str,
        data: &mut [T],
        op: ReduceOp,
    ) -> Result<BulkReport, NodeError> {
        self.allreduce_slice_with(name, data, op, BulkOptions::default())
            .await
    }

    /// [`Node::allreduce_slice`] with options.
    pub async fn allreduce_slice_with<T: Element>(
        &self,
        name: &str,
        data: &mut [T],
        op: ReduceOp,
        options: BulkOptions,
    ) -> Result<BulkReport, NodeError> {
        self.reduce_call(name, None, data, op, options).await
    }

    /// Combines `data` element by element with the same-named call of every live member
    /// and leaves the result in `root`'s `data` (the others' stay as they were). Every
    /// member passes the same `root`; the root plans the operation.
    ///
    /// ```no_run
    /// # async fn demo(node: overlay::Node, root: overlay::NodeId) -> Result<(), overlay::NodeError> {
    /// use overlay::bulk::ReduceOp;
    /// let mut counts = vec![1u64; 1 << 20];
    /// let report = node.reduce_slice("histogram", root, &mut counts, ReduceOp::Sum).await?;
    /// if node.id() == root { println!("{} summed", report.contributors.len()); }
    /// # Ok(()) }
    /// ```
    pub async fn reduce_slice<T: Element>(
        &self,
        name: &str,
        root: NodeId,
        data: &mut [T],
        op: ReduceOp,
    ) -> Result<BulkReport, NodeError> {
        self.reduce_slice_with(name, root, data, op, BulkOptions::default())
            .await
    }

    /// [`Node::reduce_slice`] with options.
    pub async fn reduce_slice_with<T: Element>(
        &self,
        name: &str,
        root: NodeId,
        data: &mut [T],
        op: ReduceOp,
        options: BulkOptions,
    ) -> Result<BulkReport, NodeError> {
        self.reduce_call(name, Some(root), data, op, options).await
    }

    async fn reduce_call<T: Element>(
        &self,
        name: &str,
        root: Option<NodeId>,
        data: &mut [T],
        op: ReduceOp,
        options: BulkOptions,
    ) -> Result<BulkReport, NodeError> {
        let call = Call {
            elem: T::ELEM,
            len: data.len() as u64,
            op,
            root,
        };
        // The caller's vector as bytes, not copied where it is stored little-endian; left
        // as it is until the call commits (an attempt that fails starts again from it).
        let input = T::le_bytes(data);
        let (out, report) = self
            .run_bulk(name, Job::Reduce(call), Input::Vector(&input), options)
            .await?;
        drop(input);
        match out {
            Output::Vector(v) => T::get(&v, data),
            _ => unreachable!("a reduce gives a vector"),
        }
        Ok(report)
    }

    /// Sends `pieces[m]` to every member `m` (this node is the root); every other live
    /// member calls [`Node::scatter_receive`] with the same name. Returns this node's own
    /// piece (empty if it gave itself none). Members without a piece get an empty one;
    /// pieces for members that did not take part are reported missing.
    ///
    /// ```no_run
    /// # async fn demo(node: overlay::Node, worker: overlay::NodeId) -> Result<(), overlay::NodeError> {
    /// use std::collections::HashMap;
    /// let pieces = HashMap::from([(worker, bytes::Bytes::from(vec![7u8; 1 << 20]))]);
    /// let (_mine, report) = node.scatter_pieces("tasks-1", pieces, Default::default()).await?;
    /// println!("{} received, {}", report.contributors.len(), report.algorithm.name());
    /// # Ok(()) }
    /// ```
    pub async fn scatter_pieces(
        &self,
        name: &str,
        pieces: HashMap<NodeId, Bytes>,
        options: BulkOptions,
    ) -> Result<(Bytes, BulkReport), NodeError> {
        let sizes: HashMap<NodeId, u64> =
            pieces.iter().map(|(m, p)| (*m, p.len() as u64)).collect();
        let job = Job::Route {
            direction: Direction::Scatter,
            root: self.id,
            len: 0,
            sizes: Some(&sizes),
        };
        let input = Input::Pieces(routes::Pieces::Scatter(&pieces));
        let (out, report) = self.run_bulk(name, job, input, options).await?;
        Ok((own_piece(out, self.id), report))
    }

    /// This node's piece of the scatter `name` that `root` runs ([`Node::scatter_pieces`]).
    pub async fn scatter_receive(
        &self,
        name: &str,
        root: NodeId,
        options: BulkOptions,
    ) -> Result<(Bytes, BulkReport), NodeError> {
        let job = Job::Route {
            direction: Direction::Scatter,
            root,
            len: 0,
            sizes: None,
        };
        let empty = Bytes::new();
        let input = Input::Pieces(routes::Pieces::Own(&empty));
        let (out, report) = self.run_bulk(name, job, input, options).await?;
        Ok((own_piece(out, self.id), report))
    }

    /// Every live member calls this with its `piece`; `root` gets every piece by member
    /// (in id order), the others an empty list.
    ///
    /// ```no_run
    /// # async fn demo(node: overlay::Node, root: overlay::NodeId) -> Result<(), overlay::NodeError> {
    /// let result = bytes::Bytes::from(vec![1u8; 1 << 20]);
    /// let (all, _report) = node.gather_pieces("results-1", root, result, Default::default()).await?;
    /// for (member, piece) in all { println!("{member}: {} bytes", piece.len()); }
    /// # Ok(()) }
    /// ```
    pub async fn gather_pieces(
        &self,
        name: &str,
        root: NodeId,
        piece: Bytes,
        options: BulkOptions,
    ) -> Result<(Vec<(NodeId, Bytes)>, BulkReport), NodeError> {
        let job = Job::Route {
            direction: Direction::Gather,
            root,
            len: piece.len() as u64,
            sizes: None,
        };
        let input = Input::Pieces(routes::Pieces::Own(&piece));
        let (out, report) = self.run_bulk(name, job, input, options).await?;
        match out {
            Output::Pieces(all) => Ok((all, report)),
            _ => unreachable!("a gather gives pieces"),
        }
    }

    /// Every live member calls this with its `piece` (any length, empty included); each
    /// gets every participant's piece, in id order. The member with the smallest id plans
    /// it.
    ///
    /// ```no_run
    /// # async fn demo(node: overlay::Node) -> Result<(), overlay::NodeError> {
    /// let mine = bytes::Bytes::from(vec![3u8; 1 << 20]);
    /// let (all, report) = node.allgather_pieces("shards-1", mine, Default::default()).await?;
    /// assert_eq!(all.len(), report.contributors.len());
    /// # Ok(()) }
    /// ```
    pub async fn allgather_pieces(
        &self,
        name: &str,
        piece: Bytes,
        options: BulkOptions,
    ) -> Result<(Vec<(NodeId, Bytes)>, BulkReport), NodeError> {
        let job = Job::Allgather {
            len: piece.len() as u64,
        };
        let input = Input::Pieces(routes::Pieces::Own(&piece));
        let (out, report) = self.run_bulk(name, job, input, options).await?;
        match out {
            Output::Pieces(all) => Ok((all, report)),
            _ => unreachable!("an allgather gives pieces"),
        }
    }

    /// [`Node::allreduce_slice_with`] in its own task, on a vector it owns: await the
    /// task for the vector and the report, watch its progress, cancel it.
    ///
    /// ```no_run
    /// # async fn demo(node: overlay::Node) -> Result<(), overlay::NodeError> {
    /// use overlay::bulk::ReduceOp;
    /// let task = node.start_allreduce("weights", vec![0.25f32; 1 << 24], ReduceOp::Sum, Default::default());
    /// println!("{:?}", task.progress());
    /// let (weights, report) = task.await?;
    /// # Ok(()) }
    /// ```
    pub fn start_allreduce<T: Element>(
        &self,
        name: &str,
        mut data: Vec<T>,
        op: ReduceOp,
        options: BulkOptions,
    ) -> BulkTask<(Vec<T>, BulkReport)> {
        self.start_bulk(name, options, move |node, name, options| async move {
            let report = node
                .allreduce_slice_with(&name, &mut data, op, options)
                .await?;
            Ok((data, report))
        })
    }

    /// [`Node::allgather_pieces`] in its own task (see [`Node::start_allreduce`]).
    pub fn start_allgather(
        &self,
        name: &str,
        piece: Bytes,
        options: BulkOptions,
    ) -> BulkTask<(Vec<(NodeId, Bytes)>, BulkReport)> {
        self.start_bulk(name, options, move |node, name, options| async move {
            node.allgather_pieces(&name, piece, options).await
        })
    }

    /// Any large collective call in its own task, watched: `call` gets a handle on this
    /// node, the name and the options (with the task's [`BulkWatch`] in them) and makes
    /// the call. Like every start function it spawns a Tokio task, so it is called from
    /// within the runtime the node runs on.
    ///
    /// ```no_run
    /// # async fn demo(node: overlay::Node, root: overlay::NodeId) -> Result<(), overlay::NodeError> {
    /// let piece = bytes::Bytes::from(vec![0u8; 1 << 24]);
    /// let task = node.start_bulk("results", Default::default(), move |node, name, options| async move {
    ///     node.gather_pieces(&name, root, piece, options).await
    /// });
    /// task.cancel();
    /// assert!(task.await.is_err());
    /// # Ok(()) }
    /// ```
    pub fn start_bulk<T, F>(
        &self,
        name: &str,
        mut options: BulkOptions,
        call: impl FnOnce(Node, String, BulkOptions) -> F,
    ) -> BulkTask<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, NodeError>> + Send + 'static,
    {
        let watch = options.watch.get_or_insert_with(BulkWatch::new).clone();
        let join = tokio::spawn(call(self.clone(), name.to_string(), options));
        BulkTask {
            join,
            watch,
            name: name.to_string(),
        }
    }

    /// The decision table of the large collectives this node planned: per collective and
    /// size class, each algorithm's predicted and measured times and the current choice.
    pub fn collective_table(&self) -> Vec<TuneEntry> {
        self.bulk.tuner.lock().expect("not poisoned").entries()
    }

    /// What the model predicts now for an allreduce of `len` elements of `elem` over the
    /// live members, per algorithm.
    pub async fn allreduce_predictions(&self, len: u64, elem: Elem) -> Vec<Prediction> {
        let members = self.live_members();
        let net = network::network(self, &members, None).await;
        crate::proto::bulk::model::predict_all(&net, len, elem.size())
    }
}

/// What an allreduce or reduce caller asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    elem: Elem,
    len: u64,
    op: ReduceOp,
    /// A reduce's root (none: an allreduce).
    root: Option<NodeId>,
}

/// This node's piece out of a scatter's result.
fn own_piece(out: Output, me: NodeId) -> Bytes {
    match out {
        Output::Pieces(p) => p
            .into_iter()
            .find(|(m, _)| *m == me)
            .map(|(_, b)| b)
            .unwrap_or_default(),
        Output::Vector(v) => Bytes::from(v),
        Output::Value(v) => v.unwrap_or_default(),
    }
}
