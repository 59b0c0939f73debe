//! What an operator reads at the default `info` level: the binary runs as a
//! child with stderr captured (a pipe, so no colour), and the lines that
//! tell what happened must be there: every bound address, refused
//! upgrades, requests answered `unavailable` or `timeout`, and the upstream
//! failing to connect, coming back and being lost (naming its socket).

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{connect, json, recv, send};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// Generous: the machine may be busy.
const WAIT: Duration = Duration::from_secs(30);

/// Lines a child wrote to stderr so far, collected by a reader thread.
#[derive(Clone, Default)]
struct Lines(Arc<(Mutex<Vec<String>>, Condvar)>);

impl Lines {
    fn collect(child: &mut Child) -> Lines {
        let lines = Lines::default();
        let stderr = child.stderr.take().expect("stderr piped");
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).split(b'\n') {
                let Ok(line) = line else { break };
                let (all, cv) = &*sink.0;
                all.lock()
                    .expect("lock")
                    .push(String::from_utf8_lossy(&line).into_owned());
                cv.notify_all();
            }
        });
        lines
    }

    /// The first line containing every one of `needles`.
    fn wait_for(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + WAIT;
        let (all, cv) = &*self.0;
        let mut seen = all.lock().expect("lock");
        loop {
            if let Some(line) = seen.iter().find(|l| needles.iter().all(|n| l.contains(n))) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no log line with {needles:?}; stderr so far:\n{}",
                seen.join("\n")
            );
            seen = cv.wait_timeout(seen, left).expect("lock").0;
        }
    }

    fn all(&self) -> String {
        self.0 .0.lock().expect("lock").join("\n")
    }
}

fn spawn(args: &[&str], config: Option<&Path>) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    if let Some(path) = config {
        cmd.arg("--config").arg(path);
    }
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn switchyard")
}

fn stop(child: &mut Child) {
    // Best effort: the child may have exited already.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A raw upgrade request from a foreign page; the HTTP status it gets.
fn upgrade_from(addr: &str, origin: &str) -> String {
    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(WAIT)).expect("timeout");
    let request = format!(
        "GET /rpc HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Origin: {origin}\r\n\r\n"
    );
    std::io::Write::write_all(&mut tcp, request.as_bytes()).expect("write");
    // Only the status line: the server may keep the connection open.
    let mut status = String::new();
    BufReader::new(tcp)
        .read_line(&mut status)
        .expect("status line");
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_addresses_refusals_failures_and_upstream_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon_socket = dir.path().join("daemon.sock");
    let local_socket = dir.path().join("local.sock");
    let config = dir.path().join("switchyard.toml");
    std::fs::write(
        &config,
        format!(
            "[listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\n\
             request_timeout_ms = 500\n\n\
             [listeners.local]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
             [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\npool_size = 1\n\
             connect_timeout_ms = 200\nbackoff_initial_ms = 50\nbackoff_max_ms = 200\n\n\
             [[routes]]\nlistener = \"public\"\nupstream = \"daemon\"\n\
             [[routes]]\nlistener = \"local\"\nupstream = \"daemon\"\n",
            local_socket.display(),
            daemon_socket.display()
        ),
    )
    .expect("write config");
    let mut gateway = spawn(&["run"], Some(&config));
    let logs = Lines::collect(&mut gateway);

    // Every listener is named with the address it really bound.
    let public = logs.wait_for(&["listening", "public", "ws://127.0.0.1:"]);
    let url = public
        .split_whitespace()
        .find_map(|w| {
            let start = w.find("ws://")?;
            Some(w[start..].trim_matches(|c| c == '"' || c == ','))
        })
        .expect("the line names the URL")
        .to_owned();
    logs.wait_for(&["listening", "local", &local_socket.display().to_string()]);

    // The upstream is not there yet: the line names the socket it tried.
    let daemon_path = daemon_socket.display().to_string();
    logs.wait_for(&["upstream connect failed", "daemon", &daemon_path]);

    // A request now is answered `unavailable`, and the operator hears of it.
    let mut ws = connect(&url).await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#,
    )
    .await;
    let reply = json(&recv(&mut ws).await);
    assert!(reply["error"].is_object(), "{reply}");
    logs.wait_for(&["public", "daemon", "unavailable"]);

    // A page from elsewhere is refused before the upgrade, and logged.
    let addr = url
        .trim_start_matches("ws://")
        .trim_end_matches("/rpc")
        .to_owned();
    let status = upgrade_from(&addr, "http://evil.example");
    assert!(status.contains("403"), "{status}");
    logs.wait_for(&["upgrade refused", "public", "origin", "127.0.0.1"]);

    // The upstream comes up, then answers too slowly, then goes away.
    let mut daemon = spawn(
        &["daemon", "--socket", &daemon_socket.display().to_string()],
        None,
    );
    logs.wait_for(&["upstream connected", "daemon"]);
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"sleep","params":{"ms":3000},"id":2}"#,
    )
    .await;
    let reply = json(&recv(&mut ws).await);
    assert!(reply["error"].is_object(), "{reply}");
    logs.wait_for(&["public", "daemon", "timeout"]);
    stop(&mut daemon);
    logs.wait_for(&["upstream connection lost", "daemon", &daemon_path]);

    stop(&mut gateway);
    let all = logs.all();
    assert!(!all.contains('\u{1b}'), "colour codes in a pipe:\n{all}");
    assert!(!all.contains("panicked"), "{all}");
}
