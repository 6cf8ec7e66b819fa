//! Configuring and starting a node.

use super::data_dir::{files, read_peers, read_token, save_peers, write_token};
use super::{IoStep, Node, NodeError};
use crate::net::driver::{Driver, DriverParts};
#[cfg(feature = "testkit")]
use crate::net::emulated::{EmulatedUdpSocket, LatencyMap};
use crate::net::identity::Identity;
use crate::net::link::{LinkContext, LinkStats};
use crate::net::meter::{MeteredSocket, SendMeter};
use crate::net::stream::Forwarding;
use crate::net::token::JoinToken;
use crate::net::view::MemberView;
use crate::proto::gossip::{Gossip, GossipConfig};
use crate::proto::{Config, Core, Time};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc};
use tracing::{info, warn};

/// What the node's UDP socket is.
#[derive(Clone, Default)]
#[non_exhaustive]
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
        let io = |what: IoStep| move |source| NodeError::Io { what, source };
        if let Some(dir) = &self.data_dir {
            std::fs::create_dir_all(dir).map_err(io(IoStep::CreateDataDir(dir.clone())))?;
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
        .map_err(io(IoStep::Listen(self.listen)))?;
        let endpoint = crate::net::endpoint_on(
            MeteredSocket::new(socket, meter.clone()),
            Some(server_config),
        )
        .map_err(io(IoStep::Listen(self.listen)))?;
        let mut client_config = identity.client_config()?;
        client_config.transport_config(Arc::new(transport_config()));
        let local_addr = endpoint.local_addr().map_err(io(IoStep::LocalAddr))?;

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
        let (to_driver, inbox) = mpsc::channel(crate::net::link::INBOX);
        let (cmd_tx, commands) = mpsc::channel(64);
        let (events, _) = broadcast::channel(1024);
        let members = MemberView::default();
        let mailbox = Arc::new(crate::net::bulk::Mailbox::default());
        let ctx = LinkContext {
            me: id,
            token: Arc::new(token.clone()),
            to_driver,
            stats: Arc::new(LinkStats::default()),
            mailbox: mailbox.clone(),
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
            bulk: Arc::new(super::large::Shared::new(mailbox)),
            op_stats: Arc::default(),
        };
        node.serve_builtin_keys(&name_for_info, start).await?;
        info!(node = %id, addr = %local_addr, "node started");

        if !join.is_empty() {
            let deadline = Instant::now() + self.join_timeout;
            let mut last_error = None;
            'outer: loop {
                for addr in join.iter().filter(|a| **a != local_addr) {
                    match node.join(*addr).await {
                        Ok(via) => {
                            info!(via = %via, %addr, "joined");
                            break 'outer;
                        }
                        // A wrong token will not get better by retrying.
                        Err(e @ NodeError::TokenRejected { .. }) => {
                            node.leave().await;
                            return Err(e);
                        }
                        Err(e @ (NodeError::Join(_) | NodeError::JoinTimeout { .. })) => {
                            warn!(%addr, error = %e, "join attempt failed");
                            last_error = Some(e);
                        }
                        Err(e) => return Err(e),
                    }
                }
                if Instant::now() >= deadline || restarting && last_error.is_none() {
                    if restarting {
                        warn!("no known member answered: continuing alone");
                        break;
                    }
                    node.leave().await;
                    return Err(last_error.unwrap_or(NodeError::NoJoinAddress));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        if let Some(dir) = self.data_dir {
            // Only a token that admitted this node (or that it created) is kept: a rejected
            // one must not be reused by the next start from this directory.
            if let Err(e) = write_token(&dir, node.token()) {
                node.leave().await;
                return Err(io(IoStep::WriteToken(dir.join(files::TOKEN)))(e));
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
