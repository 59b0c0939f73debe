//! Turns SIGINT/SIGTERM into one future, and SIGHUP (reload) into a
//! stream of events; tells the service manager (systemd `Type=notify`)
//! when the gateway is ready, reloading or stopping ([`tell_manager`]).

/// Completes on the first SIGINT or SIGTERM.
pub async fn signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}

/// SIGHUP, the reload signal. Installed when created, so that a SIGHUP
/// arriving from then on reloads instead of ending the process.
#[derive(Debug)]
pub struct Hangups(Option<tokio::signal::unix::Signal>);

impl Hangups {
    /// Starts listening for SIGHUP (a failure is logged; then none come).
    pub fn new() -> Self {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => Hangups(Some(s)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; reload over it is off");
                Hangups(None)
            }
        }
    }

    /// Completes on the next SIGHUP.
    pub async fn recv(&mut self) {
        match &mut self.0 {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
}

impl Default for Hangups {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the gateway is in its life, as the service manager hears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// Every listener is bound and serving (`READY=1`; again after a
    /// reload, whatever its outcome).
    Ready,
    /// A reload has begun (`RELOADING=1` with `MONOTONIC_USEC`, which
    /// systemd 253 and later require).
    Reloading,
    /// Shutdown has begun (`STOPPING=1`).
    Stopping,
}

/// Tells the service manager (`$NOTIFY_SOCKET`, systemd `Type=notify`)
/// about `state`. Nothing is sent without `NOTIFY_SOCKET`; a failure is
/// logged and changes nothing else.
pub fn tell_manager(state: Lifecycle) {
    use sd_notify::NotifyState;
    let sent = match state {
        Lifecycle::Ready => sd_notify::notify(&[NotifyState::Ready]),
        Lifecycle::Reloading => NotifyState::monotonic_usec_now()
            .and_then(|now| sd_notify::notify(&[NotifyState::Reloading, now])),
        Lifecycle::Stopping => sd_notify::notify(&[NotifyState::Stopping]),
    };
    if let Err(e) = sent {
        tracing::warn!(error = %e, ?state, "cannot notify the service manager");
    }
}
