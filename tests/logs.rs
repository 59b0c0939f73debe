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

use common::{connect, connect_tiny_window, expect_close, json, recv, send};
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

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

/// The URL a `listening` line (text format) names for `listener`.
fn url_of(logs: &Lines, listener: &str) -> String {
    let line = logs.wait_for(&["listening", &format!("listener={listener} "), "ws://"]);
    line.split_whitespace()
        .find_map(|w| {
            let start = w.find("ws://")?;
            Some(w[start..].trim_matches(|c| c == '"' || c == ','))
        })
        .expect("the line names the URL")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_every_refusal_and_close_switchyard_decides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("switchyard.toml");
    // Three listeners on one port (each its own path), no upstream: what
    // is logged here is decided before any routing.
    std::fs::write(
        &config,
        "[listeners.guarded]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/guarded\"\n\
         deny_methods = [\"secret*\"]\nrate_per_second = 1\nrate_burst = 1\nabuse_threshold = 3\n\
         max_message_bytes = 1024\n\n\
         [listeners.echo]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/echo\"\necho = true\n\
         outbox_capacity = 4\nslow_consumer_timeout_ms = 300\nmax_message_bytes = 300000\n\n\
         [listeners.capped]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/capped\"\n\
         max_connections = 1\n\n\
         [listeners.named]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/named\"\n\
         deny_methods = [\"secret*\"]\n\
         [[listeners.named.clients]]\nname = \"ops\"\ntoken = \"ops-log-token\"\n",
    )
    .expect("write config");
    let mut gateway = spawn(&["run"], Some(&config));
    let logs = Lines::collect(&mut gateway);
    let (guarded, echo, capped) = (
        url_of(&logs, "guarded"),
        url_of(&logs, "echo"),
        url_of(&logs, "capped"),
    );

    // The method policy refuses a request (-32001): logged with the peer.
    let mut ws = connect(&guarded).await;
    send(&mut ws, r#"{"jsonrpc":"2.0","method":"secret.get","id":1}"#).await;
    let reply = json(&recv(&mut ws).await);
    assert_eq!(reply["error"]["code"], -32001, "{reply}");
    logs.wait_for(&[
        "request refused",
        "listener=guarded",
        "peer=127.0.0.1",
        "forbidden by policy",
    ]);
    // A named client's refusal names it (never its token).
    let named = url_of(&logs, "named");
    let mut ops = connect(&format!("{named}?token=ops-log-token")).await;
    send(
        &mut ops,
        r#"{"jsonrpc":"2.0","method":"secret.get","id":1}"#,
    )
    .await;
    let reply = json(&recv(&mut ops).await);
    assert_eq!(reply["error"]["code"], -32001, "{reply}");
    logs.wait_for(&["request refused", "listener=named", "client=\"ops\""]);

    // Over the rate: refused requests, then the abuser is closed (1008).
    for id in 2..12 {
        let request = format!(r#"{{"jsonrpc":"2.0","method":"echo","id":{id}}}"#);
        // The gateway may close while we are still sending.
        if ws.send(Message::Text(request.into())).await.is_err() {
            break;
        }
    }
    let (code, _) = expect_close(&mut ws).await;
    assert_eq!(code, 1008);
    logs.wait_for(&[
        "request refused",
        "listener=guarded",
        "rate limited: connection",
    ]);
    logs.wait_for(&[
        "connection closed by switchyard",
        "listener=guarded",
        "peer=127.0.0.1",
        "code=1008",
        "rate limit exceeded",
    ]);

    // A message over max_message_bytes: closed 1009.
    let mut ws = connect(&guarded).await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":["{}"],"id":1}}"#,
        "x".repeat(2000)
    );
    send(&mut ws, &big).await;
    let (code, _) = expect_close(&mut ws).await;
    assert_eq!(code, 1009);
    logs.wait_for(&[
        "connection closed by switchyard",
        "listener=guarded",
        "code=1009",
        "message too large",
    ]);

    // A client that never reads what the echo listener sends back: closed
    // as a slow consumer once its outbox stayed full for 300 ms.
    let mut slow = connect_tiny_window(&echo).await;
    let pad = "x".repeat(256 * 1024);
    for _ in 0..64 {
        if slow.send(Message::Text(pad.clone().into())).await.is_err() {
            break;
        }
    }
    logs.wait_for(&[
        "connection closed by switchyard",
        "listener=echo",
        "peer=127.0.0.1",
        "code=1008",
        "slow consumer",
    ]);
    drop(slow);

    // Over max_connections: the second client is closed 1008.
    let _first = connect(&capped).await;
    let mut second = connect(&capped).await;
    let (code, _) = expect_close(&mut second).await;
    assert_eq!(code, 1008);
    logs.wait_for(&[
        "connection closed by switchyard",
        "listener=capped",
        "max connections exceeded",
    ]);

    stop(&mut gateway);
    assert!(!logs.all().contains("panicked"), "{}", logs.all());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_flat_and_a_moved_listener_is_logged_at_its_new_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("switchyard.toml");
    let toml = |ip: &str| {
        format!(
            "[log]\nformat = \"json\"\n\n[admin]\naddress = \"127.0.0.1:0\"\n\n\
             [listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"{ip}:0\"\npath = \"/rpc\"\n"
        )
    };
    std::fs::write(&config, toml("127.0.0.1")).expect("write config");
    let mut gateway = spawn(&["run"], Some(&config));
    let logs = Lines::collect(&mut gateway);

    // Fields sit beside `message`, not under `fields`; one name for
    // addresses.
    let parse = |line: &str| -> serde_json::Value {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    };
    let line = parse(&logs.wait_for(&["\"listening\"", "public"]));
    assert_eq!(line["message"], "listening", "{line}");
    assert_eq!(line["listener"], "public", "{line}");
    assert!(line.get("fields").is_none(), "{line}");
    let address = line["address"].as_str().expect("an address field");
    assert!(address.starts_with("ws://127.0.0.1:"), "{line}");
    let admin = parse(&logs.wait_for(&["admin listener serving"]));
    let admin_address = admin["address"].as_str().expect("an address field");
    assert!(admin_address.starts_with("http://127.0.0.1:"), "{admin}");

    // A reload that moves the listener names its new address.
    std::fs::write(&config, toml("127.0.0.2")).expect("rewrite config");
    let status = Command::new("kill")
        .args(["-HUP", &gateway.id().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(status.success());
    let moved = parse(&logs.wait_for(&["\"listening\"", "ws://127.0.0.2:"]));
    assert_eq!(moved["listener"], "public", "{moved}");
    let reloading = parse(&logs.wait_for(&["reloading the configuration"]));
    assert_eq!(
        reloading["file"].as_str(),
        Some(config.display().to_string().as_str()),
        "{reloading}"
    );

    stop(&mut gateway);
    let all = logs.all();
    for line in all.lines() {
        let v = parse(line);
        assert!(v.get("fields").is_none(), "{line}");
        assert!(!line.contains("addr\""), "one name for addresses: {line}");
    }
    assert!(
        !all.contains("Some("),
        "debug formatting in a log line:\n{all}"
    );
}
