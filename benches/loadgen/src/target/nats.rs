//! The persist scenario's `nats` backend: a `nats-server -js` of the
//! target's own.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use super::super::procs::ChildGuard;
use super::gateway_config::free_port;
use super::launch::until_tcp;

/// `nats-server -js` on a free loopback port with its store in
/// `DIR/nats`, once it accepts (the persist scenario's `nats` backend).
/// Found as the tests find it: `$SWITCHYARD_NATS_SERVER`, `PATH`, then
/// Debian's `/usr/sbin/nats-server`; `scripts/install-test-tools.sh`
/// installs it.
pub(super) async fn nats_server(dir: &Path) -> anyhow::Result<(ChildGuard, String)> {
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
            "the nats backend needs nats-server ($SWITCHYARD_NATS_SERVER, PATH, /usr/sbin): \
             run scripts/install-test-tools.sh",
        )?;
    let addr = free_port().context("picking a free port")?;
    let mut cmd = Command::new(program);
    cmd.args(["-js", "-a", "127.0.0.1", "-p"])
        .arg(addr.port().to_string())
        .arg("-sd")
        .arg(dir.join("nats"));
    let mut nats = ChildGuard::spawn("nats-server", cmd, &dir.join("nats.log"))?;
    until_tcp(&mut nats, addr).await?;
    Ok((nats, format!("nats://{addr}")))
}
