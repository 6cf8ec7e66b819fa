//! Small scripted nodes for testing the simulator's mechanics without the real core.

use crate::proto::{Command, DownReason, Event, Input, Message, NodeId, Time, Transmit};
use crate::sim::{NetModel, SimNode, Spawn};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// What a fake saw: (node index, handle time in µs, description).
pub type Log = Arc<Mutex<Vec<(usize, u64, String)>>>;

/// Two clusters "A" and "B", 100 µs inside, `inter_ms` between, with the given initial nodes.
pub fn two_clusters(inter_ms: u64, initial: &[usize]) -> NetModel {
    let i = Duration::from_micros(100);
    let x = Duration::from_millis(inter_ms);
    NetModel::new("two", &["A", "B"], &[vec![i, x], vec![x, i]], None, initial)
}

/// A scripted timer: at this time (µs), optionally set `(root index, parent index)`.
pub type Step = (u64, Option<(usize, Option<usize>)>);

/// Behaviour of a [`Fake`].
#[derive(Clone, Default)]
pub struct Behaviour {
    /// Pings sent to each member on MemberUp.
    pub pings_on_up: usize,
    /// Answer every Ping with a Pong.
    pub reply: bool,
    /// Ping every known member this often.
    pub period: Option<Duration>,
    /// Timer deadlines (µs) at which the node emits a scripted parent change
    /// `(root index, parent index)` or nothing.
    pub script: Vec<Step>,
    /// A Ping re-arms the timer to `Time(sent_us + rearm_offset_us)` (dropping the other
    /// deadlines).
    pub rearm_on_ping: bool,
    /// See `rearm_on_ping`.
    pub rearm_offset_us: u64,
}

/// A scripted node: pings, pongs, timers and parent changes as told by its [`Behaviour`].
pub struct Fake {
    id: NodeId,
    index: usize,
    seed: u64,
    b: Behaviour,
    log: Log,
    known: BTreeSet<NodeId>,
    timeouts: BTreeSet<Time>,
    script: VecDeque<Step>,
    parents: HashMap<NodeId, NodeId>,
    out: VecDeque<Transmit>,
    events: VecDeque<Event>,
    left: bool,
}

impl Fake {
    /// A factory making fakes with behaviour `b(index)`, all logging into `log`.
    pub fn factory(
        sim_seed: u64,
        log: Log,
        b: impl Fn(usize) -> Behaviour + 'static,
    ) -> Box<dyn FnMut(Spawn) -> Fake> {
        Box::new(move |s: Spawn| {
            let b = b(s.index);
            let mut timeouts = BTreeSet::new();
            if let Some(p) = b.period {
                timeouts.insert(s.now + p);
            }
            for &(t, _) in &b.script {
                timeouts.insert(Time::from_micros(t));
            }
            Fake {
                id: s.id,
                index: s.index,
                seed: sim_seed,
                script: b.script.iter().copied().collect(),
                b,
                log: log.clone(),
                known: BTreeSet::new(),
                timeouts,
                parents: HashMap::new(),
                out: VecDeque::new(),
                events: VecDeque::new(),
                left: false,
            }
        })
    }

    fn note(&self, now: Time, what: String) {
        self.log
            .lock()
            .expect("not poisoned")
            .push((self.index, now.as_micros(), what));
    }

    fn ping(&mut self, to: NodeId, now: Time) {
        self.out.push_back(Transmit {
            to,
            msg: Message::Ping {
                sent_us: now.as_micros(),
                rtt_hint_us: None,
                watch: false,
            },
        });
    }
}

impl SimNode for Fake {
    fn handle(&mut self, now: Time, input: Input) {
        assert!(!self.left, "input after leaving");
        match input {
            Input::MemberUp { id } => {
                self.note(now, format!("up {id}"));
                self.known.insert(id);
                for _ in 0..self.b.pings_on_up {
                    self.ping(id, now);
                }
            }
            Input::MemberDown { id, reason } => {
                self.note(now, format!("down {id} {reason:?}"));
                self.known.remove(&id);
            }
            Input::Received { from, msg } => match msg {
                Message::Ping { sent_us, .. } => {
                    self.note(now, format!("ping from {from}"));
                    if self.b.reply {
                        self.out.push_back(Transmit {
                            to: from,
                            msg: Message::Pong { sent_us },
                        });
                    }
                    if self.b.rearm_on_ping {
                        self.timeouts.clear();
                        self.timeouts
                            .insert(Time::from_micros(sent_us + self.b.rearm_offset_us));
                    }
                }
                Message::Pong { .. } => self.note(now, format!("pong from {from}")),
                other => self.note(now, format!("{other:?} from {from}")),
            },
            Input::Timeout => {
                self.note(now, "timeout".to_string());
                while self.timeouts.first().is_some_and(|&t| t <= now) {
                    self.timeouts.pop_first();
                }
                while self
                    .script
                    .front()
                    .is_some_and(|&(t, _)| t <= now.as_micros())
                {
                    let (_, change) = self.script.pop_front().expect("front");
                    if let Some((root, parent)) = change {
                        let root = NodeId::from_seed(self.seed, root as u64);
                        let new = parent.map(|p| NodeId::from_seed(self.seed, p as u64));
                        let old = match new {
                            Some(p) => self.parents.insert(root, p),
                            None => self.parents.remove(&root),
                        };
                        self.events
                            .push_back(Event::ParentChanged { root, old, new });
                    }
                }
                if let Some(p) = self.b.period {
                    self.timeouts.insert(now + p);
                    let peers: Vec<NodeId> = self.known.iter().copied().collect();
                    for id in peers {
                        self.ping(id, now);
                    }
                }
            }
            Input::Command(Command::Leave) => {
                self.note(now, "leave".to_string());
                for &id in &self.known {
                    self.out.push_back(Transmit {
                        to: id,
                        msg: Message::Detach { root: self.id },
                    });
                }
                self.left = true;
                self.timeouts.clear();
                self.events.push_back(Event::Left);
            }
            Input::LinkLost { peer } => self.note(now, format!("lost {peer}")),
            Input::RttSample { .. }
            | Input::MemberGroups { .. }
            | Input::SendCost { .. }
            | Input::BulkTransfer { .. }
            | Input::TrainArrived { .. }
            | Input::TransferRate { .. }
            | Input::PathSaturated { .. }
            | Input::LocalHealth { .. }
            | Input::Command(_) => {}
        }
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
    fn poll_timeout(&mut self) -> Option<Time> {
        self.timeouts.first().copied()
    }
    fn parent(&self, root: NodeId) -> Option<NodeId> {
        self.parents.get(&root).copied()
    }
}

/// A node that knows the cluster of every node and builds wide-area optimal trees straight
/// from membership: inside the root's cluster everyone attaches to the root; in another
/// cluster the member with the smallest id (the gateway) attaches to the root and the rest
/// to the gateway. No messages.
pub struct Oracle {
    id: NodeId,
    cluster: usize,
    registry: Arc<Mutex<HashMap<NodeId, usize>>>,
    known: BTreeSet<NodeId>,
    parents: HashMap<NodeId, NodeId>,
    events: VecDeque<Event>,
}

impl Oracle {
    /// A factory of oracles sharing one id -> cluster registry.
    pub fn factory() -> Box<dyn FnMut(Spawn) -> Oracle> {
        let registry = Arc::new(Mutex::new(HashMap::new()));
        Box::new(move |s: Spawn| {
            registry
                .lock()
                .expect("not poisoned")
                .insert(s.id, s.cluster);
            let mut known = BTreeSet::new();
            known.insert(s.id);
            Oracle {
                id: s.id,
                cluster: s.cluster,
                registry: registry.clone(),
                known,
                parents: HashMap::new(),
                events: VecDeque::new(),
            }
        })
    }

    fn recompute(&mut self) {
        let reg = self.registry.lock().expect("not poisoned");
        let gateway = self
            .known
            .iter()
            .copied()
            .filter(|k| reg[k] == self.cluster)
            .min();
        for &r in &self.known {
            if r == self.id {
                continue;
            }
            let want = if reg[&r] == self.cluster || gateway == Some(self.id) {
                r
            } else {
                gateway.expect("self is known")
            };
            let old = self.parents.insert(r, want);
            if old != Some(want) {
                self.events.push_back(Event::ParentChanged {
                    root: r,
                    old,
                    new: Some(want),
                });
            }
        }
    }
}

impl SimNode for Oracle {
    fn handle(&mut self, _now: Time, input: Input) {
        match input {
            Input::MemberUp { id } => {
                self.known.insert(id);
            }
            Input::MemberDown { id, reason } => {
                assert!(matches!(reason, DownReason::Left | DownReason::Dead));
                self.known.remove(&id);
                if self.parents.remove(&id).is_some() {
                    self.events.push_back(Event::RootRemoved { root: id });
                }
            }
            Input::Command(Command::Leave) => {
                self.known.clear();
                self.known.insert(self.id);
                let roots: Vec<NodeId> = self.parents.drain().map(|(r, _)| r).collect();
                for root in roots {
                    self.events.push_back(Event::RootRemoved { root });
                }
                self.events.push_back(Event::Left);
                return;
            }
            _ => {}
        }
        self.recompute();
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        None
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
    fn poll_timeout(&mut self) -> Option<Time> {
        None
    }
    fn parent(&self, root: NodeId) -> Option<NodeId> {
        self.parents.get(&root).copied()
    }
}
