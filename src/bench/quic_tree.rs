//! Static trees executed over real QUIC: the baselines of the real-QUIC Fig. 5.
//!
//! Every node of a [`StaticNet`] is a QUIC endpoint of its own (same TLS, same
//! emulated-latency socket as the overlay's nodes), with no protocol at all: a message
//! carries `(tree, seq)`, and a node that receives it records the time and forwards it to
//! its children in that tree, in order, each on a long-lived stream of a connection opened
//! once. So the static trees pay exactly what a hand-configured tree over QUIC pays: one
//! send per child, the link latency, encryption, and the scheduling of a shared machine.

use super::trees::Tree;
use crate::net::emulated::{self, LatencyMap};
use crate::net::identity::{Identity, server_name_for};
use crate::proto::NodeId;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Largest frame a static node accepts.
const MAX_FRAME: usize = 64 * 1024;
/// Largest segment of a segmented broadcast (a frame holds it and its 8-byte header).
pub const MAX_SEGMENT: usize = MAX_FRAME - 8;

/// When each node received message `(tree, seq)`.
type Receipts = HashMap<(u32, u32), Vec<Option<Instant>>>;

/// A node's writer queue to each child it has connected to so far.
type Writers = HashMap<usize, mpsc::UnboundedSender<Arc<Vec<u8>>>>;

/// State shared by every node of the net.
struct Shared {
    addrs: Vec<SocketAddr>,
    ids: Vec<NodeId>,
    client: quinn::ClientConfig,
    endpoints: Vec<quinn::Endpoint>,
    trees: RwLock<HashMap<u32, Arc<Tree>>>,
    /// When node `i` received `(tree, seq)`.
    receipts: Mutex<Receipts>,
    /// Per node, the writer queue to each child connected so far.
    writers: Vec<Mutex<Writers>>,
}

/// A set of protocol-less QUIC nodes that forward along given trees.
pub struct StaticNet {
    shared: Arc<Shared>,
}

impl StaticNet {
    /// One endpoint per entry of `clusters` (node `i` in cluster `clusters[i]`) on the
    /// emulated network `map`.
    pub fn start(map: Arc<LatencyMap>, clusters: &[usize]) -> anyhow::Result<StaticNet> {
        let any = Identity::generate()?;
        let mut client = any.client_config()?;
        client.transport_config(Arc::new(crate::api::transport_config(
            crate::net::links::LINK_IDLE,
        )));
        let mut endpoints = Vec::new();
        let mut addrs = Vec::new();
        let mut ids = Vec::new();
        for &c in clusters {
            let identity = Identity::generate()?;
            let mut server = identity.server_config()?;
            server.transport_config(Arc::new(crate::api::transport_config(
                crate::net::links::LINK_IDLE,
            )));
            let ep = emulated::endpoint("127.0.0.1:0".parse()?, map.clone(), c, Some(server))?;
            addrs.push(ep.local_addr()?);
            ids.push(identity.id());
            endpoints.push(ep);
        }
        let shared = Arc::new(Shared {
            addrs,
            ids,
            client,
            writers: (0..clusters.len()).map(|_| Mutex::default()).collect(),
            endpoints,
            trees: RwLock::default(),
            receipts: Mutex::default(),
        });
        for i in 0..clusters.len() {
            tokio::spawn(accept(shared.clone(), i));
        }
        Ok(StaticNet { shared })
    }

    /// Installs `tree` under the number `id`.
    pub fn install(&self, id: u32, tree: Tree) {
        let mut trees = self.shared.trees.write().unwrap_or_else(|e| e.into_inner());
        trees.insert(id, Arc::new(tree));
    }

    /// Sends `payload` down tree `id` as message `seq`; returns, per node, the time from
    /// the start to its receipt (`None`: not reached within `timeout`; the root gets 0).
    pub async fn broadcast(
        &self,
        id: u32,
        seq: u32,
        payload: &[u8],
        timeout: Duration,
    ) -> Vec<Option<Duration>> {
        self.broadcast_segments(id, seq, payload, payload.len().max(1), timeout)
            .await
    }

    /// Sends `payload` down tree `id` cut into segments of `segment` bytes (at most
    /// [`MAX_SEGMENT`]), as messages `first_seq`, `first_seq + 1`, ..., all queued at once
    /// and forwarded by every node as each arrives (MagPIe's segmented broadcast); returns,
    /// per node, the time from the start to its last segment (`None`: not every segment
    /// within `timeout`).
    pub async fn broadcast_segments(
        &self,
        id: u32,
        first_seq: u32,
        payload: &[u8],
        segment: usize,
        timeout: Duration,
    ) -> Vec<Option<Duration>> {
        let n = self.shared.addrs.len();
        let root = match self.tree(id) {
            Some(t) => t.root,
            None => return vec![None; n],
        };
        let segment = segment.clamp(1, MAX_SEGMENT);
        let pieces: Vec<&[u8]> = if payload.is_empty() {
            vec![payload]
        } else {
            payload.chunks(segment).collect()
        };
        let seqs: Vec<u32> = (0..pieces.len() as u32)
            .map(|k| first_seq.wrapping_add(k))
            .collect();
        let start = Instant::now();
        {
            let mut r = self.receipts();
            for &seq in &seqs {
                let mut row = vec![None; n];
                row[root] = Some(start);
                r.insert((id, seq), row);
            }
        }
        for (piece, &seq) in pieces.iter().zip(&seqs) {
            forward(&self.shared, root, id, Arc::new(encode(id, seq, piece)));
        }
        let deadline = start + timeout;
        loop {
            let done = {
                let r = self.receipts();
                seqs.iter().all(|seq| {
                    r.get(&(id, *seq))
                        .is_some_and(|row| row.iter().all(Option::is_some))
                })
            };
            if done || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut r = self.receipts();
        let mut last: Vec<Option<Instant>> = vec![Some(start); n];
        for seq in &seqs {
            let row = r.remove(&(id, *seq)).unwrap_or_else(|| vec![None; n]);
            for (l, t) in last.iter_mut().zip(row) {
                *l = match (*l, t) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
        }
        last.into_iter()
            .map(|t| t.map(|t| t.saturating_duration_since(start)))
            .collect()
    }

    fn receipts(&self) -> std::sync::MutexGuard<'_, Receipts> {
        self.shared
            .receipts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn tree(&self, id: u32) -> Option<Arc<Tree>> {
        let trees = self.shared.trees.read().unwrap_or_else(|e| e.into_inner());
        trees.get(&id).cloned()
    }

    /// Closes every endpoint.
    pub fn close(&self) {
        for ep in &self.shared.endpoints {
            ep.close(0u32.into(), b"done");
        }
    }
}

fn encode(tree: u32, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(12 + payload.len());
    f.extend_from_slice(&((8 + payload.len()) as u32).to_be_bytes());
    f.extend_from_slice(&tree.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Node `at` sends `frame` to each of its children in tree `id`, in order.
fn forward(shared: &Arc<Shared>, at: usize, id: u32, frame: Arc<Vec<u8>>) {
    let children = {
        let trees = shared.trees.read().unwrap_or_else(|e| e.into_inner());
        match trees.get(&id) {
            Some(t) => t.children[at].clone(),
            None => return,
        }
    };
    let mut writers = shared.writers[at].lock().unwrap_or_else(|e| e.into_inner());
    for child in children {
        let tx = writers
            .entry(child)
            .or_insert_with(|| connect(shared.clone(), at, child));
        let _ = tx.send(frame.clone());
    }
}

/// A writer task for the edge `from -> to`: dials once, then writes every frame queued on
/// one stream.
fn connect(shared: Arc<Shared>, from: usize, to: usize) -> mpsc::UnboundedSender<Arc<Vec<u8>>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Arc<Vec<u8>>>();
    tokio::spawn(async move {
        let ep = &shared.endpoints[from];
        let name = server_name_for(shared.ids[to]);
        let Ok(connecting) = ep.connect_with(shared.client.clone(), shared.addrs[to], &name) else {
            return;
        };
        let Ok(conn) = connecting.await else { return };
        let Ok(mut send) = conn.open_uni().await else {
            return;
        };
        while let Some(frame) = rx.recv().await {
            if send.write_all(&frame).await.is_err() {
                return;
            }
        }
    });
    tx
}

/// Node `i` accepts connections and reads every stream they open.
async fn accept(shared: Arc<Shared>, i: usize) {
    let ep = shared.endpoints[i].clone();
    while let Some(incoming) = ep.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            while let Ok(recv) = conn.accept_uni().await {
                tokio::spawn(read(shared.clone(), i, recv));
            }
        });
    }
}

async fn read(shared: Arc<Shared>, i: usize, mut recv: quinn::RecvStream) {
    let mut len = [0u8; 4];
    loop {
        if recv.read_exact(&mut len).await.is_err() {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        if !(8..=MAX_FRAME).contains(&n) {
            return;
        }
        let mut body = vec![0u8; n];
        if recv.read_exact(&mut body).await.is_err() {
            return;
        }
        let now = Instant::now();
        let tree = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        let seq = u32::from_be_bytes([body[4], body[5], body[6], body[7]]);
        {
            let mut r = shared.receipts.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = r.get_mut(&(tree, seq)).and_then(|row| row.get_mut(i))
                && slot.is_none()
            {
                *slot = Some(now);
            }
        }
        let mut frame = Vec::with_capacity(4 + n);
        frame.extend_from_slice(&len);
        frame.extend_from_slice(&body);
        forward(&shared, i, tree, Arc::new(frame));
    }
}
