//! A switchyard gateway as a child process (`switchyard run`), for what
//! only the operating system can witness: its memory (`/proc/<pid>/status`)
//! and a SIGKILL.
#![allow(dead_code, unreachable_pub)]

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// A child `switchyard run` whose configuration has a JSON-RPC WebSocket
/// listener at `ws://127.0.0.1:<port>/rpc`. Killed (and reaped) on drop.
pub struct Gateway {
    child: Child,
    pub url: String,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Gateway {
    /// Starts it with the configuration `toml(port)` (a free port), written
    /// to `dir/<name>.toml` and logging to `dir/<name>.log`; returns once
    /// the listener at `ws://127.0.0.1:<port>/rpc` accepts.
    pub async fn run(dir: &Path, name: &str, toml: impl FnOnce(u16) -> String) -> Gateway {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, toml(port)).expect("config");
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn switchyard");
        let mut gateway = Gateway {
            child,
            url: format!("ws://127.0.0.1:{port}/rpc"),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
        };
        gateway.until_accepting().await;
        gateway
    }

    /// A listener `public` routed to the NDJSON daemon at `socket`, with
    /// `listener_extra` TOML lines in the listener's table.
    pub async fn start(dir: &Path, socket: &Path, listener_extra: &str) -> Gateway {
        Gateway::run(dir, "child-gateway", |port| {
            format!(
                "[listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:{port}\"\n\
                 path = \"/rpc\"\n{listener_extra}\n\n\
                 [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
                 [[routes]]\nlistener = \"public\"\nupstream = \"daemon\"\n",
                socket.display()
            )
        })
        .await
    }

    async fn until_accepting(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("switchyard exited ({status}): {}", self.log());
            }
            if tokio_tungstenite::connect_async(self.url.as_str())
                .await
                .is_ok()
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "switchyard never listened: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A size line of `/proc/<pid>/status` in KiB: `VmRSS` (resident now)
    /// or `VmHWM` (the peak resident size).
    pub fn rss_kib(&self, field: &str) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/<pid>/status:\n{status}"))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (polling, up to a minute) until the gateway has exited, and
    /// reaps it.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "switchyard did not exit: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, then reaps it.
    pub fn stop(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // After `stop` this fails harmlessly (already reaped); after a
        // failed assertion it leaves no process behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
