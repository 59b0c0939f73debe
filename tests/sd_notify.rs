//! systemd `Type=notify`: `switchyard run` with `NOTIFY_SOCKET` set tells
//! the service manager `READY=1` once it serves, `RELOADING=1` (with
//! `MONOTONIC_USEC`) then `READY=1` around a SIGHUP reload, and
//! `STOPPING=1` on SIGTERM. The manager's end is a real Unix datagram
//! socket bound here.

use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// Generous: the machine may be busy; each wait ends with the datagram.
const WAIT: Duration = Duration::from_secs(30);

/// The next notification, as text.
fn next(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no notification within {WAIT:?}: {e}"));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid}");
}

/// The gateway, killed if the test ends before it stopped.
struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        // Best effort: it has usually exited already.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn run_tells_the_service_manager_ready_reloading_and_stopping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let notify = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&notify).expect("bind the notify socket");
    manager.set_read_timeout(Some(WAIT)).expect("timeout");
    let config = dir.path().join("switchyard.toml");
    std::fs::write(
        &config,
        format!(
            "[listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\n\n\
             [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
             [[routes]]\nlistener = \"public\"\nupstream = \"daemon\"\n",
            dir.path().join("daemon.sock").display()
        ),
    )
    .expect("write config");
    let gateway = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &notify)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn switchyard");
    let mut gateway = Gateway(gateway);
    let pid = gateway.0.id();

    assert_eq!(next(&manager), "READY=1\n");

    signal(pid, "HUP");
    let reloading = next(&manager);
    let mut lines = reloading.lines();
    assert_eq!(lines.next(), Some("RELOADING=1"), "{reloading}");
    let usec = lines
        .next()
        .and_then(|l| l.strip_prefix("MONOTONIC_USEC="))
        .and_then(|v| v.parse::<u64>().ok());
    assert!(usec.is_some_and(|u| u > 0), "{reloading}");
    assert_eq!(next(&manager), "READY=1\n", "after the reload");

    signal(pid, "TERM");
    assert_eq!(next(&manager), "STOPPING=1\n");
    let status = gateway.0.wait().expect("wait for switchyard");
    assert!(status.success(), "{status}");
}
