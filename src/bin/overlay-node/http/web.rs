//! The routes: `/metrics` always; with the web view also the page, its script, the status
//! and tree JSON, the RTT rows and the event stream of statuses.

use super::metrics::{self, Extra};
use super::{Request, Response, rtt};
use futures::StreamExt;
use overlay::api::{Node, NodeEvent};
use overlay::proto::NodeId;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// The page and its script, built into the binary: the view needs nothing from the
/// network but this node.
const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("page.js");
/// How often the event stream sends a fresh status.
const EVENT_PERIOD: Duration = Duration::from_secs(1);
/// How long a tree answer is reused: a tree query asks every member, so several viewers
/// polling must not multiply that traffic.
const TREE_TTL: Duration = Duration::from_secs(1);
/// How long the gathered RTT rows are reused (a gather also reaches every member).
const RTT_TTL: Duration = Duration::from_secs(5);
/// How long the metrics reuse their view of this node's own tree.
const OWN_TREE_TTL: Duration = Duration::from_secs(30);

/// What the daemon counts beside the node's own counters, from the node's events.
#[derive(Debug, Default)]
pub struct Watch {
    parent_changes: AtomicU64,
}

impl Watch {
    /// Starts counting `node`'s events; the counts are from now on.
    pub fn start(node: &Node) -> Arc<Watch> {
        let watch = Arc::new(Watch::default());
        let counting = watch.clone();
        let mut events = Box::pin(node.events());
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                if let NodeEvent::ParentChanged { .. } = event {
                    counting.parent_changes.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        watch
    }
}

/// The routes of one listener.
pub struct Routes {
    node: Node,
    watch: Arc<Watch>,
    /// Whether the web view is served (else only `/metrics`).
    web: bool,
    /// The last tree answer: its root, when, the JSON.
    tree: Mutex<Option<(NodeId, Instant, String)>>,
    /// The last RTT rows: when, the JSON.
    rows: Mutex<Option<(Instant, String)>>,
    /// This node's own tree as the metrics last saw it: when, (members spanned, depth).
    own_tree: Mutex<Option<(Instant, (usize, usize))>>,
}

impl Routes {
    /// Routes for `node`; with `web`, the web view as well as the metrics.
    pub fn new(node: Node, watch: Arc<Watch>, web: bool) -> Routes {
        Routes {
            node,
            watch,
            web,
            tree: Mutex::new(None),
            rows: Mutex::new(None),
            own_tree: Mutex::new(None),
        }
    }

    /// The answer to `req`.
    pub async fn answer(&self, req: &Request) -> Response {
        let json = "application/json";
        match (req.path.as_str(), self.web) {
            ("/metrics", _) => self.metrics().await,
            ("/", true) | ("/index.html", true) => Response::ok("text/html; charset=utf-8", PAGE),
            ("/page.js", true) => Response::ok("text/javascript; charset=utf-8", SCRIPT),
            ("/api/status", true) => match self.node.status().await {
                Ok(s) => to_json(&s).map_or_else(|e| e, |j| Response::ok(json, j)),
                Err(e) => Response::error(503, &e.to_string()),
            },
            ("/api/tree", true) => self.tree(req.param("root").unwrap_or_default()).await,
            ("/api/rtt", true) => self.rows().await,
            ("/events", true) => self.events(),
            _ => Response::error(404, "not found"),
        }
    }

    async fn metrics(&self) -> Response {
        match self.node.status().await {
            Ok(s) => {
                let extra = Extra {
                    parent_changes: self.watch.parent_changes.load(Ordering::Relaxed),
                    collectives: self.node.collective_stats(),
                    own_tree: self.own_tree().await,
                };
                Response::ok(metrics::CONTENT_TYPE, metrics::render(&s, &extra))
            }
            Err(e) => Response::error(503, &e.to_string()),
        }
    }

    /// This node's own tree's reach: asked of every member (one small query each), so at
    /// most once per [`OWN_TREE_TTL`] whatever the scrape interval.
    async fn own_tree(&self) -> Option<(usize, usize)> {
        let mut cached = self.own_tree.lock().await;
        if let Some((at, reach)) = *cached
            && at.elapsed() < OWN_TREE_TTL
        {
            return Some(reach);
        }
        let reach = self.node.tree_snapshot(self.node.id()).await.ok()?.reach();
        *cached = Some((Instant::now(), reach));
        Some(reach)
    }

    /// The tree of the member whose full id, short id or name is `root` (this node's
    /// when empty).
    async fn tree(&self, root: String) -> Response {
        let root = match self.resolve(root.trim()).await {
            Ok(id) => id,
            Err(r) => return r,
        };
        // Held across the query: concurrent viewers wait for one answer, not ask again.
        let mut cached = self.tree.lock().await;
        if let Some((r, at, text)) = cached.as_ref()
            && *r == root
            && at.elapsed() < TREE_TTL
        {
            return Response::ok("application/json", text.clone());
        }
        match self.node.tree_snapshot(root).await {
            Ok(t) => match to_json(&t) {
                Ok(text) => {
                    *cached = Some((root, Instant::now(), text.clone()));
                    Response::ok("application/json", text)
                }
                Err(e) => e,
            },
            Err(e) => Response::error(503, &e.to_string()),
        }
    }

    async fn resolve(&self, text: &str) -> Result<NodeId, Response> {
        if text.is_empty() {
            return Ok(self.node.id());
        }
        let members = self
            .node
            .members()
            .await
            .map_err(|e| Response::error(503, &e.to_string()))?;
        let found = members
            .iter()
            .find(|m| m.id.to_hex() == text || m.id.short() == text || m.name == text);
        found
            .map(|m| m.id)
            .ok_or_else(|| Response::error(404, "no such member"))
    }

    async fn rows(&self) -> Response {
        let mut cached = self.rows.lock().await;
        if let Some((at, text)) = cached.as_ref()
            && at.elapsed() < RTT_TTL
        {
            return Response::ok("application/json", text.clone());
        }
        match rtt::gather_rows(&self.node).await {
            Ok(rows) => match to_json(&rows) {
                Ok(text) => {
                    *cached = Some((Instant::now(), text.clone()));
                    Response::ok("application/json", text)
                }
                Err(e) => e,
            },
            Err(e) => Response::error(503, &e.to_string()),
        }
    }

    /// A status now and then every [`EVENT_PERIOD`], until the node stops.
    fn events(&self) -> Response {
        let node = self.node.clone();
        let mut tick = tokio::time::interval(EVENT_PERIOD);
        // A slow client gets the next status when it is ready, not a burst of old ones.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stream = futures::stream::unfold((node, tick), |(node, mut tick)| async move {
            tick.tick().await;
            let status = node.status().await.ok()?;
            let text = serde_json::to_string(&status).ok()?;
            Some((text, (node, tick)))
        });
        Response::Events(Box::pin(stream))
    }
}

fn to_json(value: &impl serde::Serialize) -> Result<String, Response> {
    serde_json::to_string(value).map_err(|e| Response::error(500, &e.to_string()))
}
