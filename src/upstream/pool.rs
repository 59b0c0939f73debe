//! Pool slot supervisors: keep one connection per slot up, reconnecting
//! with exponential backoff (doubling, capped) and +0–10 % jitter. After a
//! Sideband `negotiation_failed` close the next attempt waits the maximum
//! backoff at once: the same handshake would be refused again
//! (sideband.md §10).

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::error::LinkError;
use super::link::Link;
use super::owner::OwnerRef;
use super::shared::UpstreamShared;
use super::{ndjson, process, ws};
use crate::config::UpstreamTarget;

/// How long a retired connection may wait for its late replies.
const RETIRED_LINGER: Duration = Duration::from_secs(60);

/// Spawns the supervisor of one slot and returns the slot's receiver.
pub(super) fn spawn_slot(
    slot: usize,
    shared: Arc<UpstreamShared>,
    changed: Arc<watch::Sender<u64>>,
    shutdown: CancellationToken,
) -> watch::Receiver<Option<Arc<Link>>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(supervise(slot, shared, tx, changed, shutdown));
    rx
}

async fn supervise(
    slot: usize,
    shared: Arc<UpstreamShared>,
    tx: watch::Sender<Option<Arc<Link>>>,
    changed: Arc<watch::Sender<u64>>,
    shutdown: CancellationToken,
) {
    let name = shared.cfg.name.clone();
    // The socket path or URL (credentials redacted), for the log lines.
    let endpoint = super::redact::endpoint(&shared.cfg.target).into_owned();
    let up_gauge = shared
        .metrics
        .upstream_connections
        .with_label_values(&[&name]);
    let reconnects = shared
        .metrics
        .upstream_reconnects
        .with_label_values(&[&name]);
    let mut backoff = Backoff::new(shared.cfg.backoff_initial, shared.cfg.backoff_max);
    let mut ever_connected = false;
    // Failed attempts since the last connection: only the first of a
    // streak is logged at warn, the recovery says how many there were.
    let mut failures: u64 = 0;
    while !shutdown.is_cancelled() {
        let link = tokio::select! {
            link = connect(&shared, &shutdown) => link,
            () = shutdown.cancelled() => break,
        };
        let link = match link {
            Ok(link) => link,
            Err(e) => {
                let refused = e.is_refusal();
                let delay = backoff.after(refused);
                failures += 1;
                if refused {
                    tracing::error!(upstream = %name, slot, %endpoint, error = %e, retry_in = ?delay, "upstream refused the Sideband handshake");
                } else if failures == 1 {
                    tracing::warn!(upstream = %name, slot, %endpoint, error = %e, retry_in = ?delay, "upstream connect failed; retrying with backoff");
                } else {
                    tracing::debug!(upstream = %name, slot, %endpoint, error = %e, retry_in = ?delay, "upstream connect failed");
                }
                shared.health.connect_failed(&e);
                tokio::select! {
                    () = tokio::time::sleep(delay) => continue,
                    () = shutdown.cancelled() => break,
                }
            }
        };
        if ever_connected {
            reconnects.inc();
        }
        ever_connected = true;
        backoff.reset();
        tracing::info!(upstream = %name, slot, %endpoint, failed_attempts = failures, "upstream connected");
        failures = 0;
        up_gauge.inc();
        shared.health.connected();
        // Pooled links take calls settled in place: time them out.
        tokio::spawn(link.clone().sweep());
        publish(&tx, &changed, Some(link.clone()));
        wait_until_unusable(&link, &shutdown).await;
        up_gauge.dec();
        if link.closed().is_cancelled() && !link.is_retiring() && !shutdown.is_cancelled() {
            tracing::warn!(upstream = %name, slot, %endpoint, "upstream connection lost; reconnecting");
        }
        shared.health.disconnected();
        publish(&tx, &changed, None);
        if link.is_retiring() && !link.closed().is_cancelled() {
            // Let the old connection drain its late replies, but not forever.
            let old = link.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(RETIRED_LINGER) => old.fail_all(&LinkError::Retired),
                    () = old.closed().cancelled() => {}
                }
            });
        } else if !shutdown.is_cancelled() {
            // The connection died: back off before dialing again.
            let delay = backoff.after(link.refused());
            if link.refused() {
                tracing::error!(upstream = %name, slot, %endpoint, ?delay, "upstream refused the Sideband handshake");
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutdown.cancelled() => break,
            }
        }
    }
    publish(&tx, &changed, None);
}

async fn connect(
    shared: &Arc<UpstreamShared>,
    shutdown: &CancellationToken,
) -> Result<Arc<Link>, LinkError> {
    tokio::time::timeout(
        shared.cfg.connect_timeout,
        dial(shared, None, shutdown.clone()),
    )
    .await
    .unwrap_or(Err(LinkError::Timeout))
}

/// Opens one connection to the upstream, whatever its transport.
pub(super) async fn dial(
    shared: &Arc<UpstreamShared>,
    owner: Option<OwnerRef>,
    shutdown: CancellationToken,
) -> Result<Arc<Link>, LinkError> {
    match &shared.cfg.target {
        UpstreamTarget::Unix(path) => ndjson::connect(path, shared.clone(), owner, shutdown).await,
        UpstreamTarget::Ws(url) => ws::connect(url, shared.clone(), owner, shutdown).await,
        UpstreamTarget::Process(spec) => process::spawn(spec, shared.clone(), owner, shutdown),
        // HTTP upstreams keep no links: each call is a POST (see `http`).
        UpstreamTarget::Http(_) => Err(LinkError::Connect(std::io::Error::other(
            "an HTTP upstream keeps no link",
        ))),
    }
}

async fn wait_until_unusable(link: &Link, shutdown: &CancellationToken) {
    tokio::select! {
        () = link.closed().cancelled() => {}
        () = link.retired().cancelled() => {}
        () = shutdown.cancelled() => {}
    }
}

fn publish(
    tx: &watch::Sender<Option<Arc<Link>>>,
    changed: &watch::Sender<u64>,
    link: Option<Arc<Link>>,
) {
    tx.send_replace(link);
    changed.send_modify(|n| *n = n.wrapping_add(1));
}

/// Exponential backoff with +0–10 % jitter.
#[derive(Debug)]
pub(super) struct Backoff {
    initial: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    pub(super) fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            current: initial,
        }
    }

    pub(super) fn next_delay(&mut self) -> Duration {
        let base = self.current;
        self.current = (self.current * 2).min(self.max);
        let jitter = rand::rng().random_range(0.0..0.1);
        base.mul_f64(1.0 + jitter)
    }

    /// The delay before the next attempt: the maximum (with jitter) after
    /// a refused handshake, else the next exponential step.
    fn after(&mut self, refused: bool) -> Duration {
        if refused {
            self.current = self.max;
        }
        self.next_delay()
    }

    pub(super) fn reset(&mut self) {
        self.current = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_with_bounded_jitter() {
        let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(4));
        let delays: Vec<Duration> = (0..6).map(|_| b.next_delay()).collect();
        let bases = [500, 1000, 2000, 4000, 4000, 4000];
        for (d, base) in delays.iter().zip(bases) {
            let base = Duration::from_millis(base);
            assert!(*d >= base && *d <= base.mul_f64(1.1), "{d:?} vs {base:?}");
        }
        b.reset();
        assert!(b.next_delay() < Duration::from_millis(551));
    }

    /// sideband.md §10: after `negotiation_failed`, the maximum backoff at
    /// once, and for every refusal after it.
    #[test]
    fn a_refused_handshake_waits_the_maximum_backoff() {
        let max = Duration::from_secs(30);
        let mut b = Backoff::new(Duration::from_millis(100), max);
        for _ in 0..3 {
            let d = b.after(true);
            assert!(d >= max && d <= max.mul_f64(1.1), "{d:?}");
        }
        b.reset();
        assert!(b.after(false) < Duration::from_millis(111));
    }
}
