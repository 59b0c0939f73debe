//! `switchyard watch`: the real binary against a gateway whose upstream
//! (the reference NDJSON daemon) has its `Subscribe` stream configured as
//! the feed `daemon.events` (harness in `common::feed`). In every client
//! dialect it prints one JSON line per event until interrupted (exit 0);
//! a refused subscription exits 3, a server that closes exits 1; a
//! persistent watch acknowledges every delivery it printed, so none comes
//! twice, and the next watch with its id resumes where it stopped.

mod common;

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use common::feed::{seq_of, Feed, TOPIC};
use common::wait_connected;
use serde_json::Value;
use switchyard::daemon::{Daemon, DaemonOptions};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// Generous: the machine may be busy.
const WAIT: Duration = Duration::from_secs(30);

/// A running `switchyard watch` and its stdout, line by line.
struct Watcher {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Watcher {
    fn spawn(args: &[&str]) -> Watcher {
        let mut child = Command::new(BIN)
            .arg("watch")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn switchyard watch");
        let stdout = child.stdout.take().expect("stdout piped");
        Watcher {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// The next line, as JSON.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("no line from switchyard watch in time")
            .expect("read stdout");
        let Some(line) = line else {
            let status = self.wait().await;
            panic!(
                "switchyard watch ended ({status:?}): {}",
                self.stderr().await
            );
        };
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Sends SIGINT (Ctrl-C) and waits for the exit.
    async fn interrupt(&mut self) -> ExitStatus {
        let pid = self.child.id().expect("still running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill -INT");
        assert!(sent.success());
        self.wait().await
    }

    async fn wait(&mut self) -> ExitStatus {
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("switchyard watch did not exit in time")
            .expect("wait")
    }

    async fn stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            // Whatever could be read is the diagnosis.
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut err, &mut text).await;
        }
        text
    }
}

/// Reads `n` pub/sub event lines; returns their daemon seqs.
async fn events(w: &mut Watcher, n: usize) -> Vec<u64> {
    let mut seqs = Vec::new();
    for _ in 0..n {
        let line = w.next().await;
        assert_eq!(line["topic"], TOPIC, "{line}");
        assert_eq!(line["data"]["event"]["type"], "new_approval", "{line}");
        seqs.push(seq_of(&line["data"]));
    }
    seqs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_one_line_per_event_in_every_dialect() {
    // `*.events` reaches past the upstream's own topics: allowed here.
    let feed = Feed::start("{ interval_ms = 20 }", "allow_topics = [\">\"]").await;
    let ndjson = format!("unix://{}", feed.ndjson.display());
    let runs: [Vec<&str>; 4] = [
        vec![&feed.jsonrpc, TOPIC],
        vec!["--holon", &feed.holon, "daemon.*"],
        vec!["--sideband", &feed.sideband, TOPIC],
        // Two patterns: one `rpc.subscribe.batch`; an event matching both
        // still comes once.
        vec![&ndjson, "daemon.>", "*.events"],
    ];
    for args in &runs {
        let mut w = Watcher::spawn(args);
        let seqs = events(&mut w, 5).await;
        for pair in seqs.windows(2) {
            assert_eq!(pair[1], pair[0] + 1, "{args:?}: {seqs:?}");
        }
        let status = w.interrupt().await;
        assert_eq!(status.code(), Some(0), "{args:?}: {}", w.stderr().await);
    }

    // A refused subscription (an invalid topic) exits 3.
    let mut refused = Watcher::spawn(&[&feed.jsonrpc, "daemon..events"]);
    let status = refused.wait().await;
    let stderr = refused.stderr().await;
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("-32602"), "{stderr}");

    // The server going away ends the watch with 1.
    let url = feed.jsonrpc.clone();
    drop(runs);
    let mut w = Watcher::spawn(&[&url, TOPIC]);
    events(&mut w, 1).await;
    feed.stop().await;
    let status = w.wait().await;
    let stderr = w.stderr().await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("closed the connection"), "{stderr}");
}

/// Reads `n` persistent deliveries of subscription `id`; asserts that
/// none came twice or went missing; returns their sequence ids.
async fn deliveries(w: &mut Watcher, id: &str, n: usize) -> Vec<u64> {
    let mut seen = Vec::new();
    for _ in 0..n {
        let line = w.next().await;
        assert_eq!(line["subscription_id"], id, "{line}");
        assert_eq!(line["topic"], TOPIC, "{line}");
        assert!(line["timestamp"].is_string(), "{line}");
        assert_eq!(line["data"]["event"]["type"], "new_approval", "{line}");
        seen.push(line["sequence_id"].as_u64().expect("a sequence_id"));
    }
    for pair in seen.windows(2) {
        assert_eq!(
            pair[1],
            pair[0] + 1,
            "{id}: a delivery came twice or not at all: {seen:?}"
        );
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_watch_acknowledges_what_it_printed_and_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let daemon = Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    // An event every 100 ms; what is not acknowledged within 2 s comes
    // again on the same connection.
    let toml = format!(
        r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"

[listeners.holon]
dialect = "holon-rpc"
address = "127.0.0.1:0"
path = "/holon"

[listeners.sb]
dialect = "sideband"
address = "127.0.0.1:0"
path = "/sb"

[upstreams.daemon]
dialect = "ndjson"
socket = "{}"
backoff_initial_ms = 50
backoff_max_ms = 200

[[upstreams.daemon.feeds]]
method = "Subscribe"
params = {{ interval_ms = 100 }}
topic = "daemon.events"

[[routes]]
listener = "public"
upstream = "daemon"

[[routes]]
listener = "holon"
upstream = "daemon"

[[routes]]
listener = "sb"
upstream = "daemon"

[[persistent_topics]]
topic = "daemon.events"
max_count = 10000
ack_timeout_ms = 2000
"#,
        socket.display()
    );
    let cfg = switchyard::config::Config::from_toml(&toml).expect("config");
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = |name| bound.ws_url(name).expect("listener url");
    let (url, holon, sb) = (url("public"), url("holon"), url("sb"));
    let gateway = bound.spawn();
    wait_connected(&gateway, "daemon").await;

    // 30 deliveries take 3 s, past the ack timeout: had one not been
    // acknowledged, it would come again among them. holon-rpc and
    // Sideband first, each with its own subscription id.
    for args in [
        ["--holon", "--persistent", "h1", holon.as_str(), TOPIC],
        ["--sideband", "--persistent", "s1", sb.as_str(), TOPIC],
    ] {
        let mut w = Watcher::spawn(&args);
        deliveries(&mut w, args[2], 30).await;
        assert_eq!(w.interrupt().await.code(), Some(0), "{}", w.stderr().await);
    }
    let args = ["--persistent", "w1", url.as_str(), TOPIC];
    let mut w = Watcher::spawn(&args);
    let seen = deliveries(&mut w, "w1", 30).await;
    assert_eq!(w.interrupt().await.code(), Some(0), "{}", w.stderr().await);

    // The same id again: it resumes after what was acknowledged, with
    // nothing lost in between (the last few, whose acknowledgements the
    // interrupt may have cut off, may come again: at least once).
    let (half, last) = (seen[seen.len() / 2], *seen.last().expect("deliveries"));
    let mut again = Watcher::spawn(&args);
    let first = again.next().await["sequence_id"].as_u64().expect("seq");
    assert!(
        first > half && first <= last + 1,
        "resumed at {first} after {seen:?}"
    );
    assert_eq!(again.interrupt().await.code(), Some(0));

    gateway.shutdown().await;
    daemon.stop().await;
}
