//! Packet trains: a core's [`Event::SendTrain`](crate::proto::Event::SendTrain) sends its
//! datagrams through the pipes, and the asker is told what arrived
//! ([`Input::TrainArrived`]) as its QUIC driver would tell it (see [`crate::sim::train`]).
//!
//! Datagrams are unreliable: one lost to `loss`, a partition or a full buffer only shortens
//! the train, and no one is told (QUIC does not report a lost datagram, and an
//! [`Input::LinkLost`] would tell the core its link to a live peer failed). Their bytes count under the
//! traffic kind `train`, not in the control figures.

use super::Sim;
use crate::proto::{Input, NodeId, Time};
use crate::sim::bandwidth;
use crate::sim::node::SimNode;
use crate::sim::queue::Pending;
use crate::sim::traffic;
use crate::sim::train::{self, Flight};
use std::time::Duration;

impl<N: SimNode> Sim<N> {
    /// Node `from` sends the train it was asked for: `packets` datagrams of `size` bytes
    /// handed to its NIC at `depart`, back to back, as the driver hands them to QUIC.
    pub(super) fn send_train(
        &mut self,
        from: usize,
        to: NodeId,
        (id, packets, size): (u32, u16, u16),
        depart: Time,
    ) {
        let size = size.max(train::HEADER);
        traffic::record_train(&mut self.stats.traffic, packets, size);
        self.stats.trains_sent += 1;
        let Some(&to) = self.index.get(&to) else {
            self.stats.train_drops += u64::from(packets);
            return;
        };
        let (cf, ct) = (self.cluster_of[from], self.cluster_of[to]);
        if packets == 0 || self.net.is_partitioned(cf, ct) {
            self.stats.train_drops += u64::from(packets);
            return;
        }
        let slot = self.trains.open(Flight::new(from, to, id, packets, size));
        let link = self.pipes.has_link(cf, ct);
        let at = bandwidth::since_zero(depart);
        for seq in 0..packets {
            if self.cfg.loss > 0.0 && self.rng.unit() < self.cfg.loss {
                self.train_datagram(slot, seq, None);
                continue;
            }
            match self.pipes.nic(from, at, size as usize) {
                None => self.train_datagram(slot, seq, None),
                // Through the queue, so the shared link sees every sender in time order.
                Some(left) if link => {
                    let what = Pending::TrainLink {
                        train: slot,
                        seq,
                        at: left,
                    };
                    self.schedule_link(bandwidth::at_or_after(left), what);
                }
                Some(left) => self.train_datagram(slot, seq, Some(left)),
            }
        }
    }

    /// A datagram of the train in `slot` reaches the shared link at `at`.
    pub(super) fn train_link(&mut self, slot: usize, seq: u16, at: Duration) {
        let Some(f) = self.trains.get_mut(slot) else {
            return;
        };
        let (cf, ct) = (self.cluster_of[f.from], self.cluster_of[f.to]);
        let size = f.size as usize;
        let left = self.pipes.link(cf, ct, at, size);
        self.train_datagram(slot, seq, left);
    }

    /// Datagram `seq` of the train in `slot` left its last pipe at `left`, or (`None`) was
    /// lost. Once the whole train is accounted for, its report is queued for the moment the
    /// receiving driver would make it.
    fn train_datagram(&mut self, slot: usize, seq: u16, left: Option<Duration>) {
        let Some(f) = self.trains.get_mut(slot) else {
            return;
        };
        let latency = self
            .net
            .latency(self.cluster_of[f.from], self.cluster_of[f.to]);
        if left.is_none() {
            self.stats.train_drops += 1;
        }
        if !f.resolve(seq, left.map(|l| l + latency)) {
            return;
        }
        match f.measure() {
            Some(m) => {
                let at = bandwidth::at_or_after(m.at).max(self.now);
                self.queue.push(at, Pending::TrainArrived { train: slot });
            }
            None => {
                self.trains.close(slot);
            }
        }
    }

    /// The driver of the train's asker reports it, if the asker is still alive.
    pub(super) fn train_arrived(&mut self, slot: usize) {
        let Some(f) = self.trains.close(slot) else {
            return;
        };
        let Some(m) = f.measure() else {
            return;
        };
        if !self.alive[f.to] {
            return;
        }
        self.stats.trains_delivered += 1;
        let input = Input::TrainArrived {
            from: self.ids[f.from],
            id: f.id,
            received: m.received,
            size: f.size,
            spread: m.spread,
            span: m.span,
        };
        self.feed(f.to, input, true);
    }
}
