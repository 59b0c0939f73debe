//! A real `nats-server -js` for the JetStream tests: on a random loopback
//! port (`-p -1`), its store in a temp dir, killed on drop. The port is
//! read from the ports file the server writes once it listens
//! (`--ports_file_dir`), so the helper waits on the server, never on a
//! sleep. A missing `nats-server` fails the test with what to do, never
//! skips it.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to listen (a failure guard, not a pause).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `nats-server` with JetStream on 127.0.0.1.
pub struct NatsServer {
    child: Option<Child>,
    /// The server's store and its ports file; removed on drop.
    pub dir: tempfile::TempDir,
    /// `nats://127.0.0.1:PORT`.
    pub url: String,
    /// Extra command-line arguments (kept for a restart).
    extra: Vec<String>,
}

/// `$SWITCHYARD_NATS_SERVER`, else `nats-server` on PATH, else Debian's
/// `/usr/sbin/nats-server` (not on a normal user's PATH).
pub fn require_nats_server() -> PathBuf {
    let candidates: Vec<PathBuf> = std::env::var_os("SWITCHYARD_NATS_SERVER")
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
        .collect();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "this test needs a real nats-server with JetStream and found none \
                 ($SWITCHYARD_NATS_SERVER, PATH, /usr/sbin). Run \
                 scripts/install-test-tools.sh (it runs `apt-get install -y nats-server` \
                 on Debian), or point SWITCHYARD_NATS_SERVER at a nats-server binary."
            )
        })
}

impl NatsServer {
    /// Starts the server and returns once it accepts connections.
    pub fn start() -> NatsServer {
        NatsServer::start_with(&[])
    }

    /// [`NatsServer::start`] with extra arguments (`--user`, `--pass` …).
    pub fn start_with(extra: &[&str]) -> NatsServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let extra: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
        let (child, url) = spawn(&dir, "-1", &extra);
        NatsServer {
            child: Some(child),
            dir,
            url,
            extra,
        }
    }

    /// Stops the server (SIGKILL), keeping its store.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port with the same store.
    pub fn restart(&mut self) {
        self.stop();
        let port = self.url.rsplit(':').next().expect("a port").to_owned();
        let (child, url) = spawn(&self.dir, &port, &self.extra);
        assert_eq!(url, self.url);
        self.child = Some(child);
    }

    /// `http://127.0.0.1:PORT` of the server's monitoring endpoint
    /// (`/connz`, `/subsz`), on a random port of its own.
    pub fn monitor_url(&self) -> String {
        let ports = self.dir.path().join("ports");
        for entry in std::fs::read_dir(&ports).expect("ports dir") {
            let text = std::fs::read_to_string(entry.expect("entry").path()).unwrap_or_default();
            let ports: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            if let Some(url) = ports["monitoring"][0].as_str() {
                return url.to_owned();
            }
        }
        panic!("no monitoring URL in {}", ports.display())
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nats.log")).unwrap_or_default()
    }
}

/// Starts `nats-server` on `port` (`-1`: a random one) with its store in
/// `dir`; returns once it accepts connections.
fn spawn(dir: &tempfile::TempDir, port: &str, extra: &[String]) -> (Child, String) {
    let program = require_nats_server();
    let store = dir.path().join("store");
    let ports = dir.path().join("ports");
    let _ = std::fs::remove_dir_all(&ports);
    std::fs::create_dir_all(&ports).expect("ports dir");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("nats.log"))
        .expect("log file");
    let mut child = Command::new(&program)
        .args(["-js", "-a", "127.0.0.1", "-p", port, "-m", "-1", "-sd"])
        .arg(&store)
        .arg("--ports_file_dir")
        .arg(&ports)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
    let url = match wait_ports_file(&mut child, &ports) {
        Ok(url) => url,
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(dir.path().join("nats.log")).unwrap_or_default();
            panic!("nats-server did not start: {why}\n{log}");
        }
    };
    (child, url)
}

/// Waits for `<dir>/nats-server_<pid>.ports` to hold a client URL, and for
/// that port to accept a TCP connection. The file is written after the
/// server listens; it is polled because a file has no readiness event.
fn wait_ports_file(child: &mut Child, dir: &std::path::Path) -> Result<String, String> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("exited with {status}"));
        }
        if let Some(url) = read_client_url(dir) {
            let addr = url.trim_start_matches("nats://");
            if std::net::TcpStream::connect(addr).is_ok() {
                return Ok(url);
            }
        }
        if start.elapsed() > START_TIMEOUT {
            return Err(format!(
                "no ports file in {} after {START_TIMEOUT:?}",
                dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_client_url(dir: &std::path::Path) -> Option<String> {
    for entry in std::fs::read_dir(dir).ok()? {
        let text = std::fs::read_to_string(entry.ok()?.path()).ok()?;
        let ports: serde_json::Value = serde_json::from_str(&text).ok()?;
        if let Some(url) = ports["nats"][0].as_str() {
            return Some(url.to_owned());
        }
    }
    None
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
