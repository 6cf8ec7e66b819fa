//! Elastic rendezvous: the members of a group that call [`Group::rendezvous`] agree on a
//! round (an epoch, the member list, a rank each) once enough of them are there.
//!
//! The coordinator is the group's live member with the smallest id, as each node sees it.
//! Every member that joined the group runs a coordinator task, which acts only while its
//! node is the smallest. A caller sends *ready* to the coordinator it sees (again every
//! second, and to a new one when the coordinator changes). The coordinator forms a round
//! when `max` callers are ready, or `min` and either every live member of the group is
//! ready or `last_call` has passed since `min` was reached. It then runs two phases:
//! - *propose* (epoch, members): each caller accepts only an epoch above every epoch it
//!   has accepted before, and only for its current call;
//! - *commit*, once every proposed member accepted; only then does a caller return. A
//!   caller that accepted takes no other proposal (and sends no ready) until that one is
//!   committed or aborted, or its coordinator is gone.
//!
//! So every member that returns a round of an epoch got it from the same proposal: one
//! result per epoch. A coordinator that dies between the phases leaves callers that
//! accepted its epoch; they tell the next coordinator, which proposes a higher one.
//! Messages travel as point-to-point transfers (the large collectives' mailbox).

use super::Group;
use super::round::Round;
use crate::api::large::comm::Comm;
use crate::api::{Node, NodeError};
use crate::proto::NodeId;
use crate::proto::bulk::operation;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::RangeInclusive;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use tracing::debug;

const READY: u32 = 1;
const PROPOSE: u32 = 2;
const ACCEPT: u32 = 3;
const COMMIT: u32 = 4;
const ABORT: u32 = 5;
/// How often mailboxes and views are looked at.
const TICK: Duration = Duration::from_millis(50);
/// How often a waiting caller repeats its ready.
const REPEAT: Duration = Duration::from_secs(1);
/// How long one message may take to leave.
const SEND_WAIT: Duration = Duration::from_secs(5);
/// How long a coordinator waits for the accepts of a proposal.
const ACCEPT_WAIT: Duration = Duration::from_secs(3);

/// What a caller of [`Group::rendezvous`] asks for.
#[derive(Clone, Debug)]
pub struct RendezvousOptions {
    /// The fewest and most members of a round.
    pub members: RangeInclusive<usize>,
    /// How long the call waits for a round.
    pub timeout: Duration,
    /// Once `min` callers are ready, how long to wait for more before forming the round
    /// (unless every live member of the group is ready, or `max` is reached).
    pub last_call: Duration,
}

impl RendezvousOptions {
    /// Between `min` and `max` members, waiting up to `timeout`; `last_call` 1 s.
    pub fn new(members: RangeInclusive<usize>, timeout: Duration) -> Self {
        RendezvousOptions {
            members,
            timeout,
            last_call: Duration::from_secs(1),
        }
    }
}

#[derive(Serialize, Deserialize)]
enum Msg {
    /// A caller waits (`call` tells its calls apart, also across restarts of its node); `accepted` is the highest epoch it has
    /// accepted; `withdraw`: it gave up.
    Ready {
        call: u64,
        accepted: u64,
        min: u32,
        max: u32,
        last_call_ms: u64,
        withdraw: bool,
    },
    Propose {
        epoch: u64,
        members: Vec<(NodeId, u64)>,
    },
    Accept {
        epoch: u64,
        call: u64,
        yes: bool,
    },
    Commit {
        epoch: u64,
    },
    /// The proposal of `epoch` failed: its acceptances are void.
    Abort {
        epoch: u64,
    },
}

impl Msg {
    fn bytes(&self) -> bytes::Bytes {
        bytes::Bytes::from(postcard::to_allocvec(self).expect("plain data encodes"))
    }
    fn parse(b: &[u8]) -> Option<Msg> {
        postcard::from_bytes(b).ok()
    }
}

/// This node's rendezvous state, per group.
#[derive(Default)]
pub(crate) struct Rendezvous {
    inner: Mutex<HashMap<String, GroupState>>,
}

#[derive(Default)]
struct GroupState {
    /// Highest epoch this node accepted as a caller.
    accepted: u64,
    /// Calls made so far.
    calls: u64,
    /// Whether a coordinator task runs.
    serving: bool,
    /// Highest epoch this node proposed as coordinator.
    proposed: u64,
}

impl Rendezvous {
    fn with<T>(&self, group: &str, f: impl FnOnce(&mut GroupState) -> T) -> T {
        let mut inner = self.inner.lock().expect("not poisoned");
        f(inner.entry(group.to_string()).or_default())
    }

    /// Starts the group's coordinator task if it does not run yet.
    pub(crate) fn serve(&self, group: &Group) {
        if self.with(&group.name, |s| std::mem::replace(&mut s.serving, true)) {
            return;
        }
        let group = group.clone();
        tokio::spawn(async move { coordinate(group).await });
    }
}

fn comm<'a>(node: &'a Node, group: &'a str) -> Comm<'a> {
    Comm::new(node, operation(&format!("rendezvous/{group}"), 0), group)
}

/// Sends `msg` to `to` in the background, for at most [`SEND_WAIT`]: a member that died
/// (its connection not yet known lost) must not hold up the caller or the coordinator.
fn post(node: &Node, group: &str, to: NodeId, tag: u32, msg: &Msg) {
    let (node, group, bytes) = (node.clone(), group.to_string(), msg.bytes());
    tokio::spawn(async move {
        let comm = comm(&node, &group);
        let _ = tokio::time::timeout(SEND_WAIT, comm.send(to, tag, bytes)).await;
    });
}

impl Group {
    /// Waits for a round of this group: between `members.start()` and `members.end()`
    /// members that called, agreed by all of them (see the module docs). This node must
    /// have joined. Call again for the next round, e.g. after [`Round::check`] or a round's
    /// collective failed with [`NodeError::RoundBroken`].
    ///
    /// ```no_run
    /// # async fn f(node: overlay::Node) -> Result<(), overlay::NodeError> {
    /// use overlay::api::RendezvousOptions;
    /// use std::time::Duration;
    /// let g = node.group("trainers")?;
    /// g.join().await?;
    /// let round = g.rendezvous(RendezvousOptions::new(2..=8, Duration::from_secs(60))).await?;
    /// println!("epoch {}: rank {} of {}", round.epoch, round.rank, round.members.len());
    /// # Ok(()) }
    /// ```
    pub async fn rendezvous(&self, options: RendezvousOptions) -> Result<Round, NodeError> {
        let (min, max) = (*options.members.start(), *options.members.end());
        if min == 0 || min > max {
            return Err(self.error(format!("no round can have {min}..={max} members")));
        }
        if !self.is_joined() {
            return Err(self.error("join the group before a rendezvous"));
        }
        let node = &self.node;
        let state = &node.rendezvous;
        let call = state.with(&self.name, |s| {
            s.calls += 1;
            // Unique across this node's runs too: a restarted node's first call is not
            // mistaken for a repeat of a call the coordinator served before.
            let started = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            started ^ s.calls.rotate_left(48)
        });
        let comm = comm(node, &self.name);
        let deadline = Instant::now() + options.timeout;
        let ready = |withdraw| Msg::Ready {
            call,
            accepted: state.with(&self.name, |s| s.accepted),
            min: min.min(u32::MAX as usize) as u32,
            max: max.min(u32::MAX as usize) as u32,
            last_call_ms: options.last_call.as_millis() as u64,
            withdraw,
        };
        let mut told: Option<(NodeId, Instant)> = None;
        // The proposal this caller accepted: until its coordinator commits or aborts it (or
        // is gone), no other is accepted and no ready is sent, so a round every member
        // accepted is the round every member returns.
        let mut held: Option<(NodeId, u64, Vec<NodeId>)> = None;
        loop {
            // A coordinator that died or left the group will neither commit nor abort.
            if (held.as_ref()).is_some_and(|(c, ..)| !self.members().contains(c)) {
                held = None;
            }
            // A caller holding an acceptance waits for its outcome (a few seconds at most),
            // even past its deadline: it may be in the round already.
            let overdue = deadline + ACCEPT_WAIT + SEND_WAIT;
            if (Instant::now() >= deadline && held.is_none()) || Instant::now() >= overdue {
                if let Some((c, _)) = told {
                    post(node, &self.name, c, READY, &ready(true));
                }
                return Err(self.error(format!("no round within {:?}", options.timeout)));
            }
            let Some(coordinator) = self.members().first().copied() else {
                return Err(self.error("this node is no longer a member"));
            };
            let due = told.is_none_or(|(c, at)| c != coordinator || at.elapsed() >= REPEAT);
            if due && held.is_none() {
                post(node, &self.name, coordinator, READY, &ready(false));
                told = Some((coordinator, Instant::now()));
            }
            for from in self.members() {
                if let Some(Msg::Propose { epoch, members }) =
                    comm.try_recv(from, PROPOSE).as_deref().and_then(Msg::parse)
                {
                    let mine = members.iter().any(|(m, c)| *m == node.id && *c == call);
                    let free = held.is_none();
                    let yes = mine && free && state.with(&self.name, |s| s.accepted < epoch);
                    if yes {
                        state.with(&self.name, |s| s.accepted = epoch);
                        let ids = members.iter().map(|(m, _)| *m).collect();
                        held = Some((from, epoch, ids));
                    }
                    let answer = Msg::Accept { epoch, call, yes };
                    post(node, &self.name, from, ACCEPT, &answer);
                }
                if let Some(Msg::Commit { epoch }) =
                    comm.try_recv(from, COMMIT).as_deref().and_then(Msg::parse)
                    && let Some((c, e, members)) = &held
                    && *c == from
                    && *e == epoch
                {
                    let rank = members.iter().position(|m| *m == node.id).unwrap_or(0);
                    debug!(group = %self.name, epoch, rank, n = members.len(), "round formed");
                    return Ok(Round {
                        group: self.name.clone(),
                        epoch,
                        members: members.clone(),
                        rank,
                        coordinator: from,
                        node: node.clone(),
                    });
                }
                if let Some(Msg::Abort { epoch }) =
                    comm.try_recv(from, ABORT).as_deref().and_then(Msg::parse)
                    && held
                        .as_ref()
                        .is_some_and(|(c, e, _)| *c == from && *e == epoch)
                {
                    held = None;
                    told = None; // ready again at once
                }
            }
            tokio::time::sleep(TICK).await;
        }
    }
}

/// A caller waiting at the coordinator.
struct Waiting {
    call: u64,
    accepted: u64,
    min: usize,
    max: usize,
    last_call: Duration,
}

/// The coordinator task of one group at this node: acts while this node is the group's
/// smallest live member, until it leaves the group or stops.
async fn coordinate(group: Group) {
    let node = &group.node;
    let comm = comm(node, &group.name);
    let mut waiting: BTreeMap<NodeId, Waiting> = BTreeMap::new();
    // The last call of each member already served: its repeated readies are stale. (Not
    // an order: a member that restarted numbers its calls afresh.)
    let mut served: HashMap<NodeId, u64> = HashMap::new();
    let mut enough_since: Option<Instant> = None;
    while !node.is_stopped() && group.is_joined() {
        tokio::time::sleep(TICK).await;
        let members = group.members();
        let live: HashSet<NodeId> = members.iter().copied().collect();
        for m in &members {
            while let Some(Msg::Ready {
                call,
                accepted,
                min,
                max,
                last_call_ms,
                withdraw,
            }) = comm.try_recv(*m, READY).as_deref().and_then(Msg::parse)
            {
                if withdraw {
                    waiting.remove(m);
                } else if served.get(m) != Some(&call) {
                    let w = Waiting {
                        call,
                        accepted,
                        min: min as usize,
                        max: max as usize,
                        last_call: Duration::from_millis(last_call_ms),
                    };
                    waiting.insert(*m, w);
                }
            }
        }
        waiting.retain(|m, _| live.contains(m));
        served.retain(|m, _| live.contains(m));
        if members.first() != Some(&node.id) || waiting.is_empty() {
            enough_since = None;
            continue;
        }
        let min = waiting.values().map(|w| w.min).max().unwrap_or(1);
        let max = waiting.values().map(|w| w.max).min().unwrap_or(usize::MAX);
        let last_call = waiting
            .values()
            .map(|w| w.last_call)
            .max()
            .unwrap_or_default();
        if waiting.len() < min {
            enough_since = None;
            continue;
        }
        let since = *enough_since.get_or_insert_with(Instant::now);
        let everyone = members.iter().all(|m| waiting.contains_key(m));
        if !(waiting.len() >= max || everyone || since.elapsed() >= last_call) {
            continue;
        }
        let chosen: Vec<(NodeId, u64)> = (waiting.iter().take(max))
            .map(|(m, w)| (*m, w.call))
            .collect();
        let highest = waiting.values().map(|w| w.accepted).max().unwrap_or(0);
        let epoch = node.rendezvous.with(&group.name, |s| {
            s.proposed = s.proposed.max(s.accepted).max(highest) + 1;
            s.proposed
        });
        let ok = propose(&group, &comm, epoch, &chosen).await;
        if !ok {
            let abort = Msg::Abort { epoch };
            for (m, _) in &chosen {
                post(node, &group.name, *m, ABORT, &abort);
            }
        }
        enough_since = None;
        if ok {
            debug!(group = %group.name, epoch, n = chosen.len(), "round committed");
            for (m, call) in &chosen {
                waiting.remove(m);
                served.insert(*m, *call);
            }
        } else {
            // Whoever did not accept is dropped until it says it is ready again.
            for (m, _) in &chosen {
                waiting.remove(m);
            }
        }
    }
    node.rendezvous.with(&group.name, |s| s.serving = false);
}

/// Proposes `epoch` to `chosen` and commits it if every one of them accepts in time.
async fn propose(group: &Group, comm: &Comm<'_>, epoch: u64, chosen: &[(NodeId, u64)]) -> bool {
    let proposal = Msg::Propose {
        epoch,
        members: chosen.to_vec(),
    };
    for (m, _) in chosen {
        post(&group.node, &group.name, *m, PROPOSE, &proposal);
    }
    let deadline = Instant::now() + ACCEPT_WAIT;
    let mut yes: HashSet<NodeId> = HashSet::new();
    while yes.len() < chosen.len() && Instant::now() < deadline {
        for (m, call) in chosen {
            if let Some(Msg::Accept {
                epoch: e,
                call: c,
                yes: y,
            }) = comm.try_recv(*m, ACCEPT).as_deref().and_then(Msg::parse)
                && e == epoch
                && c == *call
            {
                if !y {
                    return false;
                }
                yes.insert(*m);
            }
        }
        tokio::time::sleep(TICK).await;
    }
    if yes.len() < chosen.len() {
        return false;
    }
    let commit = Msg::Commit { epoch };
    for (m, _) in chosen {
        post(&group.node, &group.name, *m, COMMIT, &commit);
    }
    true
}
