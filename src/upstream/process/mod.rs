//! Process upstreams (`command`): a child program speaking NDJSON
//! JSON-RPC on its stdin and stdout, in place of a Unix socket.
//!
//! [`spawn`] starts one process per link: the pool supervisors call it
//! for each shared slot (a process that ends is restarted with the
//! supervisor's backoff), a client's first routed message for its own in
//! per-client mode. The child's stdout and stdin become the link's read
//! and write halves ([`super::ndjson::start`]): framing, id rewriting,
//! limits and metrics are the socket upstream's. What is particular to a
//! process lives here:
//!
//! - the cap: a permit of `max_processes` is taken before the fork and
//!   released only once the process is reaped, so live processes never
//!   exceed it; at the cap the dial fails with [`LinkError::ProcessCap`];
//! - its stderr, logged line by line (`stderr`);
//! - its end (`exit`): an exit fails the link's pending calls at once; a
//!   closed link stops the process (stdin closed, SIGTERM to its process
//!   group, SIGKILL after `stop_grace_ms`); either way it is reaped.
//!
//! Each process leads a process group of its own, so that a Ctrl-C at
//! switchyard's terminal does not reach it (switchyard stops it in
//! order) and so that a stop reaches what it started (`sh -c`, `npx`).

use std::process::Stdio;
use std::sync::Arc;

use tokio::process::Command;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::error::LinkError;
use super::link::Link;
use super::owner::OwnerRef;
use super::shared::UpstreamShared;
use crate::config::ProcessSpec;
use crate::telemetry::metrics::ExitReason;

mod exit;
mod stderr;

/// One live process's hold on the cap and on the `alive` gauge: released
/// when dropped, which is after the process is reaped.
#[derive(Debug)]
struct Alive {
    _permit: OwnedSemaphorePermit,
    shared: Arc<UpstreamShared>,
}

/// Starts the process of a new link and the tasks that read its stdout
/// and stderr, write its stdin and watch it end.
pub(super) fn spawn(
    spec: &ProcessSpec,
    shared: Arc<UpstreamShared>,
    owner: Option<OwnerRef>,
    shutdown: CancellationToken,
) -> Result<Arc<Link>, LinkError> {
    let permit = shared.processes.admit()?;
    let mut child = command(spec).spawn().map_err(LinkError::Spawn)?;
    let pid = child.id().unwrap_or_default();
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        // All three were asked for as pipes and tokio hands each out once,
        // so this does not happen; the child is killed on drop.
        return Err(LinkError::Spawn(std::io::Error::other("no stdio pipes")));
    };
    let alive = Alive::new(permit, shared.clone());
    let name = shared.cfg.name.clone();
    tracing::debug!(upstream = %name, pid, "upstream process started");
    tokio::spawn(stderr::log(stderr, name, pid));
    let link = super::ndjson::start(stdout, stdin, shared.clone(), owner, shutdown);
    // Tracked with the links' writers: shutdown and reload wait for the
    // process to be stopped and reaped.
    let grace = shared.cfg.stop_grace;
    shared
        .writers
        .spawn(exit::watch(child, link.clone(), grace, alive));
    Ok(link)
}

/// The command for `spec`: argv as given (no shell), stdio piped, killed
/// if dropped unreaped (switchyard exits before the stop completes).
fn command(spec: &ProcessSpec) -> Command {
    let (program, args) = match spec.argv.split_first() {
        Some((program, args)) => (program.as_str(), args),
        // Validation requires a program; an empty one fails to spawn.
        None => ("", &[][..]),
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(&spec.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    cmd
}

// === impl Alive ===

impl Alive {
    fn new(permit: OwnedSemaphorePermit, shared: Arc<UpstreamShared>) -> Self {
        shared.processes.started();
        Alive {
            _permit: permit,
            shared,
        }
    }

    /// The process was reaped, having ended for `reason`.
    fn reaped(self, reason: ExitReason) {
        self.shared.processes.ended(reason);
    }
}
