//! Configuring and starting a node.

use super::data_dir::{
    StoredSettings, files, lock, read_peers, read_settings, read_token, read_token_generation,
    read_token_previous, save_peers, write_rotated_token, write_settings,
};
use super::{IoStep, Node, NodeError};
use crate::net::driver::{Driver, DriverParts};
#[cfg(feature = "testkit")]
use crate::net::emulated::{EmulatedUdpSocket, LatencyMap};
use crate::net::identity::Identity;
use crate::net::link::{LinkContext, LinkStats};
use crate::net::meter::{MeteredSocket, SendMeter};
use crate::net::record_auth::Ed25519Records;
use crate::net::stream::Forwarding;
use crate::net::token::JoinToken;
use crate::net::token_ring::TokenRing;
use crate::net::view::MemberView;
use crate::proto::gossip::{Gossip, GossipConfig};
use crate::proto::{Config, Core, Time};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc};
use tracing::{Instrument, info};

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

/// What [`NodeBuilder::on_joining`] keeps.
type JoiningHook = Box<dyn FnOnce(&[SocketAddr]) + Send>;

/// Configures and starts a [`Node`].
pub struct NodeBuilder {
    listen: Option<SocketAddr>,
    listen_default: SocketAddr,
    advertise: Option<SocketAddr>,
    name: Option<String>,
    join: Vec<SocketAddr>,
    token: Option<JoinToken>,
    identity: Option<Identity>,
    data_dir: Option<PathBuf>,
    config: Config,
    gossip: GossipConfig,
    transport: Transport,
    join_timeout: Duration,
    op_timeout: Duration,
    delivery_buffer: usize,
    forwarding: Forwarding,
    on_joining: Option<JoiningHook>,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder {
            listen: None,
            listen_default: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            name: None,
            join: Vec::new(),
            token: None,
            identity: None,
            data_dir: None,
            config: Config::wan(),
            gossip: GossipConfig::default(),
            transport: Transport::Udp,
            join_timeout: Duration::from_secs(20),
            op_timeout: crate::proto::collective::DEFAULT_TIMEOUT,
            delivery_buffer: super::DEFAULT_DELIVERY_BUFFER,
            forwarding: Forwarding::Pipelined,
            on_joining: None,
        }
    }
}

impl NodeBuilder {
    /// Address to listen on. Without it, the address of the last start stored in the
    /// data directory, else [`listen_default`](Self::listen_default).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }

    /// The address to listen on when neither [`listen`](Self::listen) nor the data
    /// directory gives one (default 127.0.0.1:0, any free port).
    pub fn listen_default(mut self, addr: SocketAddr) -> Self {
        self.listen_default = addr;
        self
    }

    /// The address other members are told to reach this node at, when it differs from
    /// the listen address (behind NAT or port forwarding, or when listening on 0.0.0.0 or
    /// `[::]`). A port of 0 means the port bound. Without it, a node listening on an
    /// unspecified address advertises the address of its interface that routes to the
    /// first join address, and refuses to start when there is none.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), overlay::api::NodeError> {
    /// let node = overlay::api::Node::builder()
    ///     .listen("0.0.0.0:7400".parse().unwrap())
    ///     .advertise("192.0.2.10:7400".parse().unwrap())
    ///     .start()
    ///     .await?;
    /// assert_eq!(node.advertised_addr().to_string(), "192.0.2.10:7400");
    /// # Ok(()) }
    /// ```
    pub fn advertise(mut self, addr: SocketAddr) -> Self {
        self.advertise = Some(addr);
        self
    }

    /// A readable name shown to other members (default: the name stored in the data
    /// directory, else the node's short id).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
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

    /// Keep the key, the token, the last known members and the listen address, advertised
    /// address and name here, so a restart with nothing but this directory comes back
    /// with the same id on the same address and rejoins without `join`. The directory is
    /// locked while the node runs: a second node on it fails with
    /// [`NodeError::DataDirInUse`].
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

    /// The most unread payload bytes each [`Node::deliveries`] stream holds (default
    /// 64 MiB); past it, deliveries are dropped for that stream and it reports
    /// [`Lagged`](super::Lagged).
    pub fn delivery_buffer(mut self, bytes: usize) -> Self {
        self.delivery_buffer = bytes;
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

    /// Called once, with the addresses it will try, when the node starts joining (after it
    /// has locked its data directory and bound its port; not called when it creates an
    /// overlay). A daemon uses it to tell its operator what it waits for while a join is
    /// slow.
    ///
    /// ```no_run
    /// # async fn demo(token: overlay::JoinToken) -> Result<(), overlay::NodeError> {
    /// let node = overlay::Node::builder()
    ///     .join("192.0.2.7:7400".parse().unwrap())
    ///     .token(token)
    ///     .on_joining(|addrs| println!("joining through {addrs:?}"))
    ///     .start()
    ///     .await?;
    /// # node.leave().await; Ok(()) }
    /// ```
    pub fn on_joining(mut self, hook: impl FnOnce(&[SocketAddr]) + Send + 'static) -> Self {
        self.on_joining = Some(Box::new(hook));
        self
    }

    /// Binds, starts the driver task and, when join addresses are known, joins.
    pub async fn start(self) -> Result<Node, NodeError> {
        let io = |what: IoStep| move |source| NodeError::Io { what, source };
        let dir_lock = match &self.data_dir {
            Some(dir) => Some(lock(dir)?),
            None => None,
        };
        let stored = match &self.data_dir {
            Some(dir) => read_settings(dir)?,
            None => StoredSettings::default(),
        };
        let listen = self.listen.or(stored.listen).unwrap_or(self.listen_default);
        // A stored advertised address belongs to the stored listen address.
        let advertise = self
            .advertise
            .or(stored.advertise.filter(|_| self.listen.is_none()));
        let chosen_name = self.name.clone().or(stored.name.clone());
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
        let stored_generation = self.data_dir.as_deref().map_or(0, read_token_generation);
        let stored_previous = self.data_dir.as_deref().and_then(read_token_previous);
        let (token, generation, previous) = match (self.token, stored_token) {
            // A token rotated while this node ran wins over the one given again (the
            // original, from a config file or the environment), which stays the previous.
            (Some(t), Some(s)) if s != t && stored_generation > 0 => {
                (s, stored_generation, Some(t))
            }
            (Some(t), Some(s)) if s == t => (t, stored_generation, stored_previous),
            (Some(t), _) => (t, 0, None),
            (None, Some(s)) => (s, stored_generation, stored_previous),
            (None, None) if self.join.is_empty() => (JoinToken::generate(), 0, None),
            (None, None) => return Err(NodeError::MissingToken),
        };
        // A rotation (here or spread from a member) is kept for the next start.
        let persist: Option<crate::net::token_ring::OnChange> = self.data_dir.clone().map(|dir| {
            Box::new(
                move |token: &JoinToken, generation: u64, previous: Option<&JoinToken>| {
                    write_rotated_token(&dir, token, generation, previous)
                },
            ) as crate::net::token_ring::OnChange
        });
        let ring = Arc::new(TokenRing::new(token, generation, previous, persist));
        let longest_idle =
            crate::net::links::IdleLimits::for_config(&self.config, self.gossip.probe_interval)
                .most();
        let mut server_config = identity.server_config()?;
        server_config.transport_config(Arc::new(transport_config(longest_idle)));
        let meter = SendMeter::new();
        let socket = match &self.transport {
            Transport::Udp => udp_socket(listen),
            #[cfg(feature = "testkit")]
            Transport::Emulated { map, cluster } => {
                EmulatedUdpSocket::bind(listen, map.clone(), *cluster)
                    .map(|s| s as Arc<dyn quinn::AsyncUdpSocket>)
            }
        }
        .map_err(io(IoStep::Listen(listen)))?;
        let endpoint = crate::net::endpoint_on(
            MeteredSocket::new(socket, meter.clone()),
            Some(server_config),
        )
        .map_err(io(IoStep::Listen(listen)))?;
        let mut client_config = identity.client_config()?;
        client_config.transport_config(Arc::new(transport_config(longest_idle)));
        let local_addr = endpoint.local_addr().map_err(io(IoStep::LocalAddr))?;
        let advertised = advertised_addr(local_addr, advertise, &join)?;
        if let Some(dir) = &self.data_dir {
            let settings = StoredSettings {
                listen: Some(local_addr),
                advertise: advertise.map(|_| advertised),
                name: chosen_name.clone(),
            };
            if settings != stored {
                write_settings(dir, &settings)?;
            }
        }

        let id = identity.id();
        let start = Instant::now();
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(1);
        let seed = u64::from_le_bytes(id.0[..8].try_into().expect("8 bytes")) ^ wall_ms;
        let core = Core::new(id, self.config, seed, Time::ZERO);
        let name = chosen_name.unwrap_or_else(|| id.short());
        let name_for_info = name.clone();
        let gossip = Gossip::new(
            id,
            name,
            advertised,
            wall_ms,
            self.gossip,
            seed.rotate_left(17),
            Time::ZERO,
        )
        .with_auth(Box::new(Ed25519Records::new(&identity)?));
        let (to_driver, inbox) = mpsc::channel(crate::net::link::INBOX);
        let (cmd_tx, commands) = mpsc::channel(64);
        let (events, _) = broadcast::channel(1024);
        let members = MemberView::default();
        let mailbox = Arc::new(crate::net::bulk::Mailbox::default());
        let subscribers = crate::net::deliveries::Subscribers::default();
        let ctx = LinkContext {
            me: id,
            ring: ring.clone(),
            members: members.clone(),
            to_driver,
            stats: Arc::new(LinkStats::default()),
            mailbox: mailbox.clone(),
            guard: Arc::default(),
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
            subscribers: subscribers.clone(),
            forwarding: self.forwarding,
            meter,
        });
        // Every line the node logs names it, also when many nodes share a process.
        let span = tracing::info_span!("node", id = %id.short());
        let task = tokio::spawn(driver.run().instrument(span.clone()));
        let node = Node {
            id,
            addr: local_addr,
            advertised,
            ring,
            commands: cmd_tx,
            events,
            members,
            task: Arc::new(std::sync::Mutex::new(Some(task))),
            op_timeout: self.op_timeout,
            delivery_buffer: self.delivery_buffer,
            subscribers,
            bulk: Arc::new(super::large::Shared::new(mailbox)),
            op_stats: Arc::default(),
            groups: Arc::default(),
            rendezvous: Arc::default(),
        };
        node.serve_builtin_keys(&name_for_info, start).await?;
        info!(parent: &span, addr = %local_addr, %advertised, "node started");

        if !join.is_empty() {
            let targets: Vec<SocketAddr> = join
                .iter()
                .copied()
                .filter(|a| *a != local_addr && *a != advertised)
                .collect();
            let deadline = Instant::now() + self.join_timeout;
            if let Some(hook) = self.on_joining {
                hook(&targets);
            }
            if let Err(e) =
                super::join::join_any(&node, &targets, deadline, restarting, &span).await
            {
                node.leave().await;
                return Err(e);
            }
        }
        if let Some(dir) = self.data_dir {
            // Only a token that admitted this node (or that it created) is kept: a rejected
            // one must not be reused by the next start from this directory.
            if let Err(e) = node.ring.persist_now() {
                node.leave().await;
                return Err(io(IoStep::WriteToken(dir.join(files::TOKEN)))(e));
            }
            tokio::spawn(save_peers(node.clone(), dir, dir_lock).instrument(span));
        }
        Ok(node)
    }
}

/// The address gossiped to the others: the one given, else the bound one, else (bound to
/// `0.0.0.0` or `[::]`) the address of the interface that routes to the first join address.
/// Never an unspecified address: nobody could reach it.
fn advertised_addr(
    local: SocketAddr,
    given: Option<SocketAddr>,
    join: &[SocketAddr],
) -> Result<SocketAddr, NodeError> {
    if let Some(mut addr) = given {
        if addr.ip().is_unspecified() {
            return Err(NodeError::BadAdvertise {
                addr,
                reason: "an unspecified address (0.0.0.0 or [::]) cannot be reached",
            });
        }
        if addr.port() == 0 {
            addr.set_port(local.port());
        }
        return Ok(addr);
    }
    if !local.ip().is_unspecified() {
        return Ok(local);
    }
    let routed = join.iter().find_map(|peer| {
        let any: SocketAddr = if peer.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        // Connecting a UDP socket sends nothing: the kernel only picks the route.
        let probe = std::net::UdpSocket::bind(any).ok()?;
        probe.connect(peer).ok()?;
        let ip = probe.local_addr().ok()?.ip();
        (!ip.is_unspecified()).then_some(ip)
    });
    match routed {
        Some(ip) => Ok(SocketAddr::new(ip, local.port())),
        None => Err(NodeError::NeedAdvertise { listen: local }),
    }
}

/// A UDP socket with enlarged buffers ([`crate::net::sockbuf`]), for quinn.
fn udp_socket(addr: SocketAddr) -> std::io::Result<Arc<dyn quinn::AsyncUdpSocket>> {
    let socket = std::net::UdpSocket::bind(addr)?;
    crate::net::sockbuf::enlarge(&socket);
    quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket)
}

/// QUIC transport settings for links the connection table closes after at most
/// `longest` without stream data ([`crate::net::links::IdleLimits::most`]).
///
/// No keep-alives: an idle link costs nothing, and dead peers are noticed by membership,
/// which closes their links (at 15 s, a node of the 120-process netns join storm sent 7-8
/// PINGs a second, each answered by an acknowledgement, on links kept only for the next
/// membership probe). QUIC's own idle timeout is a minute past `longest`, so it never
/// closes a link the table keeps.
pub(crate) fn transport_config(longest: Duration) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(None);
    let timeout = longest.saturating_add(Duration::from_secs(60));
    t.max_idle_timeout(quinn::IdleTimeout::try_from(timeout).ok());
    t
}
