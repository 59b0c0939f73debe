//! The gateway's life once serving: reloads applied one at a time, then
//! the shutdown sequence.

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::live::Live;
use super::{Outcome, CLOSE_SLACK};

/// Applies reloads one at a time until shutdown, then shuts down: stop
/// accepting (readiness turns `503` at once) → requests in flight finish
/// within the grace period → what is left is answered `unavailable` →
/// client connections close → upstream connections close → the
/// persistent store closes → the admin listener stops.
pub(super) async fn serve(
    mut live: Live,
    mut requests: mpsc::Receiver<oneshot::Sender<Outcome>>,
    admin: Option<JoinHandle<()>>,
    admin_stop: CancellationToken,
) {
    let shutdown = live.ctx.shutdown.clone();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            request = requests.recv() => {
                let Some(reply) = request else { break };
                let outcome = live.reload().await;
                // The asker may have given up waiting.
                let _ = reply.send(outcome);
            }
        }
    }
    drop(requests);
    shutdown.cancelled().await;
    tracing::info!("shutting down: no new connections; draining requests in flight");
    let grace = live.cfg.gateway.shutdown_grace;
    let grace_over = live.ctx.grace_over.clone();
    tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        grace_over.cancel();
    });
    live.ctx.sessions.close();
    let all_done = async {
        live.ctx.sessions.wait().await;
        live.servers.wait().await;
    };
    if tokio::time::timeout(grace + CLOSE_SLACK, all_done)
        .await
        .is_err()
    {
        tracing::warn!("some connections did not close within the grace period");
    }
    live.upstream_stop.cancel();
    live.retiring.close();
    let goodbyes =
        futures_util::future::join_all(live.upstreams.values().map(|u| u.upstream.links_closed()));
    let retired = live.retiring.wait();
    if tokio::time::timeout(CLOSE_SLACK, futures_util::future::join(goodbyes, retired))
        .await
        .is_err()
    {
        tracing::warn!("some upstream connections did not close in time");
    }
    // Nothing publishes any more (the recorder stopped with the
    // upstreams): the store's file is released before shutdown returns.
    live.hub.store().close();
    admin_stop.cancel();
    if let Some(task) = admin {
        let abort = task.abort_handle();
        if tokio::time::timeout(CLOSE_SLACK, task).await.is_err() {
            // A scraper holding a request open must not delay exit.
            abort.abort();
        }
    }
}
