//! The demo's playground in a real browser: headless Chromium driven over
//! the DevTools Protocol (`tests/node/playground.mjs`, puppeteer-core)
//! calls through each WebSocket dialect with the page's own `WebSocket`,
//! and through its HTTP panel (`fetch` POST and an `EventSource` on a
//! topic pattern), and a page from another origin is refused before the
//! upgrade. While the
//! demo is stopped the page stops polling and only probes, with a growing
//! delay; when the demo is back it polls and reconnects
//! (`tests/node/playground_reconnect.mjs`).
//!
//! Needs Node.js with npm (the locked `tests/node` dependencies are
//! installed on first use) and Debian's `chromium`;
//! `scripts/install-test-tools.sh` installs both. A missing tool fails the
//! test, never skips it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::demo::{http_get, Demo};
use common::node::{ensure_node_modules, node_dir, require_chromium, require_tool};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// Upper bound for the whole browser session on a busy 2-core machine.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

#[test]
fn playground_calls_every_websocket_dialect_from_chromium_and_other_origins_are_refused() {
    let chromium = require_chromium();
    require_tool("node");
    let dir = node_dir();
    ensure_node_modules(&dir);

    let sockets = tempfile::tempdir().expect("tempdir");
    let demo = Demo::start(
        BIN,
        &[
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--dir",
            sockets.path().to_str().expect("UTF-8 path"),
        ],
    );
    let jsonrpc = demo.endpoint("JSON-RPC 2.0 over WebSocket").to_owned();
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("playground.png");
    let _ = std::fs::remove_file(&shot);
    let http = demo.endpoint("JSON-RPC 2.0 over HTTP").to_owned();
    let summary = run_script(&dir, &demo.playground, &[&jsonrpc, &http], &shot, &chromium);
    assert!(
        summary.get("error").is_none(),
        "the browser session failed: {}",
        summary["error"]
    );
    assert_eq!(summary["console"], serde_json::json!([]), "console output");
    // Reached from the status page's link.
    assert_eq!(
        summary["page"]["url"],
        demo.playground.as_str(),
        "{summary:#}"
    );
    assert_eq!(summary["page"]["status"], 200, "{summary:#}");
    // The page says why the ids on the two sides differ.
    let note = summary["idNote"].as_str().unwrap_or_default();
    assert!(
        note.contains("from 101") && note.contains("from 1,"),
        "{note:?}"
    );
    let csp = summary["page"]["csp"].as_str().unwrap_or_default();
    assert!(csp.contains("script-src 'self'"), "CSP {csp:?}");

    // Each dialect: the answer, and the id the page saw upstream, which the
    // upstream log shows on the daemon's request line.
    let admin_origin = demo.playground.trim_end_matches("/playground").to_owned();
    for (dialect, method, answer) in [
        ("jsonrpc", "subtract", "19"),
        ("holon", "echo", r#"{"hello":"holon"}"#),
        ("sideband", "echo", r#"{"text":"hi"}"#),
    ] {
        let call = &summary["calls"][dialect];
        let row = &call["row"];
        assert_eq!(row["state"], "answered", "{dialect}: {call:#}");
        let cells: Vec<&str> = row["cells"]
            .as_array()
            .expect("cells")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(cells[2], method, "{dialect}");
        assert_eq!(cells[5], answer, "{dialect}: {cells:?}");
        let upstream_id = row["upstreamId"].as_str().expect("upstream id");
        assert!(
            upstream_id.parse::<u64>().is_ok(),
            "{dialect}: the upstream id is the gateway's integer: {upstream_id}"
        );
        // The table never reads as "nothing rewritten" (1 → 1).
        assert_ne!(
            row["clientId"].as_str(),
            Some(upstream_id),
            "{dialect}: the same id on both sides: {row:#}"
        );
        assert!(
            cells[4].starts_with(upstream_id),
            "{dialect}: shown {:?}",
            cells[4]
        );
        let request_line = format!("\"method\":\"{method}\"");
        let id_member = format!("\"id\":{upstream_id}}}");
        let upstream_log = call["upstreamLog"].as_array().expect("upstream log");
        assert!(
            upstream_log.iter().filter_map(Value::as_str).any(|l| {
                l.contains("sent →") && l.contains(&request_line) && l.contains(&id_member)
            }),
            "{dialect}: no upstream line with {id_member}: {upstream_log:#?}"
        );
        let client_log = call["clientLog"].as_array().expect("client log");
        assert!(
            client_log
                .iter()
                .filter_map(Value::as_str)
                .any(|l| l.contains("← recv") && l.contains(answer)),
            "{dialect}: the browser leg lacks the answer: {client_log:#?}"
        );
    }
    // Sideband: the browser's cid (32 hex, its frame id) became an integer.
    let cid = summary["calls"]["sideband"]["row"]["clientId"]
        .as_str()
        .expect("cid");
    assert!(
        cid.len() == 32 && cid.chars().all(|c| c.is_ascii_hexdigit()),
        "{cid}"
    );
    // The batch: every call in it answered, with its own upstream id.
    let batch = summary["batch"].as_array().expect("batch rows");
    assert!(batch.len() >= 3, "{batch:#?}");
    assert!(batch.iter().any(|r| r["answer"] == "7"), "{batch:#?}");
    for r in batch {
        assert_ne!(r["clientId"], r["upstreamId"], "{batch:#?}");
    }

    // Pub/sub: the subscription was answered by switchyard and the daemon's
    // feed reached the page.
    assert_eq!(
        summary["subscribed"],
        serde_json::json!([{"state": "answered", "answer": "{\"subscribed\":true}"}]),
        "{summary:#}"
    );
    assert!(summary["events"].as_u64() >= Some(1), "{summary:#}");

    // Every handshake from the playground carried its real Origin and got
    // 101.
    let handshakes = summary["handshakes"].as_array().expect("handshakes");
    let own: Vec<&Value> = handshakes
        .iter()
        .filter(|h| h["page"] == "playground")
        .collect();
    assert!(own.len() >= 3, "{handshakes:#?}");
    for h in &own {
        assert_eq!(h["origin"], admin_origin.as_str(), "{h:#}");
        assert_eq!(h["status"], 101, "{h:#}");
    }

    // Another origin, same browser: refused with 403 before the upgrade.
    let cross = &summary["crossOrigin"];
    assert_eq!(cross["opened"], false, "{cross:#}");
    assert_ne!(cross["origin"], admin_origin.as_str());
    assert_eq!(cross["handshake"]["origin"], cross["origin"], "{cross:#}");
    let refused = cross["handshake"]["status"] == 403
        || cross["handshake"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("403"));
    assert!(refused, "not a 403: {cross:#}");
    let metrics =
        String::from_utf8_lossy(&http_get(demo.endpoint("Prometheus metrics"), &[]).2).into_owned();
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "switchyard_connections_rejected_total{listener=\"jsonrpc\",reason=\"origin\"} "
        ) && !l.ends_with(" 0")),
        "the refusal is not counted:\n{metrics}"
    );

    // JSON-RPC over HTTP through the playground's HTTP panel (the page's
    // fetch and EventSource, from its origin); from the other origin the
    // preflight is refused.
    let http = &summary["http"];
    assert_eq!(
        http["endpoint"],
        demo.endpoint("JSON-RPC 2.0 over HTTP"),
        "{http:#}"
    );
    assert_eq!(http["reply"]["state"], "answered", "{http:#}");
    assert_eq!(http["reply"]["status"], 200, "{http:#}");
    assert_eq!(http["reply"]["body"]["result"], 19, "{http:#}");
    // The call has its row in the id-rewrite table, answered, with the
    // gateway's integer id upstream.
    let row = &http["row"];
    assert_eq!(row["cells"][2], "subtract", "{row:#}");
    assert_eq!(row["cells"][5], "19", "{row:#}");
    assert!(
        row["upstreamId"]
            .as_str()
            .is_some_and(|id| id.parse::<u64>().is_ok()),
        "{row:#}"
    );
    // The EventSource on `daemon.>` listed the daemon's events, then closed.
    assert!(http["events"].as_u64() >= Some(1), "{http:#}");
    assert_eq!(http["event"]["topic"], "daemon.events", "{http:#}");
    assert_eq!(http["closed"], "idle", "{http:#}");
    assert!(
        cross["fetch"]["refused"].is_string(),
        "a fetch from another origin went through: {cross:#}"
    );

    let png = std::fs::read(&shot).expect("screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    println!("playground screenshot: {}", shot.display());
    demo.stop();
}

/// Runs the Node driver; its stdout is one JSON summary.
/// `urls`: the JSON-RPC WebSocket endpoint and the JSON-RPC over HTTP one.
fn run_script(
    dir: &Path,
    playground: &str,
    urls: &[&str; 2],
    shot: &Path,
    chromium: &Path,
) -> Value {
    let mut child = Command::new("node")
        .arg(dir.join("playground.mjs"))
        .arg(playground)
        .arg(urls[0])
        .arg(shot)
        .arg(chromium)
        .arg(urls[1])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start node");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut { stdout }, &mut text);
        let _ = tx.send(text);
    });
    let Ok(text) = rx.recv_timeout(SCRIPT_TIMEOUT) else {
        let _ = child.kill();
        panic!("the browser session did not finish within {SCRIPT_TIMEOUT:?}");
    };
    let status = child.wait().expect("wait node");
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("node ({status}) printed no JSON summary ({e}):\n{text}"))
}

/// The playground's requests while the demo is down: once it noticed (the
/// second failed probe of `/demo/endpoints`), nothing but probes until one
/// succeeds; then it polls `/metrics` and `/demo/upstream` again and its
/// WebSocket reconnects to the restarted demo.
#[test]
fn playground_stops_polling_while_the_demo_is_down_and_resumes_when_it_is_back() {
    let chromium = require_chromium();
    require_tool("node");
    let dir = node_dir();
    ensure_node_modules(&dir);

    let first_dir = tempfile::tempdir().expect("tempdir");
    let demo = start_demo("127.0.0.1:0", "127.0.0.1:0", first_dir.path());
    let playground = demo.playground.clone();
    // The restarted demo binds the same ports, so the page's origin and
    // WebSocket URLs stay valid.
    let admin = host_port(&playground, "http://");
    let listen = host_port(demo.endpoint("JSON-RPC 2.0 over WebSocket"), "ws://");
    let second_dir = tempfile::tempdir().expect("tempdir");
    let mut demo = Some(demo);
    let summary = run_interactive(
        &dir,
        "playground_reconnect.mjs",
        &[&playground, chromium.to_str().expect("UTF-8 path")],
        |need| match need {
            "stop" => demo.take().expect("a running demo").stop(),
            "start" => {
                let again = start_demo(&listen, &admin, second_dir.path());
                assert_eq!(
                    again.playground, playground,
                    "the restarted demo did not get the same admin port (taken meanwhile?)"
                );
                demo = Some(again);
            }
            other => panic!("the script asked for {other:?}"),
        },
    );
    assert!(
        summary.get("error").is_none(),
        "the browser session failed: {}",
        summary["error"]
    );
    assert_eq!(summary["before"]["answer"], "19", "{summary:#}");
    assert_eq!(summary["after"]["answer"], "19", "{summary:#}");

    let requests: Vec<(&str, bool)> = summary["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| (r["path"].as_str().unwrap_or_default(), r["failed"] == true))
        .collect();
    let failed_probes: Vec<usize> = (0..requests.len())
        .filter(|&i| requests[i] == ("/demo/endpoints", true))
        .collect();
    assert!(failed_probes.len() >= 4, "{requests:#?}");
    let from = failed_probes[1];
    let back = (from..requests.len())
        .find(|&i| requests[i] == ("/demo/endpoints", false))
        .unwrap_or_else(|| panic!("no probe succeeded: {requests:#?}"));
    let offline = &requests[from..back];
    assert!(
        offline.iter().all(|r| *r == ("/demo/endpoints", true)),
        "while the demo was down the page requested more than probes: {offline:#?}"
    );
    // The probes back off: the page's next delay grew from its first.
    let offline_state = &summary["offline"];
    assert_eq!(offline_state["state"], "offline", "{offline_state:#}");
    let retry_ms: u64 = offline_state["retryMs"]
        .as_str()
        .and_then(|ms| ms.parse().ok())
        .expect("data-retry-ms");
    assert!(retry_ms > 1_000, "no backoff: {offline_state:#}");
    let attempts: usize = offline_state["attempts"]
        .as_str()
        .and_then(|n| n.parse().ok())
        .expect("data-attempts");
    assert!(attempts >= 4, "{offline_state:#}");
    assert!(offline.len() >= 3, "{offline:#?}");
    // Back: the polls resumed and the WebSocket reconnected.
    let after = &requests[back..];
    for path in ["/metrics", "/demo/upstream"] {
        assert!(after.iter().any(|r| r.0 == path), "{path} not polled again");
    }
    assert_eq!(summary["online"]["state"], "online", "{summary:#}");
    // Each failed request leaves one console error; nothing else does.
    let failed = requests.iter().filter(|r| r.1).count();
    let console: Vec<&str> = summary["console"]
        .as_array()
        .expect("console")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        console.iter().all(|l| !l.starts_with("pageerror")) && console.len() <= failed + 1,
        "{failed} failed requests, console: {console:#?}"
    );
    if let Some(demo) = demo {
        demo.stop();
    }
}

/// `switchyard demo` on `listen` and `admin`, its sockets in `dir`.
fn start_demo(listen: &str, admin: &str, dir: &Path) -> Demo {
    Demo::start(
        BIN,
        &[
            "--listen",
            listen,
            "--admin",
            admin,
            "--dir",
            dir.to_str().expect("UTF-8 path"),
        ],
    )
}

/// `host:port` of `url` (`scheme` + `host:port/path`).
fn host_port(url: &str, scheme: &str) -> String {
    let rest = url.strip_prefix(scheme).expect("scheme");
    rest.split('/').next().expect("host:port").to_owned()
}

/// Runs a Node driver that asks for things on stdout (`{"need":"…"}`
/// lines, each answered with `ok` on its stdin once `on_need` returns) and
/// ends with one JSON summary line.
fn run_interactive(
    dir: &Path,
    script: &str,
    args: &[&str],
    mut on_need: impl FnMut(&str),
) -> Value {
    let mut child = Command::new("node")
        .arg(dir.join(script))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start node");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + SCRIPT_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            let _ = child.kill();
            panic!("the browser session did not finish within {SCRIPT_TIMEOUT:?}");
        };
        let value: Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|e| panic!("node printed a line that is not JSON ({e}): {line}"));
        match value["need"].as_str() {
            Some(need) => {
                on_need(need);
                writeln!(stdin, "ok").expect("answer node");
            }
            None => {
                let status = child.wait().expect("wait node");
                println!("node exited: {status}");
                return value;
            }
        }
    }
}
