//! Runs `loadgen --smoke` against the `switchyard` built beside it and checks
//! its report: every scenario ran every target (each gateway listener
//! included), every row carried verified traffic, and no reply was lost,
//! errored or delivered to the wrong request. Performance is not judged
//! here. A short soak with chaos (`--soak 10s --chaos --smoke`) must report
//! no lost and no misrouted request; its RSS is not judged. The fanout
//! scenario at tiny scale (1 and 3 subscribers, 2 s) must deliver every
//! event to every subscriber, in order; so must the scaleout scenario (4
//! subscribers through the in-process broker, then on a real nats-server
//! over one and over two instances), each event exactly once. The http
//! scenario alone (HTTP/1.1 and HTTP/2 through the `jsonrpc-http`
//! listener, beside floor H) must verify every reply.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The smoke run takes a few seconds on an idle machine; this bounds a
/// hang, with room for a machine whose cores are busy with other work.
const LIMIT: Duration = Duration::from_secs(300);
/// The soak smoke takes about 10 s; its clients may wait up to 40 s for
/// replies at the end (switchyard's 30 s request timeout and a margin).
const SOAK_LIMIT: Duration = Duration::from_secs(300);

/// The soak's client rows that must carry verified traffic.
const SOAK_STEADY_ROWS: [&str; 5] = [
    "jsonrpc-ws steady",
    "holon-rpc steady",
    "sideband json steady",
    "sideband cbor steady",
    "ndjson steady",
];

/// The rows of a scenario that runs every standard target, in table order.
const EVERY_TARGET: &[&str] = &[
    "A: daemon direct (NDJSON)",
    "B: WebSocket echo",
    "B2: WebSocket echo process",
    "C: byte relay → daemon (NDJSON)",
    "M: minimal gateway → daemon (NDJSON)",
    "switchyard jsonrpc-ws → ndjson",
    "switchyard holon-rpc → ndjson",
    "switchyard sideband json → ndjson",
    "switchyard sideband cbor → ndjson",
    "switchyard ndjson → jsonrpc-ws",
];

/// The fanout rows in `--smoke` mode.
const FANOUT_ROWS: &[&str] = &[
    "switchyard jsonrpc-ws ← ndjson feed x1 subscribers",
    "switchyard jsonrpc-ws ← ndjson feed x3 subscribers",
];

/// The scaleout rows in `--smoke` mode.
const SCALEOUT_ROWS: &[&str] = &[
    "local broker, 1 instance x4 subscribers",
    "nats backbone, 1 instance x4 subscribers",
    "nats backbone, 2 instances x4 subscribers",
];

/// The persist rows: one per store backend.
const PERSIST_ROWS: &[&str] = &[
    "switchyard persistent ← ndjson feed, memory store",
    "switchyard persistent ← ndjson feed, embedded store",
    "switchyard persistent ← ndjson feed, nats store",
];

/// The http rows: floor H and the jsonrpc-http gateway, HTTP/1.1 then
/// HTTP/2.
const HTTP_ROWS: &[&str] = &[
    "H: hyper echo process, HTTP/1.1",
    "switchyard jsonrpc-http → ndjson, HTTP/1.1",
    "H: hyper echo process, HTTP/2",
    "switchyard jsonrpc-http → ndjson, HTTP/2",
];

/// Each scenario and the rows its table must have (by label prefix).
const EXPECTED: [(&str, &[&str]); 10] = [
    ("latency", EVERY_TARGET),
    ("throughput", EVERY_TARGET),
    ("large", EVERY_TARGET),
    ("fixed-rate", EVERY_TARGET),
    ("idle", &["switchyard jsonrpc-ws → ndjson"]),
    (
        "fan-in",
        &[
            "switchyard jsonrpc-ws → ndjson",
            "switchyard jsonrpc-ws → ndjson",
        ],
    ),
    ("fanout", FANOUT_ROWS),
    ("scaleout", SCALEOUT_ROWS),
    ("persist", PERSIST_ROWS),
    ("http", HTTP_ROWS),
];

#[test]
fn smoke_run_reports_no_lost_or_mismatched_replies() {
    let (ok, stdout, stderr) = run_loadgen(&["--smoke"], LIMIT);
    assert!(ok, "loadgen failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    for (scenario, rows) in EXPECTED {
        let table = section(&stdout, scenario);
        let labels = check_table(scenario, table);
        assert_eq!(labels.len(), rows.len(), "{scenario}: rows {labels:?}");
        for (label, want) in labels.iter().zip(rows) {
            assert!(
                label.starts_with(want),
                "{scenario}: row {label:?}, wanted {want:?}"
            );
        }
    }
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("correctness:"))
        .unwrap_or_else(|| panic!("no correctness line:\n{stdout}"));
    assert!(
        summary.contains(" 0 mismatched, 0 lost, 0 failed runs"),
        "{summary}"
    );
    assert!(!stdout.contains("FAILED"), "a run failed:\n{stdout}");
}

#[test]
fn fanout_smoke_delivers_every_event_to_every_subscriber() {
    let args = ["--scenario", "fanout", "--smoke", "--duration-ms", "2000"];
    let (ok, stdout, stderr) = run_loadgen(&args, LIMIT);
    assert!(ok, "loadgen failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let table = section(&stdout, "fanout");
    let labels = check_table("fanout", table);
    assert_eq!(labels, FANOUT_ROWS, "{table}");
    let rows = table_rows(table);
    let col = |name: &str| column(&rows[0], name);
    let (subs, closed, published) = (col("subscribers"), col("closed"), col("published ev/s"));
    for (row, want) in rows[1..].iter().zip(["1/1", "3/3"]) {
        assert_eq!(row[subs], want, "{row:?}");
        assert_eq!(row[closed], "0", "a subscriber was closed: {row:?}");
        let rate: f64 = row[published].parse().expect("a rate");
        assert!(rate > 0.0, "the feed published nothing: {row:?}");
    }
    assert!(!stdout.contains("FAILED"), "a run failed:\n{stdout}");
}

#[test]
fn scaleout_smoke_delivers_every_event_once_over_one_and_two_instances() {
    let args = ["--scenario", "scaleout", "--smoke", "--duration-ms", "2000"];
    let (ok, stdout, stderr) = run_loadgen(&args, LIMIT);
    assert!(ok, "loadgen failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let table = section(&stdout, "scaleout");
    // 0 errors, 0 mismatched (no event repeated or out of order), 0 lost.
    let labels = check_table("scaleout", table);
    assert_eq!(labels, SCALEOUT_ROWS, "{table}");
    let rows = table_rows(table);
    let col = |name: &str| column(&rows[0], name);
    let want = [("1", "4", false), ("1", "4", true), ("2", "2 / 2", true)];
    for (row, (instances, split, nats)) in rows[1..].iter().zip(want) {
        assert_eq!(row[col("instances")], instances, "{row:?}");
        assert_eq!(row[col("subscribers")], "4/4", "{row:?}");
        assert_eq!(row[col("per instance")], split, "{row:?}");
        assert_eq!(row[col("closed")], "0", "a subscriber was closed: {row:?}");
        assert_eq!(row[col("late")], "0", "a subscriber missed events: {row:?}");
        let rate: f64 = row[col("published ev/s")].parse().expect("a rate");
        assert!(rate > 0.0, "the feed published nothing: {row:?}");
        // Each instance's CPU is read; the nats-server's on the backbone only.
        for cpu in row[col("instance CPU s")].split(" / ") {
            let _: f64 = cpu
                .parse()
                .unwrap_or_else(|e| panic!("instance CPU {cpu:?} ({e}): {row:?}"));
        }
        assert_eq!(row[col("nats CPU s")] != "—", nats, "{row:?}");
    }
    assert!(!stdout.contains("FAILED"), "a run failed:\n{stdout}");
}

/// The http scenario alone, tiny: every row verified traffic (HTTP/1.1 on
/// two keep-alive connections, HTTP/2 with 16 streams on one), each
/// compared with floor H under the same load.
#[test]
fn http_smoke_posts_over_http1_and_http2_with_every_reply_verified() {
    let (ok, stdout, stderr) = run_loadgen(&["--scenario", "http", "--smoke"], LIMIT);
    assert!(ok, "loadgen failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let table = section(&stdout, "http");
    assert_eq!(check_table("http", table), HTTP_ROWS, "{table}");
    let rows = table_rows(table);
    let col = |name: &str| column(&rows[0], name);
    for (row, load) in
        rows[1..]
            .iter()
            .zip(["2x1, 256 B", "2x1, 256 B", "1x16, 256 B", "1x16, 256 B"])
    {
        assert_eq!(row[col("load")], load, "{row:?}");
        // Floor H ran under the same load: the ratio is a number.
        let _: f64 = row[col("xH")]
            .parse()
            .unwrap_or_else(|e| panic!("xH {:?} ({e}): {row:?}", row[col("xH")]));
    }
    assert!(!stdout.contains("FAILED"), "a run failed:\n{stdout}");
}

#[test]
fn soak_smoke_with_chaos_reports_no_lost_or_misrouted_requests() {
    let args = ["--soak", "10s", "--chaos", "--smoke"];
    let (ok, stdout, stderr) = run_loadgen(&args, SOAK_LIMIT);
    assert!(
        ok,
        "loadgen soak failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for line in [
        "- PASS misrouted: 0",
        "- PASS lost: 0",
        "- PASS daemon restarts",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    let rows = table_rows(&stdout);
    let header = rows
        .first()
        .unwrap_or_else(|| panic!("no table:\n{stdout}"));
    let col = |name: &str| column(header, name);
    let (replies, lost, misrouted) = (col("replies"), col("lost"), col("misrouted"));
    for row in &rows[1..] {
        assert_eq!(row[lost], "0", "lost requests: {row:?}");
        assert_eq!(row[misrouted], "0", "misrouted replies: {row:?}");
    }
    for label in SOAK_STEADY_ROWS {
        let row = rows
            .iter()
            .find(|r| r[0] == label)
            .unwrap_or_else(|| panic!("no row {label:?}:\n{stdout}"));
        let n: u64 = row[replies].parse().expect("a count");
        assert!(n > 0, "no verified replies for {label}: {row:?}");
    }
}

/// The switchyard binary beside loadgen's in the workspace's target
/// directory: `cargo test` at the workspace root builds both before any
/// test runs (switchyard's own integration tests need its binary).
fn switchyard_binary() -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_BIN_EXE_loadgen")).with_file_name("switchyard");
    assert!(
        path.is_file(),
        "no switchyard binary at {}: run `cargo test` at the workspace root \
         (or `cargo build --bin switchyard` first)",
        path.display()
    );
    path
}

/// Runs loadgen with `args` against the switchyard built beside it, killing
/// it after `limit`; returns (success, stdout, stderr).
fn run_loadgen(args: &[&str], limit: Duration) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(args)
        .arg("--switchyard")
        .arg(switchyard_binary())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start loadgen");
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    // Drain both pipes while waiting, so a chatty child cannot block.
    let out_reader = std::thread::spawn(move || read_all(&mut out));
    let err_reader = std::thread::spawn(move || read_all(&mut err));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for loadgen") {
            break status;
        }
        if started.elapsed() > limit {
            // It may have exited just now; either way the panic reports it.
            let _ = child.kill();
            // Reaps it so no zombie outlives the test.
            let _ = child.wait();
            panic!("loadgen {args:?} took longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out_reader.join().expect("stdout reader");
    let stderr = err_reader.join().expect("stderr reader");
    (status.success(), stdout, stderr)
}

fn read_all(r: &mut impl Read) -> String {
    let mut s = String::new();
    r.read_to_string(&mut s).expect("loadgen output is UTF-8");
    s
}

/// The text of one scenario's section.
fn section<'a>(stdout: &'a str, scenario: &str) -> &'a str {
    let heading = format!("### scenario: {scenario}\n");
    let start = stdout
        .find(&heading)
        .unwrap_or_else(|| panic!("no section for {scenario}:\n{stdout}"))
        + heading.len();
    let rest = &stdout[start..];
    &rest[..rest.find("\n### ").unwrap_or(rest.len())]
}

/// Checks that every row reports 0 errors, 0 mismatched and 0 lost, and
/// that it carried traffic (req/s, acknowledged deliveries, delivered
/// events, or idle connections checked, above 0);
/// returns the labels.
fn check_table(scenario: &str, section: &str) -> Vec<String> {
    let mut lines = section.lines().filter(|l| l.starts_with('|'));
    let header = cells(
        lines
            .next()
            .unwrap_or_else(|| panic!("{scenario}: no table")),
    );
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("{scenario}: no {name} column in {header:?}"))
    };
    let (errors, mismatched, lost) = (col("errors"), col("mismatched"), col("lost"));
    // Traffic tables have req/s; the idle table counts checked
    // connections; the persist table counts acknowledged deliveries over
    // the whole run (its one-second window may see none while a debug
    // build's embedded store catches up on a busy machine); the fanout
    // table counts delivered events.
    let has = |name: &str| header.iter().any(|h| h == name);
    let traffic = if has("req/s") {
        col("req/s")
    } else if has("acks") {
        col("acks")
    } else if has("delivered ev/s") {
        col("delivered ev/s")
    } else {
        col("checked")
    };
    let mut labels = Vec::new();
    for line in lines.filter(|l| !l.starts_with("|---")) {
        let row = cells(line);
        assert_eq!(row[errors], "0", "{scenario}: errors in {line}");
        assert_eq!(
            row[mismatched], "0",
            "{scenario}: mismatched replies in {line}"
        );
        assert_eq!(row[lost], "0", "{scenario}: lost replies in {line}");
        let carried: f64 = row[traffic]
            .parse()
            .unwrap_or_else(|e| panic!("{scenario}: {:?} is not a number ({e})", row[traffic]));
        assert!(carried > 0.0, "{scenario}: no verified traffic in {line}");
        if has("idle CPU ms/s") {
            // Measured, not a dash (it may be 0 over a short window).
            let cpu = &row[col("idle CPU ms/s")];
            let ms: f64 = cpu
                .parse()
                .unwrap_or_else(|e| panic!("{scenario}: idle CPU {cpu:?} is not a number ({e})"));
            assert!(ms >= 0.0, "{scenario}: idle CPU {ms} in {line}");
        }
        labels.push(row[0].clone());
    }
    labels
}

/// The cells of every row of the tables in `text`, header rows included,
/// separator rows left out.
fn table_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .map(cells)
        .collect()
}

/// Where the column `name` is in `header`; a missing column fails the test.
fn column(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no {name} column in {header:?}"))
}

fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_owned())
        .collect()
}
