//! What the planner knows of the network: the participants' clusters and the bandwidths
//! and latencies this node measured between them, as the model's [`Network`].

use crate::api::Node;
use crate::net::driver::ApiCommand;
use crate::proto::NodeId;
use crate::proto::bulk::model::Network;
use tokio::sync::oneshot;

/// The participants' clusters (the discovered ones, or `groups` if given) and what this
/// node measured between them.
pub async fn network(node: &Node, members: &[NodeId], groups: Option<&[Vec<NodeId>]>) -> Network {
    let (tx, rx) = oneshot::channel();
    let view = match node.commands.send(ApiCommand::Bandwidth(tx)).await {
        Ok(()) => rx.await.unwrap_or_default(),
        Err(_) => Default::default(),
    };
    Network::from_view(&view, members, groups)
}
