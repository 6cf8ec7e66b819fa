//! The admin socket while the node is still joining: a daemon whose seeds are slow or not
//! up yet may wait a long time (by default forever), and an operator who asks it for its
//! status then should learn that, not that no node runs there.

use super::{MAX_ADMIN_CONNECTIONS, bind, refuse_with};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

/// Serves the admin socket of `data_dir` until the task is dropped, answering every
/// request with an error that says the node is joining through `through` and for how
/// long. The daemon runs it while it joins and then starts [`super::serve`] on the same
/// path (which replaces the socket).
pub async fn serve_while_joining(data_dir: PathBuf, through: String) -> std::io::Result<()> {
    let listener = bind(&data_dir)?;
    let since = Instant::now();
    let slots = Arc::new(Semaphore::new(MAX_ADMIN_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(super::ACCEPT_RETRY).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue; // dropped: more than the cap of clients at once
        };
        let why = format!(
            "the node is still joining the overlay (through {through}, for {} s so far): \
             ask again once it has joined",
            since.elapsed().as_secs()
        );
        tokio::spawn(async move {
            let _permit = permit;
            refuse_with(stream, why).await;
        });
    }
}
