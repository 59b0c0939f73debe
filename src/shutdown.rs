//! Turns SIGINT/SIGTERM into one future, and SIGHUP (reload) into a
//! stream of events.

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
