//! Floor C: a byte relay, the cheapest possible extra process hop.
//!
//! `loadgen --relay-listen SOCK --relay-to DAEMON` runs this in its own
//! process (loadgen re-executes itself): every accepted Unix connection gets
//! a connection of its own to the daemon, and bytes are copied both ways
//! untouched. No parsing, no id rewriting, no sharing: what one more process
//! between a client and the daemon costs on this machine, with no gateway
//! work at all. The gap between floor A and floor C is the hop; the gap
//! between floor C and a gateway row is switchyard's own work.

use std::path::PathBuf;

use anyhow::Context;
use tokio::net::{UnixListener, UnixStream};

/// Serves until the process is killed.
pub(crate) async fn serve(listen: PathBuf, to: PathBuf) -> anyhow::Result<()> {
    let listener =
        UnixListener::bind(&listen).with_context(|| format!("binding {}", listen.display()))?;
    loop {
        let (mut client, _) = listener.accept().await.context("accepting")?;
        let to = to.clone();
        tokio::spawn(async move {
            // A failed connect or copy ends this pair only; the client sees
            // its connection close and reports the lost replies itself.
            if let Ok(mut daemon) = UnixStream::connect(&to).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut daemon).await;
            }
        });
    }
}
