//! Readiness and locality: waiting until a node is part of the overlay for real, and
//! asking who is near it.

use super::{ClusterLevel, MemberInfo, Node, NodeError, NodeStatus};
use crate::proto::Liveness;
use std::time::{Duration, Instant};

/// How often [`Node::ready`] looks at the node's state.
const POLL: Duration = Duration::from_millis(100);

/// Why a node is not ready yet: what [`Node::ready_within`] reports when time runs out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// Alive members whose tree this node has not heard of yet.
    TreesUnknown(usize),
    /// Trees in which this node has no path to the root yet.
    TreesWithoutParent(usize),
    /// Tree neighbours (parents and children) whose RTT from this node is not measured
    /// yet.
    NeighboursUnmeasured(usize),
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReady::TreesUnknown(n) => write!(f, "the trees of {n} members are not known yet"),
            NotReady::TreesWithoutParent(n) => {
                write!(f, "{n} trees have no path to their root yet")
            }
            NotReady::NeighboursUnmeasured(n) => {
                write!(f, "the RTT to {n} tree neighbours is not measured yet")
            }
        }
    }
}

/// Whether `status` shows a ready node (see [`Node::ready`]), or why not.
pub fn readiness(status: &NodeStatus) -> Result<(), NotReady> {
    let alive: Vec<&MemberInfo> = status
        .members
        .iter()
        .filter(|m| m.state == Liveness::Alive)
        .collect();
    let unknown = alive
        .iter()
        .filter(|m| !status.trees.iter().any(|t| t.root == m.id))
        .count();
    if unknown > 0 {
        return Err(NotReady::TreesUnknown(unknown));
    }
    let pathless = status
        .trees
        .iter()
        .filter(|t| t.root != status.id && !t.connected)
        .count();
    if pathless > 0 {
        return Err(NotReady::TreesWithoutParent(pathless));
    }
    let mut neighbours: Vec<_> = status
        .trees
        .iter()
        .flat_map(|t| t.parent.into_iter().chain(t.children.iter().copied()))
        .collect();
    neighbours.sort();
    neighbours.dedup();
    let unmeasured = neighbours
        .iter()
        .filter(|p| {
            status
                .members
                .iter()
                .find(|m| m.id == **p)
                .is_none_or(|m| m.rtt_ms.is_none())
        })
        .count();
    if unmeasured > 0 {
        return Err(NotReady::NeighboursUnmeasured(unmeasured));
    }
    Ok(())
}

impl Node {
    /// Waits until the node is ready: it knows the tree of every member alive, has a path
    /// to the root of each (or is the root), and has measured the RTT to each of its tree
    /// neighbours (parents and children). A node that joined is ready once the overlay has taken it in: collectives it
    /// starts then reach every member it knows. Waits for ever; see
    /// [`ready_within`](Self::ready_within) for a bound.
    ///
    /// ```no_run
    /// # async fn f(node: overlay::Node) -> Result<(), overlay::NodeError> {
    /// node.ready().await?;
    /// node.broadcast_value(&"everyone is listening").await?;
    /// # Ok(()) }
    /// ```
    pub async fn ready(&self) -> Result<(), NodeError> {
        loop {
            if readiness(&self.status().await?).is_ok() {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// [`ready`](Self::ready), giving up after `timeout` with
    /// [`NodeError::NotReady`] saying what was still missing.
    pub async fn ready_within(&self, timeout: Duration) -> Result<(), NodeError> {
        let deadline = Instant::now() + timeout;
        loop {
            let reason = match readiness(&self.status().await?) {
                Ok(()) => return Ok(()),
                Err(reason) => reason,
            };
            if Instant::now() >= deadline {
                return Err(NodeError::NotReady {
                    waited: timeout,
                    reason,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The `n` alive members nearest to this node by measured RTT, nearest first (members
    /// whose RTT is not measured yet are left out, and so is this node).
    ///
    /// ```no_run
    /// # async fn f(node: overlay::Node) -> Result<(), overlay::NodeError> {
    /// for peer in node.nearest(3).await? {
    ///     println!("{} at {:.2} ms", peer.name, peer.rtt_ms.unwrap_or_default());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn nearest(&self, n: usize) -> Result<Vec<MemberInfo>, NodeError> {
        // The driver's own view: the shared member view lags RTTs by up to a second.
        let mut near: Vec<MemberInfo> = self
            .status()
            .await?
            .members
            .into_iter()
            .filter(|m| m.id != self.id && m.state == Liveness::Alive && m.rtt_ms.is_some())
            .collect();
        near.sort_by(|a, b| {
            let rtt = |m: &MemberInfo| m.rtt_ms.unwrap_or(f64::INFINITY);
            rtt(a).total_cmp(&rtt(b)).then(a.id.cmp(&b.id))
        });
        near.truncate(n);
        Ok(near)
    }

    /// The groups this node discovered from measured latencies, level by level (level 1:
    /// clusters; above: sites and wider groups), empty until its first summaries are in.
    pub async fn clusters(&self) -> Result<Vec<ClusterLevel>, NodeError> {
        Ok(self.status().await?.clusters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::TreeInfo;
    use crate::proto::NodeId;

    fn member(i: u8, rtt: Option<f64>) -> MemberInfo {
        MemberInfo {
            id: NodeId([i; 16]),
            name: format!("n{i}"),
            addr: "127.0.0.1:1".parse().unwrap(),
            state: Liveness::Alive,
            rtt_ms: rtt,
            groups: Vec::new(),
        }
    }

    fn tree(root: u8, parent: Option<u8>, connected: bool) -> TreeInfo {
        TreeInfo {
            root: NodeId([root; 16]),
            parent: parent.map(|p| NodeId([p; 16])),
            children: Vec::new(),
            dist_ms: 0.0,
            serial: 1,
            connected,
        }
    }

    fn status(members: Vec<MemberInfo>, trees: Vec<TreeInfo>) -> NodeStatus {
        let mut s: NodeStatus = serde_json::from_value(serde_json::json!({
            "id": NodeId([1; 16]).to_hex(), "name": "n1", "addr": "127.0.0.1:1",
            "members": [], "trees": [], "connections": 0, "frames_in": 0, "frames_out": 0,
            "bytes_in": 0, "bytes_out": 0, "frames_rejected": 0, "protocol_errors": 0,
            "auth_failures": 0, "packets_dropped": 0, "uptime_ms": 0,
        }))
        .expect("a minimal status");
        s.members = members;
        s.trees = trees;
        s
    }

    #[test]
    fn ready_needs_every_tree_a_path_and_measured_neighbours() {
        let me = member(1, None);
        let unknown = status(
            vec![me.clone(), member(2, Some(1.0))],
            vec![tree(1, None, true)],
        );
        assert_eq!(readiness(&unknown), Err(NotReady::TreesUnknown(1)));
        let pathless = status(
            vec![me.clone(), member(2, Some(1.0))],
            vec![tree(1, None, true), tree(2, None, false)],
        );
        assert_eq!(readiness(&pathless), Err(NotReady::TreesWithoutParent(1)));
        let unmeasured = status(
            vec![me.clone(), member(2, None)],
            vec![tree(1, None, true), tree(2, Some(2), true)],
        );
        assert_eq!(
            readiness(&unmeasured),
            Err(NotReady::NeighboursUnmeasured(1))
        );
        let ready = status(
            vec![me, member(2, Some(0.4))],
            vec![tree(1, None, true), tree(2, Some(2), true)],
        );
        assert_eq!(readiness(&ready), Ok(()));
    }
}
