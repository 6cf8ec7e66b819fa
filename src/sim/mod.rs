//! A seeded discrete-event simulator that runs one protocol core per node in virtual time.
//!
//! The simulator is the `sim` driver of the design: it owns every [`Core`](crate::proto::Core)
//! of a scenario, feeds them [`Input`](crate::proto::Input)s in virtual time, drains their
//! outputs after every `handle` (the drain rule of [`crate::proto`]) and carries their
//! messages over a latency matrix loaded from `topologies/`. Nothing in here reads a clock or
//! a global RNG: all randomness comes from one [`SplitMix64`](crate::proto::rng::SplitMix64)
//! seeded by [`SimConfig::seed`], so a run is reproducible from its seed.
//!
//! Models:
//! - **network** ([`NetModel`]): the one-way latency between two nodes is the topology's
//!   latency between their clusters; messages to crashed or departed nodes, across a
//!   partitioned pair of clusters, or picked by the loss probability are dropped;
//! - **bandwidth** (with [`SimConfig::bandwidth`], where the topology gives figures): a
//!   message of `encoded_len` bytes is serialized on its sender's NIC, then on the
//!   directed link between the two clusters (shared by every node of the sender's
//!   cluster), each first come, first served with a bounded buffer that drops the tail,
//!   then delayed by the latency; as the emulated socket does. A tail drop is a loss: the
//!   sender is told, as for partitions;
//! - **packet trains** ([`Event::SendTrain`](crate::proto::Event::SendTrain)): the
//!   asked node's datagrams are handed to its NIC back to back when the event is drained
//!   (at the CPU cursor, with no CPU cost of their own) and cross the same pipes as
//!   messages (charged their size, as messages are charged their encoded length); each
//!   one arrives or is lost (loss, partition, full buffer, silently: datagrams are
//!   unreliable). The asker is told what came
//!   ([`Input::TrainArrived`](crate::proto::Input::TrainArrived)), with the received count,
//!   spread and span the QUIC driver computes from its arrival stamps (the first third of
//!   the train left out), at the last datagram, or half a second after the last arrival if
//!   the last datagram was lost (the driver's idle wait). Without bandwidth a train
//!   arrives in one instant; the core takes no span under 200 µs, so it measures nothing.
//!   Train bytes count under the traffic kind `train`, outside every control figure.
//!   Cores probe only if [`SimConfig::core`] has `bw_probers` (the default has none);
//! - **CPU**: each node is busy until some time; a received message is handled at
//!   `max(arrival, busy_until) + cpu_recv`, and every message drained afterwards costs
//!   `cpu_send` and departs at the running cursor; timers and membership notices are handled
//!   at `max(due, busy_until)`;
//! - **membership**: the initial nodes all know each other at t = 0; later joins, graceful
//!   leaves and crashes reach the other nodes after [`SimConfig::membership_delay`] or
//!   [`SimConfig::failure_detection`].
//!
//! Checks ([`invariants`], [`metrics`]): a global parent view is kept from the cores'
//! `ParentChanged` events and checked for cycles after every change; every
//! [`SimConfig::check_interval`] a snapshot says how many trees span all live nodes and are
//! wide-area (and site) optimal, which drives the convergence and repair measurements.
//! Optimality is judged on the groups of clusters latency can tell apart ([`groups`]), not
//! on the clusters the topology file declares.
//!
//! ```no_run
//! use overlay::sim::{Sim, SimConfig};
//! use overlay::topology::Topology;
//! use std::time::Duration;
//!
//! let topo = Topology::builtin("phoenix-27").expect("shipped topology");
//! let mut sim = Sim::new(&topo, SimConfig { seed: 7, ..SimConfig::default() });
//! let converged = sim.run_until_converged(Duration::from_secs(60));
//! println!("converged at {converged:?}\n{}", sim.report());
//! ```

mod bandwidth;
mod bound;
pub mod bulk;
mod config;
pub(crate) mod dot;
pub mod groups;
pub mod invariants;
mod member_node;
pub mod metrics;
mod network;
mod node;
mod queue;
mod report;
pub mod scenario;
mod simulator;
pub mod traffic;
mod train;

#[cfg(test)]
mod tests;

pub use self::bound::max_flow_mbit;
pub use self::config::{SimConfig, TracePair};
pub use self::groups::Groups;
pub use self::invariants::{CycleRecord, ParentView};
pub use self::member_node::MemberNode;
pub use self::metrics::{Snapshot, TreeDiagnosis, TreeMetrics};
pub use self::network::NetModel;
pub use self::node::{SimNode, Spawn};
pub use self::report::{RepairRecord, Report};
pub use self::scenario::Action;
pub use self::simulator::{OptimalBreak, ParentChange, Sim};
pub use self::traffic::{KindTraffic, TrafficByKind};
