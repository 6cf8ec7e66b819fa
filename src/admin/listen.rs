//! `overlay-node listen`: every delivery to the running node, streamed over the admin
//! socket as it arrives. Each one is a JSON line ([`AdminResponse::Delivery`]) followed by
//! exactly `bytes` payload bytes, so payloads of any size need no escaping.

use super::{AdminError, AdminRequest, AdminResponse};
use crate::api::{Lagged, Node};
use crate::net::view::Delivery;
use crate::proto::NodeId;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::path::Path;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tracing::warn;

/// What a delivery was, as `listen` reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeliveryHeader {
    /// The member that started the operation.
    pub root: NodeId,
    /// The operation's number at that root.
    pub op: u64,
    /// Broadcast, scatter item, allreduce or allgather result, barrier.
    pub kind: String,
    /// Length of the payload that follows.
    pub bytes: u64,
}

impl DeliveryHeader {
    fn of(d: &Delivery) -> Self {
        let kind = format!("{:?}", d.kind).to_lowercase();
        DeliveryHeader {
            root: d.root,
            op: d.op,
            kind,
            bytes: d.payload.len() as u64,
        }
    }
}

/// Streams deliveries to the admin client until it goes away or the node stops.
pub(super) async fn serve(node: Node, mut write: OwnedWriteHalf) -> std::io::Result<()> {
    let mut deliveries = node.deliveries();
    send(&mut write, &AdminResponse::Listening).await?;
    while let Some(d) = deliveries.next().await {
        let d = match d {
            Ok(d) => d,
            Err(Lagged(missed)) => {
                send(&mut write, &AdminResponse::Lagged(missed)).await?;
                continue;
            }
        };
        send(&mut write, &AdminResponse::Delivery(DeliveryHeader::of(&d))).await?;
        write.write_all(&d.payload).await?;
        write.flush().await?;
    }
    write.shutdown().await
}

async fn send(write: &mut OwnedWriteHalf, response: &AdminResponse) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(response).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await
}

/// Listens on the node running with `data_dir`: calls `on_ready` once the node streams,
/// then `on_delivery` with each delivery's header and payload until it returns `false`
/// or the node stops. Deliveries dropped because this listener fell behind are logged.
pub async fn listen(
    data_dir: &Path,
    on_ready: impl FnOnce(),
    on_delivery: impl FnMut(DeliveryHeader, Vec<u8>) -> bool,
) -> Result<(), AdminError> {
    let on_lagged = |missed| {
        warn!(
            missed,
            "this listener fell behind: deliveries were dropped for it"
        )
    };
    listen_with_lag(data_dir, on_ready, on_delivery, on_lagged).await
}

/// As [`listen`], calling `on_lagged` with the count of deliveries dropped because this
/// listener fell behind.
pub async fn listen_with_lag(
    data_dir: &Path,
    on_ready: impl FnOnce(),
    mut on_delivery: impl FnMut(DeliveryHeader, Vec<u8>) -> bool,
    mut on_lagged: impl FnMut(u64),
) -> Result<(), AdminError> {
    let read = super::send_request(data_dir, &AdminRequest::Listen, &[]).await?;
    let mut read = BufReader::new(read);
    let mut on_ready = Some(on_ready);
    loop {
        let mut line = String::new();
        if read.read_line(&mut line).await? == 0 {
            return Ok(()); // the node stopped
        }
        match serde_json::from_str(&line).map_err(|e| AdminError::Malformed(e.to_string()))? {
            AdminResponse::Listening => {
                if let Some(f) = on_ready.take() {
                    f();
                }
            }
            AdminResponse::Delivery(header) => {
                let mut payload = Vec::with_capacity(header.bytes.min(1 << 24) as usize);
                (&mut read)
                    .take(header.bytes)
                    .read_to_end(&mut payload)
                    .await?;
                if payload.len() as u64 != header.bytes {
                    return Err(AdminError::Malformed(format!(
                        "a delivery of {} bytes was cut short at {}",
                        header.bytes,
                        payload.len()
                    )));
                }
                if !on_delivery(header, payload) {
                    return Ok(());
                }
            }
            AdminResponse::Lagged(missed) => on_lagged(missed),
            AdminResponse::Error(e) => return Err(AdminError::Node(e)),
            other => {
                return Err(AdminError::Malformed(format!(
                    "unexpected answer while listening: {other:?}"
                )));
            }
        }
    }
}
