//! A `nats-server` of the target's own: with JetStream for the persist
//! scenario's `nats` backend, NATS core alone for the scaleout scenario's
//! backbone.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use super::super::procs::ChildGuard;
use super::gateway_config::free_port;
use super::launch::until_tcp;

/// `nats-server` on a free loopback port, once it accepts; with
/// `jetstream`, `-js` and its store in `DIR/nats` (the persist scenario's
/// `nats` backend), else NATS core only (the scaleout backbone). Found as
/// the tests find it: `$SWITCHYARD_NATS_SERVER`, `PATH`, then Debian's
/// `/usr/sbin/nats-server`; `scripts/install-test-tools.sh` installs it.
pub(super) async fn nats_server(
    dir: &Path,
    jetstream: bool,
) -> anyhow::Result<(ChildGuard, String)> {
    let program = std::env::var_os("SWITCHYARD_NATS_SERVER")
        .map(PathBuf::from)
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .map(|d| d.join("nats-server")),
        )
        .chain(["/usr/sbin/nats-server", "/usr/bin/nats-server"].map(PathBuf::from))
        .find(|p| p.is_file())
        .context(
            "the nats backend and backbone need nats-server ($SWITCHYARD_NATS_SERVER, PATH, /usr/sbin): \
             run scripts/install-test-tools.sh",
        )?;
    let addr = free_port().context("picking a free port")?;
    let mut cmd = Command::new(program);
    cmd.args(["-a", "127.0.0.1", "-p"])
        .arg(addr.port().to_string());
    if jetstream {
        cmd.arg("-js").arg("-sd").arg(dir.join("nats"));
    }
    let mut nats = ChildGuard::spawn("nats-server", cmd, &dir.join("nats.log"))?;
    until_tcp(&mut nats, addr).await?;
    Ok((nats, format!("nats://{addr}")))
}
