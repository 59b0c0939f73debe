//! The embedded store survives `kill -9`: a child
//! switchyard process stores the reference daemon's events on a persistent
//! topic while a WebSocket client receives and acknowledges them; the child
//! is killed with SIGKILL mid-stream and a new one is started on the same
//! data directory; the client resumes its `subscription_id`.
//!
//! Then: what it received before the kill ∪ what it receives after covers
//! every sequence stored after it subscribed, to the last one seen, with
//! no gap; nothing
//! whose `{"acknowledged":true}` it read before the kill comes again; and
//! `resumed_from_sequence` is at least its last confirmed ack.
//!
//! The store is what makes this pass: a store that lost an ack redelivers
//! a confirmed message, one that lost messages leaves a gap, one that lost
//! `last_seq` or the position restarts the sequence or the subscription.

mod common;

use std::collections::{BTreeSet, VecDeque};
use std::io::{BufRead, BufReader};

use std::path::Path;
use std::process::{Command, Stdio};

use common::child::Gateway;
use common::{json, recv, send, Ws};
use serde_json::Value;
use switchyard::daemon::{Daemon, DaemonOptions};

const TOPIC: &str = "daemon.events";
const SUB_ID: &str = "crash-1";
/// Acknowledgements confirmed before the kill.
const BEFORE_KILL: usize = 25;
/// New messages received after the restart, past the last one before it.
const AFTER_RESTART: u64 = 20;

/// What the client saw before the kill.
#[derive(Debug, Default)]
struct Seen {
    received: BTreeSet<u64>,
    /// Sequences whose `{"acknowledged":true}` was read.
    confirmed: BTreeSet<u64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_subscription_after_kill_9_misses_nothing_and_gets_no_confirmed_ack_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let daemon = Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    let store = dir.path().join("store");

    let first = start_gateway(dir.path(), &socket, &store, 1).await;
    let mut ws = common::connect(&first.url).await;
    // The feed of a persistent topic is stored from the start: the new
    // subscription begins after whatever is stored already.
    let start = subscribe(&mut ws).await;
    let mut seen = Seen::default();
    let mut next = VecDeque::new();
    while seen.confirmed.len() < BEFORE_KILL {
        let seq = next_delivery(&mut ws, &mut next).await;
        assert!(seen.received.insert(seq), "{seq} delivered twice");
        ack_and_wait(&mut ws, seq, &mut next).await;
        seen.confirmed.insert(seq);
    }
    // Mid-stream: one more delivery acknowledged with its reply unread,
    // events still arriving, and the process killed.
    let seq = next_delivery(&mut ws, &mut next).await;
    seen.received.insert(seq);
    send(&mut ws, &ack(seq)).await;
    first.stop();

    let second = start_gateway(dir.path(), &socket, &store, 2).await;
    let mut ws = common::connect(&second.url).await;
    let resumed = subscribe(&mut ws).await;
    let last_confirmed = seen.confirmed.last().copied().unwrap_or(0);
    assert!(
        resumed >= last_confirmed,
        "resumed from {resumed}, below the confirmed ack {last_confirmed}: {}",
        second.log()
    );
    let before = seen.received.last().copied().unwrap_or(0);
    let mut after = Vec::new();
    let mut next = VecDeque::new();
    while after
        .last()
        .is_none_or(|&last| last < before + AFTER_RESTART)
    {
        let seq = next_delivery(&mut ws, &mut next).await;
        assert!(
            !seen.confirmed.contains(&seq),
            "{seq} was acknowledged (and confirmed) before the kill, and came again"
        );
        assert!(
            seq > resumed,
            "{seq} is at or below the resume point {resumed}"
        );
        after.push(seq);
        ack_and_wait(&mut ws, seq, &mut next).await;
    }
    assert!(
        after.windows(2).all(|w| w[0] < w[1]),
        "redelivery out of order: {after:?}"
    );
    let union: BTreeSet<u64> = seen.received.iter().chain(&after).copied().collect();
    let last = after.last().copied().unwrap_or(0);
    let missing: Vec<u64> = (start + 1..=last).filter(|s| !union.contains(s)).collect();
    assert!(
        missing.is_empty(),
        "stored sequences never delivered: {missing:?} (before {seen:?}, after {after:?})"
    );
    second.stop();
    daemon.stop().await;
}

/// Subscribes persistently; returns `resumed_from_sequence`.
async fn subscribe(ws: &mut Ws) -> u64 {
    let persistent = serde_json::json!({
        "jsonrpc": "2.0", "method": "rpc.subscribe.persistent", "id": "p",
        "params": {"subscription_id": SUB_ID, "topic": TOPIC},
    });
    send(ws, &persistent.to_string()).await;
    let reply = json(&recv(ws).await);
    assert_eq!(reply["id"], "p", "{reply}");
    assert_eq!(reply["result"]["subscription_id"], SUB_ID, "{reply}");
    let resumed = reply["result"]["resumed_from_sequence"]
        .as_u64()
        .unwrap_or_else(|| panic!("no resumed_from_sequence: {reply}"));
    resumed
}

fn ack(seq: u64) -> String {
    serde_json::json!({
        "jsonrpc": "2.0", "method": "rpc.acknowledge.persistent", "id": format!("ack-{seq}"),
        "params": {"subscription_id": SUB_ID, "sequence_id": seq},
    })
    .to_string()
}

/// The next persistent delivery's sequence: the first kept in `next`
/// while an ack reply was awaited, else the next on the wire.
async fn next_delivery(ws: &mut Ws, next: &mut VecDeque<u64>) -> u64 {
    if let Some(seq) = next.pop_front() {
        return seq;
    }
    let msg = json(&recv(ws).await);
    delivery(&msg).unwrap_or_else(|| panic!("unexpected {msg}"))
}

/// Acknowledges `seq` and reads until its reply; deliveries read
/// meanwhile are kept, in order, in `next`.
async fn ack_and_wait(ws: &mut Ws, seq: u64, next: &mut VecDeque<u64>) {
    send(ws, &ack(seq)).await;
    let id = format!("ack-{seq}");
    loop {
        let msg = json(&recv(ws).await);
        if msg["id"] == id.as_str() {
            assert_eq!(
                msg["result"],
                serde_json::json!({"acknowledged": true}),
                "{msg}"
            );
            break;
        }
        let Some(s) = delivery(&msg) else {
            panic!("unexpected {msg}");
        };
        next.push_back(s);
    }
}

fn delivery(msg: &Value) -> Option<u64> {
    if msg["method"] != "rpc.notification.persistent" {
        return None;
    }
    let params = &msg["params"];
    assert_eq!(params["subscription_id"], SUB_ID, "{msg}");
    assert_eq!(params["topic"], TOPIC, "{msg}");
    assert!(
        params["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{msg}"
    );
    assert_eq!(params["data"]["event"]["type"], "new_approval", "{msg}");
    params["sequence_id"].as_u64()
}

/// Starts switchyard `run` (a child process) on a free port with the
/// embedded store at `store`, in front of the daemon at `socket`; returns
/// once its listener accepts.
async fn start_gateway(dir: &Path, socket: &Path, store: &Path, n: u32) -> Gateway {
    Gateway::run(dir, &format!("gateway-{n}"), |port| {
        config_toml(port, socket, store)
    })
    .await
}

fn config_toml(port: u16, socket: &Path, store: &Path) -> String {
    format!(
        r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:{port}"
path = "/rpc"

[upstreams.daemon]
dialect = "ndjson"
socket = "{socket}"
backoff_initial_ms = 50
backoff_max_ms = 200

[[upstreams.daemon.feeds]]
method = "Subscribe"
params = {{ interval_ms = 5 }}
topic = "{TOPIC}"

[[routes]]
listener = "public"
upstream = "daemon"

[persistence]
backend = "embedded"
path = "{store}"

[[persistent_topics]]
topic = "{TOPIC}"
ack_timeout_ms = 600000
"#,
        socket = socket.display(),
        store = store.display(),
    )
}

/// The child's side of [`the_embedded_log_keeps_every_commit_across_kill_9`]:
/// set in the environment of the re-executed test binary.
const CHILD_DIR: &str = "SWITCHYARD_CRASH_CHILD_DIR";

/// The log itself, without the engine: a child process appends and moves a
/// position as fast as it can and prints each sequence once `append` (or
/// `set_position`) has returned; it is killed with SIGKILL mid-stream.
/// Everything it printed must be in the reopened store.
#[test]
fn the_embedded_log_keeps_every_commit_across_kill_9() {
    use std::io::Write;
    use switchyard::persist::local::embedded::EmbeddedLog;
    use switchyard::persist::local::{Log, Position};
    use switchyard::persist::Retention;

    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        // The child: runs until it is killed.
        let mut log = EmbeddedLog::open(Path::new(&dir)).expect("open");
        let mut stdout = std::io::stdout().lock();
        for i in 0u64.. {
            let data =
                switchyard::envelope::Payload::json(&format!("{{\"i\":{i}}}")).expect("json");
            let (stored, _) = log
                .append(
                    "t",
                    &data,
                    std::time::SystemTime::now(),
                    &Retention::default(),
                )
                .expect("append");
            writeln!(stdout, "m {}", stored.seq).expect("stdout");
            if stored.seq % 3 == 0 {
                let position = Position {
                    topic: "t".into(),
                    start: 0,
                    floor: stored.seq,
                    acked: BTreeSet::from([stored.seq + 2]),
                };
                log.set_position("s", &position).expect("set_position");
                writeln!(stdout, "p {}", stored.seq).expect("stdout");
            }
            stdout.flush().expect("flush");
        }
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // What it printed before it died was committed too.
    let (messages, position) = kill_9_child(
        "the_embedded_log_keeps_every_commit_across_kill_9",
        CHILD_DIR,
        dir.path(),
    );

    let (last, stored) = reopen_after_kill(dir.path());
    assert!(last >= messages, "last_seq {last} < {messages} printed");
    assert!(
        last <= messages + 1,
        "last_seq {last}: more than one unprinted commit"
    );
    assert!(
        stored.floor >= position,
        "position {} < {position} printed",
        stored.floor
    );
    assert_eq!(
        stored.acked,
        BTreeSet::from([stored.floor + 2]),
        "{stored:?}"
    );
}

/// Reopens the log a killed child wrote to `dir`: its last seq, checked to
/// hold every message from 1 on without a gap, and subscription `s`'s
/// stored position.
fn reopen_after_kill(dir: &Path) -> (u64, switchyard::persist::local::Position) {
    use switchyard::persist::local::embedded::EmbeddedLog;
    use switchyard::persist::local::Log;

    let log = EmbeddedLog::open(dir).expect("reopen after kill -9");
    let last = log.last_seq("t").expect("last_seq");
    let seqs: Vec<u64> = log
        .read("t", 0, usize::MAX)
        .expect("read")
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(
        seqs,
        (1..=last).collect::<Vec<_>>(),
        "a gap in the stored messages"
    );
    let stored = log.position("s").expect("position").expect("a position");
    (last, stored)
}

/// Runs test `name` of this binary as a child writing to `dir` (passed in
/// `env`), kills it with SIGKILL once it has printed 300 messages, and
/// returns the last message and position it printed.
fn kill_9_child(name: &str, env: &str, dir: &Path) -> (u64, u64) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture"])
        .env(env, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut messages, mut position) = (0u64, 0u64);
    while messages < 300 {
        let line = lines.next().expect("the child ended early").expect("read");
        record(&line, &mut messages, &mut position);
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    for line in lines.map_while(Result::ok) {
        record(&line, &mut messages, &mut position);
    }
    (messages, position)
}

/// Takes in one line of the child: `m <seq>` (appended) or `p <seq>`
/// (position written); the test harness's own lines are ignored.
fn record(line: &str, messages: &mut u64, position: &mut u64) {
    match line.split_once(' ') {
        Some(("m", n)) => *messages = n.parse().expect("seq"),
        Some(("p", n)) => *position = n.parse().expect("seq"),
        _ => {}
    }
}

/// The child's side of
/// [`the_embedded_logs_grouped_commits_survive_kill_9`].
const GROUP_CHILD_DIR: &str = "SWITCHYARD_CRASH_GROUP_CHILD_DIR";

/// Batches staged before any is waited for (so the writer puts several in
/// one commit).
const GROUP: u64 = 8;

/// Group commit under `kill -9`: a child process stages [`GROUP`] batches
/// at a time (each an append and the position that follows it), without
/// waiting, then waits for each ticket in order and prints it once
/// resolved; it is killed mid-stream. Everything it printed (answered)
/// must be in the reopened store, and each commit whole: the position is
/// one that was staged, with its append.
#[test]
fn the_embedded_logs_grouped_commits_survive_kill_9() {
    use std::io::Write;
    use switchyard::persist::local::embedded::EmbeddedLog;
    use switchyard::persist::local::{Change, Log, Position};
    use switchyard::persist::Retention;

    if let Some(dir) = std::env::var_os(GROUP_CHILD_DIR) {
        // The child: runs until it is killed. The store is new, so the
        // i-th append gets sequence i.
        let mut log = EmbeddedLog::open(Path::new(&dir)).expect("open");
        let mut stdout = std::io::stdout().lock();
        for round in 0u64.. {
            let tickets: Vec<_> = (1..=GROUP)
                .map(|k| {
                    let seq = round * GROUP + k;
                    let data = switchyard::envelope::Payload::json(&format!("{{\"i\":{seq}}}"))
                        .expect("json");
                    log.stage(vec![
                        Change::Append {
                            topic: "t".into(),
                            data,
                            at: std::time::SystemTime::now(),
                            retention: Retention::default(),
                        },
                        Change::SetPosition {
                            id: "s".into(),
                            position: Position {
                                topic: "t".into(),
                                start: 0,
                                floor: seq,
                                acked: BTreeSet::from([seq + 2]),
                            },
                        },
                    ])
                })
                .collect();
            for (k, ticket) in (1..=GROUP).zip(tickets) {
                ticket.wait_blocking().expect("a durable batch");
                let seq = round * GROUP + k;
                writeln!(stdout, "m {seq}\np {seq}").expect("stdout");
            }
            stdout.flush().expect("flush");
        }
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (messages, position) = kill_9_child(
        "the_embedded_logs_grouped_commits_survive_kill_9",
        GROUP_CHILD_DIR,
        dir.path(),
    );

    let (last, stored) = reopen_after_kill(dir.path());
    assert!(last >= messages, "last_seq {last} < {messages} answered");
    assert!(
        last <= messages + GROUP,
        "last_seq {last}: more than the unanswered batches"
    );
    assert!(stored.floor >= position, "position {stored:?} < {position}");
    assert_eq!(
        stored.floor, last,
        "the position staged with the last append"
    );
    assert_eq!(stored.acked, BTreeSet::from([last + 2]), "{stored:?}");
}
