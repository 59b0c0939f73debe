//! How an upstream process ends, and that it is always reaped.
//!
//! [`watch`] waits for whichever comes first: the process exits (its
//! link's pending calls fail at once with `unavailable`, "upstream
//! process exited"; the link closes, so the pool restarts it with backoff,
//! or its per-client owner is closed), or the link closes (the client
//! left, a reload or shutdown, an oversize line): the process is stopped,
//! its stdin already closed by the link's writer, with SIGTERM to its
//! process group and SIGKILL after `stop_grace_ms`. Either way the status
//! is collected (no zombie) before the cap's permit is released.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use rustix::process::{kill_process, kill_process_group, Pid, Signal};
use tokio::process::Child;

use super::super::error::LinkError;
use super::super::link::Link;
use super::Alive;
use crate::telemetry::metrics::ExitReason;

/// Waits for the process or its link to end, then reaps it (see the
/// module docs) and counts how it ended.
pub(super) async fn watch(mut child: Child, link: Arc<Link>, grace: Duration, alive: Alive) {
    let name = link.shared.cfg.name.clone();
    let pid = child.id().unwrap_or_default();
    let exited = tokio::select! {
        status = child.wait() => Some(status),
        () = link.closed().cancelled() => None,
    };
    let reason = match exited {
        Some(Ok(status)) => {
            tracing::warn!(upstream = %name, pid, %status, "upstream process exited");
            link.fail_all(&LinkError::Exited { status });
            // What it started may live on in its group (holding the pipes
            // open): it goes too. The group keeps its id while it has
            // members, so this reaches no one else.
            signal(pid, Signal::TERM);
            on_its_own(status)
        }
        // Waiting failed (it cannot for a child of ours): stop it anyway.
        Some(Err(e)) => {
            tracing::warn!(upstream = %name, pid, error = %e, "cannot wait for upstream process");
            link.fail_all(&LinkError::Lost);
            stop(&mut child, grace, &name).await
        }
        None => stop(&mut child, grace, &name).await,
    };
    tracing::debug!(upstream = %name, pid, reason = reason.as_str(), "upstream process reaped");
    alive.reaped(reason);
}

/// Stops a process whose link closed: it may be exiting already (its
/// stdout closed as it died), else SIGTERM, then SIGKILL after `grace`.
async fn stop(child: &mut Child, grace: Duration, name: &str) -> ExitReason {
    let pid = child.id().unwrap_or_default();
    if let Ok(Some(status)) = child.try_wait() {
        let reason = stopped(status);
        if reason != ExitReason::Stopped {
            tracing::warn!(upstream = %name, pid, %status, "upstream process exited");
        }
        return reason;
    }
    signal(pid, Signal::TERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(status)) => {
            let reason = stopped(status);
            if reason != ExitReason::Stopped {
                // It was ending on its own as its link closed (a crash).
                tracing::warn!(upstream = %name, pid, %status, "upstream process exited");
            }
            reason
        }
        Ok(Err(_)) | Err(_) => {
            tracing::warn!(upstream = %name, pid, ?grace, "upstream process ignored SIGTERM; sending SIGKILL");
            signal(pid, Signal::KILL);
            // The group may be gone while the child itself is not (it
            // left the group): the child for sure.
            // An error means it is already gone: wait() collects it.
            let _ = child.start_kill();
            match child.wait().await {
                Ok(status) if status.signal() == Some(Signal::KILL.as_raw()) => ExitReason::Killed,
                Ok(status) => stopped(status),
                Err(_) => ExitReason::Killed,
            }
        }
    }
}

/// How a process that ended on its own ended.
fn on_its_own(status: ExitStatus) -> ExitReason {
    match (status.code(), status.signal()) {
        (Some(0), _) => ExitReason::Exited,
        (Some(_), _) => ExitReason::Failed,
        (None, _) => ExitReason::Crashed,
    }
}

/// How a process whose link closed first ended: status 0 or our signal is
/// an orderly stop (whether it saw its stdin close or our SIGTERM, or
/// closed its stdout as it exited); a non-zero status is still its own
/// failure, another signal a crash.
fn stopped(status: ExitStatus) -> ExitReason {
    match (status.code(), status.signal()) {
        (Some(0), _) => ExitReason::Stopped,
        (Some(_), _) => ExitReason::Failed,
        (None, Some(sig)) if sig == Signal::TERM.as_raw() => ExitReason::Stopped,
        (None, Some(sig)) if sig == Signal::KILL.as_raw() => ExitReason::Killed,
        (None, _) => ExitReason::Crashed,
    }
}

/// Sends `sig` to the process group `pid` leads (see the module docs of
/// `process`), or to the process alone if there is no such group.
fn signal(pid: u32, sig: Signal) {
    // Never 0 or 1: kill(0) and kill(-1) reach far more than one child.
    let Some(pid) = i32::try_from(pid)
        .ok()
        .filter(|p| *p > 1)
        .and_then(Pid::from_raw)
    else {
        return;
    };
    if kill_process_group(pid, sig).is_err() {
        // Gone already (reaped is impossible: we hold the status); a
        // failure here means there is nothing left to signal.
        let _ = kill_process(pid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait status as the kernel reports it: exit code `<< 8`, or the
    /// signal number.
    fn code(c: i32) -> ExitStatus {
        ExitStatus::from_raw(c << 8)
    }

    fn killed_by(sig: Signal) -> ExitStatus {
        ExitStatus::from_raw(sig.as_raw())
    }

    #[test]
    fn an_exit_of_its_own_is_exited_failed_or_crashed() {
        assert_eq!(on_its_own(code(0)), ExitReason::Exited);
        assert_eq!(on_its_own(code(3)), ExitReason::Failed);
        assert_eq!(on_its_own(killed_by(Signal::SEGV)), ExitReason::Crashed);
        assert_eq!(on_its_own(killed_by(Signal::KILL)), ExitReason::Crashed);
    }

    #[test]
    fn after_a_stop_our_signals_and_status_0_are_orderly() {
        assert_eq!(stopped(code(0)), ExitReason::Stopped);
        assert_eq!(stopped(killed_by(Signal::TERM)), ExitReason::Stopped);
        assert_eq!(stopped(killed_by(Signal::KILL)), ExitReason::Killed);
        assert_eq!(stopped(code(1)), ExitReason::Failed);
        assert_eq!(stopped(killed_by(Signal::SEGV)), ExitReason::Crashed);
    }
}
