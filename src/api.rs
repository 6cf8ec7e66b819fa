//! The library API: start a node, join an overlay, look at members and trees, leave.
//!
//! ```no_run
//! # async fn demo() -> Result<(), overlay::api::NodeError> {
//! use overlay::api::Node;
//! let first = Node::builder().listen("127.0.0.1:0".parse().unwrap()).start().await?;
//! let second = Node::builder()
//!     .listen("127.0.0.1:0".parse().unwrap())
//!     .join(first.local_addr())
//!     .token(first.token().clone())
//!     .start()
//!     .await?;
//! println!("{:?}", second.members().await?);
//! second.leave().await;
//! # Ok(()) }
//! ```

mod collective;

pub use self::collective::{
    BroadcastReport, COUNT_KEY, Gathered, INFO_KEY, NodeInfo, Reduced, ScatterReport,
    decode_reduce_outcome,
};
pub use crate::net::view::{
    ClusterGroup, ClusterLevel, DecodeError, Delivery, MemberInfo, NodeEvent, NodeStatus, TreeInfo,
    TreeNode, TreeSnapshot,
};

use crate::net::driver::{ApiCommand, Driver, DriverParts};
#[cfg(feature = "testkit")]
use crate::net::emulated::{EmulatedUdpSocket, LatencyMap};
use crate::net::identity::{Identity, IdentityError};
use crate::net::link::{LinkContext, LinkStats};
use crate::net::meter::{MeteredSocket, SendMeter};
pub use crate::net::stream::Forwarding;
use crate::net::token::{JoinToken, TokenError};
use crate::net::view::MemberView;
use crate::proto::gossip::{Gossip, GossipConfig};
use crate::proto::{Config, Core, Liveness, NodeId, Time};
use futures::Stream;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::{info, warn};

/// Files in a node's data directory.
pub mod files {
    /// The node's private key (PEM); its id derives from it.
    pub const KEY: &str = "node.key";
    /// The overlay's join token.
    pub const TOKEN: &str = "token";
    /// Addresses of members last seen, to rejoin after a restart.
    pub const PEERS: &str = "peers.json";
    /// The admin socket of the running node.
    pub const ADMIN: &str = "admin.sock";
}

/// Why a node could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Key or TLS set-up failed.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// A stored or given token is malformed.
    #[error("join token: {0}")]
    Token(#[from] TokenError),
    /// Joining needs the overlay's token.
    #[error("joining needs the overlay's join token (--token or OVERLAY_TOKEN)")]
    MissingToken,
    /// Binding the socket or another I/O step failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// No member answered the join.
    #[error("could not join the overlay: {0}")]
    Join(String),
    /// A member refused this node's join-token proof: the token is not this overlay's.
    #[error("could not join the overlay: {0}")]
    TokenRejected(String),
    /// The node has stopped.
    #[error("the node has stopped")]
    Stopped,
    /// A payload is larger than a collective operation carries.
    #[error("payload of {len} bytes exceeds the limit of {limit} bytes")]
    PayloadTooLarge { len: usize, limit: usize },
    /// A collective operation could not start.
    #[error("collective operation refused: {0}")]
    Collective(String),
    /// A value could not be decoded.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A value could not be encoded.
    #[error("cannot encode the value: {0}")]
    Encode(#[source] postcard::Error),
}

/// What the node's UDP socket is.
#[derive(Clone, Default)]
pub enum Transport {
    /// A plain UDP socket.
    #[default]
    Udp,
    /// A loopback socket that delays datagrams by a topology's latency (tests, demo).
    #[cfg(feature = "testkit")]
    Emulated {
        /// The shared emulated network.
        map: Arc<LatencyMap>,
        /// This node's cluster in the map's topology.
        cluster: usize,
    },
}

/// Configures and starts a [`Node`].
pub struct NodeBuilder {
    listen: SocketAddr,
    name: String,
    join: Vec<SocketAddr>,
    token: Option<JoinToken>,
    identity: Option<Identity>,
    data_dir: Option<PathBuf>,
    config: Config,
    gossip: GossipConfig,
    transport: Transport,
    join_timeout: Duration,
    op_timeout: Duration,
    forwarding: Forwarding,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            name: String::new(),
            join: Vec::new(),
            token: None,
            identity: None,
            data_dir: None,
            config: Config::wan(),
            gossip: GossipConfig::default(),
            transport: Transport::Udp,
            join_timeout: Duration::from_secs(20),
            op_timeout: crate::proto::collective::DEFAULT_TIMEOUT,
            forwarding: Forwarding::Pipelined,
        }
    }
}

impl NodeBuilder {
    /// Address to listen on (default 127.0.0.1:0).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// A readable name shown to other members.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Join through the member at `addr` (may be given several times: tried in order).
    /// Without any, the node starts a new overlay.
    pub fn join(mut self, addr: SocketAddr) -> Self {
        self.join.push(addr);
        self
    }

    /// The overlay's join token (required to join; generated when starting a new overlay).
    pub fn token(mut self, token: JoinToken) -> Self {
        self.token = Some(token);
        self
    }

    /// Use this identity instead of a stored or fresh one.
    pub fn identity(mut self, identity: Identity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Keep the key, the token and the last known members here, so a restart keeps the
    /// node's id and can rejoin without `join`.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Tree protocol settings (default [`Config::wan`]).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Membership settings.
    pub fn gossip_config(mut self, gossip: GossipConfig) -> Self {
        self.gossip = gossip;
        self
    }

    /// The UDP socket to use (default a plain one).
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// Deadline of collective operations started through the node (default 10 s): after
    /// it, members that have not answered are reported missing.
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// How this node passes large broadcasts on to its children (default
    /// [`Forwarding::Pipelined`]; see the design document on data streams).
    pub fn forwarding(mut self, forwarding: Forwarding) -> Self {
        self.forwarding = forwarding;
        self
    }

    /// How long to keep trying the join addresses (default 20 s).
    pub fn join_timeout(mut self, timeout: Duration) -> Self {
        self.join_timeout = timeout;
        self
    }

    /// Binds, starts the driver task and, when join addresses are known, joins.
    pub async fn start(self) -> Result<Node, NodeError> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| NodeError::Io { what, source }
        };
        if let Some(dir) = &self.data_dir {
            std::fs::create_dir_all(dir).map_err(io(&format!("{}", dir.display())))?;
        }
        let identity = match (self.identity, &self.data_dir) {
            (Some(i), _) => i,
            (None, Some(dir)) => Identity::load_or_create(&dir.join(files::KEY))?,
            (None, None) => Identity::generate()?,
        };
        let stored_token = match &self.data_dir {
            Some(dir) => read_token(dir)?,
            None => None,
        };
        let mut join = self.join.clone();
        let restarting = join.is_empty() && stored_token.is_some();
        if restarting && let Some(dir) = &self.data_dir {
            join = read_peers(dir);
        }
        let token = match (self.token, stored_token) {
            (Some(t), _) => t,
            (None, Some(t)) => t,
            (None, None) if self.join.is_empty() => JoinToken::generate(),
            (None, None) => return Err(NodeError::MissingToken),
        };
        let mut server_config = identity.server_config()?;
        server_config.transport_config(Arc::new(transport_config()));
        let meter = SendMeter::new();
        let socket = match &self.transport {
            Transport::Udp => udp_socket(self.listen),
            #[cfg(feature = "testkit")]
            Transport::Emulated { map, cluster } => {
                EmulatedUdpSocket::bind(self.listen, map.clone(), *cluster)
                    .map(|s| s as Arc<dyn quinn::AsyncUdpSocket>)
            }
        }
        .map_err(io(&format!("cannot listen on {}", self.listen)))?;
        let endpoint = crate::net::endpoint_on(
            MeteredSocket::new(socket, meter.clone()),
            Some(server_config),
        )
        .map_err(io(&format!("cannot listen on {}", self.listen)))?;
        let mut client_config = identity.client_config()?;
        client_config.transport_config(Arc::new(transport_config()));
        let local_addr = endpoint
            .local_addr()
            .map_err(io("reading the local address"))?;

        let id = identity.id();
        let start = Instant::now();
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(1);
        let seed = u64::from_le_bytes(id.0[..8].try_into().expect("8 bytes")) ^ wall_ms;
        let core = Core::new(id, self.config, seed, Time::ZERO);
        let name = if self.name.is_empty() {
            id.short()
        } else {
            self.name.clone()
        };
        let name_for_info = name.clone();
        let gossip = Gossip::new(
            id,
            name,
            local_addr,
            wall_ms,
            self.gossip,
            seed.rotate_left(17),
            Time::ZERO,
        );
        let (to_driver, inbox) = mpsc::unbounded_channel();
        let (cmd_tx, commands) = mpsc::channel(64);
        let (events, _) = broadcast::channel(1024);
        let members = MemberView::default();
        let ctx = LinkContext {
            me: id,
            token: Arc::new(token.clone()),
            to_driver,
            stats: Arc::new(LinkStats::default()),
        };
        let driver = Driver::new(DriverParts {
            node: crate::proto::Node::new(core, gossip),
            start,
            endpoint,
            client_config,
            ctx,
            inbox,
            commands,
            events: events.clone(),
            members: members.clone(),
            seed,
            forwarding: self.forwarding,
            meter,
        });
        let task = tokio::spawn(driver.run());
        let node = Node {
            id,
            addr: local_addr,
            token,
            commands: cmd_tx,
            events,
            members,
            task: Arc::new(std::sync::Mutex::new(Some(task))),
            op_timeout: self.op_timeout,
        };
        node.serve_builtin_keys(&name_for_info, start).await?;
        info!(node = %id, addr = %local_addr, "node started");

        if !join.is_empty() {
            let deadline = Instant::now() + self.join_timeout;
            let mut last_error = String::new();
            'outer: loop {
                for addr in join.iter().filter(|a| **a != local_addr) {
                    match node.join(*addr).await {
                        Ok(via) => {
                            info!(via = %via, %addr, "joined");
                            break 'outer;
                        }
                        // A wrong token will not get better by retrying.
                        Err(e @ NodeError::TokenRejected(_)) => {
                            node.leave().await;
                            return Err(e);
                        }
                        Err(NodeError::Join(e)) => {
                            warn!(%addr, error = %e, "join attempt failed");
                            last_error = e;
                        }
                        Err(e) => return Err(e),
                    }
                }
                if Instant::now() >= deadline || restarting && last_error.is_empty() {
                    if restarting {
                        warn!("no known member answered: continuing alone");
                        break;
                    }
                    node.leave().await;
                    return Err(NodeError::Join(last_error));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        if let Some(dir) = self.data_dir {
            // Only a token that admitted this node (or that it created) is kept: a rejected
            // one must not be reused by the next start from this directory.
            if let Err(e) = write_token(&dir, node.token()) {
                node.leave().await;
                return Err(io("writing the token")(e));
            }
            tokio::spawn(save_peers(node.clone(), dir));
        }
        Ok(node)
    }
}

/// A UDP socket with enlarged buffers ([`crate::net::sockbuf`]), for quinn.
fn udp_socket(addr: SocketAddr) -> std::io::Result<Arc<dyn quinn::AsyncUdpSocket>> {
    let socket = std::net::UdpSocket::bind(addr)?;
    crate::net::sockbuf::enlarge(&socket);
    quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket)
}

/// QUIC transport settings: keep-alives so idle links stay open and dead peers are noticed.
pub(crate) fn transport_config() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(Duration::from_secs(5)));
    t.max_idle_timeout(Some(
        quinn::IdleTimeout::try_from(Duration::from_secs(30)).expect("30 s fits"),
    ));
    t
}

/// A handle to a running node; cheap to clone.
#[derive(Clone)]
pub struct Node {
    id: NodeId,
    addr: SocketAddr,
    token: JoinToken,
    commands: mpsc::Sender<ApiCommand>,
    events: broadcast::Sender<NodeEvent>,
    /// The members as the driver last wrote them (read without asking the driver).
    members: MemberView,
    task: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
    /// Deadline of the collective operations this handle starts.
    op_timeout: Duration,
}

impl Node {
    /// A builder with defaults.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The address the node listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The overlay's join token.
    pub fn token(&self) -> &JoinToken {
        &self.token
    }

    /// The command another machine runs to join this overlay through this node.
    pub fn join_command(&self) -> String {
        format!(
            "overlay-node --listen ADDR --join {} --token {} --data-dir DIR",
            self.addr, self.token
        )
    }

    /// Joins through the member at `addr`; returns its id.
    pub async fn join(&self, addr: SocketAddr) -> Result<NodeId, NodeError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(ApiCommand::Join(addr, tx))
            .await
            .map_err(|_| NodeError::Stopped)?;
        match tokio::time::timeout(Duration::from_secs(10), rx).await {
            Ok(Ok(Ok(id))) => Ok(id),
            Ok(Ok(Err(e))) if e.token_rejected => Err(NodeError::TokenRejected(e.to_string())),
            Ok(Ok(Err(e))) => Err(NodeError::Join(e.to_string())),
            Ok(Err(_)) => Err(NodeError::Stopped),
            Err(_) => Err(NodeError::Join(format!("{addr} did not answer the join"))),
        }
    }

    /// A snapshot of members, trees and counters.
    pub async fn status(&self) -> Result<NodeStatus, NodeError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(ApiCommand::Status(tx))
            .await
            .map_err(|_| NodeError::Stopped)?;
        rx.await.map_err(|_| NodeError::Stopped)
    }

    /// Every member known (this node included), sorted by id. Read from a view the node
    /// keeps current on every membership change; RTTs are at most a second old.
    pub async fn members(&self) -> Result<Vec<MemberInfo>, NodeError> {
        if self.commands.is_closed() {
            return Err(NodeError::Stopped);
        }
        Ok(self.members.snapshot())
    }

    /// This node's state in `root`'s tree.
    pub async fn tree(&self, root: NodeId) -> Result<Option<TreeInfo>, NodeError> {
        Ok(self
            .status()
            .await?
            .trees
            .into_iter()
            .find(|t| t.root == root))
    }

    /// The whole tree of `root`: asks every live member for its parent (waits up to 2 s).
    pub async fn tree_snapshot(&self, root: NodeId) -> Result<TreeSnapshot, NodeError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(ApiCommand::Tree(root, tx))
            .await
            .map_err(|_| NodeError::Stopped)?;
        rx.await.map_err(|_| NodeError::Stopped)
    }

    /// How this node passes large broadcasts on to its children from now on (transfers
    /// already running keep theirs).
    pub async fn set_forwarding(&self, forwarding: Forwarding) -> Result<(), NodeError> {
        self.commands
            .send(ApiCommand::SetForwarding(forwarding))
            .await
            .map_err(|_| NodeError::Stopped)
    }

    /// This handle with another deadline for the collective operations it starts (see
    /// [`NodeBuilder::op_timeout`]); other handles of the node keep theirs. A broadcast of
    /// a large payload over slow links needs more than the default.
    pub fn with_op_timeout(mut self, timeout: Duration) -> Node {
        self.op_timeout = timeout;
        self
    }

    /// The filtered RTT to `peer`, if measured.
    pub async fn rtt(&self, peer: NodeId) -> Result<Option<Duration>, NodeError> {
        Ok(self
            .members()
            .await?
            .into_iter()
            .find(|m| m.id == peer)
            .and_then(|m| m.rtt_ms)
            .map(|ms| Duration::from_secs_f64(ms / 1e3)))
    }

    /// Member and tree events from now on. A consumer that falls more than 1024 events
    /// behind skips the oldest ones.
    pub fn events(&self) -> impl Stream<Item = NodeEvent> + Send + 'static {
        let rx = self.events.subscribe();
        futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(e) => return Some((e, rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }

    /// Leaves gracefully (detach from every tree, announce to every member) and stops.
    pub async fn leave(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(ApiCommand::Leave(tx)).await.is_ok() {
            let _ = rx.await;
        }
        let task = self.task.lock().expect("not poisoned").take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Stops the driver at once, telling nobody: the in-process stand-in for a crash
    /// (with the node's address cut off the emulated network, see
    /// `LocalOverlay::crash` of the test kit).
    #[cfg(feature = "testkit")]
    pub(crate) fn abort(&self) {
        if let Some(task) = self.task.lock().expect("not poisoned").take() {
            task.abort();
        }
    }

    /// Whether the driver task has stopped.
    pub fn is_stopped(&self) -> bool {
        self.commands.is_closed()
    }
}

fn read_token(dir: &Path) -> Result<Option<JoinToken>, NodeError> {
    match std::fs::read_to_string(dir.join(files::TOKEN)) {
        Ok(s) => Ok(Some(s.parse()?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(NodeError::Io {
            what: format!("{}", dir.join(files::TOKEN).display()),
            source,
        }),
    }
}

fn write_token(dir: &Path, token: &JoinToken) -> std::io::Result<()> {
    let path = dir.join(files::TOKEN);
    std::fs::write(&path, format!("{token}\n"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

fn read_peers(dir: &Path) -> Vec<SocketAddr> {
    std::fs::read_to_string(dir.join(files::PEERS))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

/// Every few seconds, remembers where live members listen (for a rejoin after restart).
async fn save_peers(node: Node, dir: PathBuf) {
    let mut last = Vec::new();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let Ok(status) = node.status().await else {
            return;
        };
        let mut addrs: Vec<SocketAddr> = status
            .members
            .iter()
            .filter(|m| m.id != node.id && m.state == Liveness::Alive)
            .map(|m| m.addr)
            .collect();
        addrs.sort();
        if addrs != last && !addrs.is_empty() {
            let tmp = dir.join(format!("{}.tmp", files::PEERS));
            let json = serde_json::to_string(&addrs).unwrap_or_default();
            if std::fs::write(&tmp, json).is_ok() {
                let _ = std::fs::rename(&tmp, dir.join(files::PEERS));
            }
            last = addrs;
        }
    }
}
