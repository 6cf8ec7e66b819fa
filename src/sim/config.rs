//! Simulator settings.

use crate::proto;
use std::time::Duration;

/// Settings of one simulation run. Plain public fields; start from [`Default`].
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Seed of the simulator's RNG; node ids, node seeds, loss and churn derive from it.
    pub seed: u64,
    /// Configuration handed to every core.
    pub core: proto::Config,
    /// CPU time a node spends on every message it sends.
    pub cpu_send: Duration,
    /// CPU time a node spends on every message it receives.
    pub cpu_recv: Duration,
    /// Probability that any one message is lost (0.0 to 1.0).
    pub loss: f64,
    /// Whether the sender is told of each message lost to `loss` or a partition
    /// ([`proto::Input::LinkLost`]), as the QUIC driver tells its core of the frames it
    /// drops and of connections that closed. The simulator tells at once, where QUIC learns
    /// of a dead connection only after its idle timeout (and never loses a frame to packet
    /// loss: it retransmits). Off, the losses are silent, a harsher network than QUIC's.
    pub report_losses: bool,
    /// Whether the topology's bandwidths are modelled: every message is serialized on its
    /// sender's NIC and on the shared link between the two clusters, waits in their
    /// bounded buffers and is dropped when one is full, a loss reported as `loss` is (see
    /// [`crate::sim`]). Off by default, as the emulated socket emulates bandwidth only when
    /// asked: with it, the start of phoenix-168 and scale-1000 (every node advertising
    /// every tree at once, about 0.7 MB per node in the first half second) overflows their
    /// 100 Mbit/s links, and each message lost makes its sender resend its state; QUIC
    /// would queue and retransmit those frames instead, so the figures of those runs
    /// would no longer be the ones QUIC's nodes see. Where a topology gives no bandwidth,
    /// on and off are the same. Packet trains measure only with it on: off, a train's
    /// datagrams all arrive in one instant, and the cores take no rate from that.
    pub bandwidth: bool,
    /// How long until the other nodes learn of a join or a graceful leave.
    pub membership_delay: Duration,
    /// How long until the live nodes are told that a crashed node is dead.
    pub failure_detection: Duration,
    /// How often invariant and metric snapshots are taken.
    pub check_interval: Duration,
    /// How long every tree must stay spanning, optimal and unchanged to call the run converged.
    pub stable_for: Duration,
    /// How many (node, root) pairs each snapshot compares between the global parent view and
    /// the cores' own [`parent`](crate::proto::Core::parent) answers (a rotating sample; 0
    /// turns the sampled check off). [`Sim::cross_check_all`](super::Sim::cross_check_all)
    /// checks every pair.
    pub cross_check_budget: usize,
    /// Record every overlay message between two nodes, marking those about one root's
    /// tree ([`super::Sim::traced`]): a debugging aid for a tree that does not converge.
    pub trace: Option<TracePair>,
}

/// Two nodes and a root, by node index, whose messages [`SimConfig::trace`] records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracePair {
    /// One node of the pair.
    pub a: usize,
    /// The other node.
    pub b: usize,
    /// The root whose tree's part of each message is shown.
    pub root: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            // No packet trains unless a run asks for them: they measure something only with
            // `bandwidth` on, and the requests would change every control figure of the
            // runs before trains were simulated.
            core: proto::Config {
                bw_probers: 0,
                ..proto::Config::wan()
            },
            cpu_send: Duration::from_micros(20),
            cpu_recv: Duration::from_micros(20),
            loss: 0.0,
            report_losses: true,
            bandwidth: false,
            membership_delay: Duration::from_millis(100),
            failure_detection: Duration::from_millis(300),
            check_interval: Duration::from_millis(50),
            stable_for: Duration::from_secs(5),
            cross_check_budget: 20_000,
            trace: None,
        }
    }
}
