//! Streaming feeds: a streaming method (hld's `Subscribe`) that switchyard
//! opens itself, **once**, while at least one client subscribes to a
//! pattern matching the feed's topic, and whose events it publishes to the
//! broker under that topic. N browser tabs watching the daemon's events are
//! one upstream stream.
//!
//! The stream is opened when the first matching subscription appears,
//! closed when the last one goes, and reopened with the upstream's backoff
//! (`backoff_initial_ms` doubling to `backoff_max_ms`) if the upstream ends
//! it or refuses it while subscribers remain. Events read while the stream
//! is open are published in order from this one task. A feed whose topic
//! is persistent (`[[persistent_topics]]`) is open all the time, so that
//! its events are stored whether or not anyone is connected; when the
//! store falls behind, this task waits for it before it reads the next
//! line, so the upstream is slowed (through its socket), and the feed's
//! pub/sub subscribers with it, rather than events lost.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::pool::Backoff;
use super::shared::UpstreamShared;
use super::stream::{self, Events, StreamRelay};
use crate::config::Feed;
use crate::envelope::{raw_from_string, Payload};

/// Runs `feed` until `shutdown`. A feed of a persistent topic is wanted
/// always: its events are stored for subscriptions not connected now.
pub(super) async fn run(shared: Arc<UpstreamShared>, feed: Feed, shutdown: CancellationToken) {
    // The sender of an always-true watch is kept here: dropped, the watch
    // would read as "nobody listens".
    let (_always, mut interest) = if shared.is_persistent(&feed.topic) {
        let (tx, rx) = watch::channel(true);
        (Some(tx), rx)
    } else {
        (None, shared.broker.watch_interest(&feed.topic))
    };
    let params = feed
        .params
        .as_ref()
        .map(|p| Payload::Json(raw_from_string(p.clone())));
    let mut backoff = Backoff::new(shared.cfg.backoff_initial, shared.cfg.backoff_max);
    loop {
        if !wanted(&mut interest, &shutdown).await {
            return;
        }
        let relay = StreamRelay {
            shared: shared.clone(),
            events: Events::Feed {
                topic: feed.topic.clone(),
            },
            backlog: Default::default(),
        };
        let ended = match stream::connect(&shared, &feed.method, params.as_ref()).await {
            Ok((_, Some(open))) => {
                tracing::info!(upstream = %shared.cfg.name, topic = %feed.topic, "feed opened");
                // It opened: if the upstream ends it later, reopen after the
                // initial delay, not after a delay grown by earlier failures
                // (as the pool does after a successful connect).
                backoff.reset();
                shared
                    .metrics
                    .events
                    .feeds_open
                    .with_label_values(&[&shared.cfg.name])
                    .inc();
                // Closed when nobody wants it any more (or on shutdown).
                let unwanted = CancellationToken::new();
                let reason = tokio::select! {
                    reason = open.relay(&relay, &unwanted) => reason,
                    () = unwatched(&mut interest) => None,
                    () = shutdown.cancelled() => None,
                };
                shared
                    .metrics
                    .events
                    .feeds_open
                    .with_label_values(&[&shared.cfg.name])
                    .dec();
                // An event read but not yet taken by the store's queue is
                // still stored (this waits for the store, or its stop).
                shared.hand_off(&relay.backlog).await;
                match reason {
                    Some(reason) => {
                        tracing::warn!(upstream = %shared.cfg.name, topic = %feed.topic, reason, "feed ended by the upstream");
                        true
                    }
                    None => {
                        tracing::info!(upstream = %shared.cfg.name, topic = %feed.topic, "feed closed");
                        false
                    }
                }
            }
            Ok((reply, None)) => {
                tracing::warn!(upstream = %shared.cfg.name, topic = %feed.topic, reply = ?reply, "feed refused by the upstream");
                true
            }
            Err(e) => {
                let endpoint = super::redact::endpoint(&shared.cfg.target);
                tracing::warn!(upstream = %shared.cfg.name, %endpoint, topic = %feed.topic, error = %e, "feed could not be opened");
                true
            }
        };
        if ended {
            let delay = backoff.next_delay();
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutdown.cancelled() => return,
            }
        }
    }
}

/// Waits until someone subscribes; false on shutdown.
async fn wanted(interest: &mut watch::Receiver<bool>, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        seen = interest.wait_for(|wanted| *wanted) => seen.is_ok(),
        () = shutdown.cancelled() => false,
    }
}

/// Resolves when nobody subscribes any more (or the broker is gone).
async fn unwatched(interest: &mut watch::Receiver<bool>) {
    // An error means the broker is gone: nobody is left either.
    let _ = interest.wait_for(|wanted| !*wanted).await;
}
