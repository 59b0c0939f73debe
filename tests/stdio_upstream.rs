//! Process upstreams (`command`): real child programs on stdin/stdout —
//! the reference daemon's `--stdio` mode, and `fixtures/stdio_tool.py`,
//! which crashes, hangs, writes garbage or floods stderr on request.
//!
//! Every scenario ends by counting the test process's children that carry
//! its tag (an environment variable in `/proc/<pid>/environ`, so parallel
//! tests do not see each other's): none may be left, and none may be a
//! zombie.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use common::clients::{Ended, Speak, TestClient};
use common::{eventually, json, metric_value};
use switchyard::app::{self, Running};
use switchyard::config::Config;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
const TOOL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_tool.py");
/// Generous bound for anything the machine must do (start a process, reap it).
const PATIENCE: Duration = Duration::from_secs(60);

/// `python3`, which the tool needs: a missing one fails with a clear message.
fn python3() -> &'static str {
    let found = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "these tests need python3 on PATH (tests/fixtures/stdio_tool.py)"
    );
    "python3"
}

/// The TOML `command` (and tag) of the tool.
fn tool_command(tag: &str) -> String {
    format!(
        "command = [\"{}\", \"{TOOL}\"]\nenv = {{ SY_TEST_TAG = \"{tag}\" }}\n",
        python3()
    )
}

/// A child process of this test process, as `/proc` shows it.
#[derive(Debug)]
struct Kid {
    pid: u32,
    /// `Z` for a zombie.
    #[allow(dead_code)] // shown in assertion messages
    state: char,
}

/// This process's children whose environment has `SY_TEST_TAG=<tag>`.
fn kids(tag: &str) -> Vec<Kid> {
    let me = std::process::id();
    let marker = format!("SY_TEST_TAG={tag}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue; // gone meanwhile
        };
        // "pid (comm) state ppid …": comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid: u32 = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if ppid != me {
            continue;
        }
        // A zombie's environ reads empty: count every zombie child of ours.
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let tagged = environ
            .split(|b| *b == 0)
            .any(|var| var == marker.as_bytes());
        if tagged || state == 'Z' {
            found.push(Kid { pid, state });
        }
    }
    found
}

/// Waits until no tagged child (and no zombie child) is left.
async fn until_no_kids(tag: &str) {
    let gone = eventually(PATIENCE, || kids(tag).is_empty()).await;
    assert!(gone, "children left behind: {:?}", kids(tag));
}

/// A JSON-RPC WebSocket listener `public` in front of upstream `tool`
/// (`upstream` lines added to its table); returns the gateway and the URL.
async fn ws_gateway(upstream: &str) -> (Running, String) {
    let toml = format!(
        "[listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\n\
         request_timeout_ms = 120000\n\n\
         [upstreams.tool]\ndialect = \"ndjson\"\nbackoff_initial_ms = 50\nbackoff_max_ms = 200\n{upstream}\n\n\
         [[routes]]\nlistener = \"public\"\nupstream = \"tool\"\n"
    );
    let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    (bound.spawn(), url)
}

async fn call(client: &mut TestClient, id: u64, method: &str, params: &str) -> serde_json::Value {
    client
        .send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        ))
        .await;
    reply_to(client, id).await
}

/// The reply with `id`, skipping notifications.
async fn reply_to(client: &mut TestClient, id: u64) -> serde_json::Value {
    loop {
        let v = json(&client.recv().await);
        if v.get("method").is_none() && v["id"] == id {
            return v;
        }
    }
}

fn value(gw: &Running, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric_value(gw, name, labels)
}

/// The reference daemon's `--stdio` mode behind every listener dialect,
/// in both modes: a shared pool of two processes, and a process per
/// client.
#[tokio::test]
async fn every_listener_dialect_reaches_a_process_in_both_modes() {
    let tag = "dialects";
    let dir = tempfile::tempdir().expect("tempdir");
    let dialects = [
        ("jsonrpc-ws", Speak::JsonRpc),
        ("holon-rpc", Speak::Holon),
        ("ndjson", Speak::Ndjson),
        ("sideband", Speak::SidebandJson),
    ];
    let mut toml = String::new();
    for (dialect, _) in dialects {
        for mode in ["shared", "pc"] {
            let name = format!("{}_{mode}", dialect.replace('-', "_"));
            let at = if dialect == "ndjson" {
                format!(
                    "socket = \"{}\"",
                    dir.path().join(format!("{name}.sock")).display()
                )
            } else {
                format!("address = \"127.0.0.1:0\"\npath = \"/{name}\"")
            };
            toml += &format!(
                "[listeners.{name}]\ndialect = \"{dialect}\"\n{at}\n\n\
                 [[routes]]\nlistener = \"{name}\"\nupstream = \"{mode}\"\n\n"
            );
        }
    }
    let daemon = format!(
        "command = [\"{BIN}\", \"daemon\", \"--stdio\"]\nenv = {{ SY_TEST_TAG = \"{tag}\" }}\n"
    );
    toml += &format!(
        "[upstreams.shared]\ndialect = \"ndjson\"\n{daemon}\n[upstreams.pc]\ndialect = \"ndjson\"\nmode = \"per-client\"\n{daemon}"
    );
    let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = app::bind(cfg).await.expect("bind");
    let mut endpoints = Vec::new();
    for (dialect, speak) in dialects {
        for mode in ["shared", "pc"] {
            let name = format!("{}_{mode}", dialect.replace('-', "_"));
            let endpoint = match speak {
                Speak::Ndjson => bound
                    .unix_path(&name)
                    .expect("socket")
                    .display()
                    .to_string(),
                _ => bound.ws_url(&name).expect("url"),
            };
            endpoints.push((name, speak, endpoint));
        }
    }
    let gw = bound.spawn();
    common::wait_connected(&gw, "shared").await;
    let mut clients = Vec::new();
    for (name, speak, endpoint) in &endpoints {
        let mut client = TestClient::connect(*speak, endpoint).await;
        client
            .send(r#"{"jsonrpc":"2.0","id":"7","method":"echo","params":{"via":"stdio"}}"#)
            .await;
        let v = json(&client.recv().await);
        assert_eq!(v["result"]["via"], "stdio", "{name}: {v}");
        clients.push(client);
    }
    // Two pooled processes, and one per per-client session (4 of them).
    assert_eq!(kids(tag).len(), 2 + 4, "{:?}", kids(tag));
    assert_eq!(
        value(&gw, "switchyard_upstream_processes", &[("upstream", "pc")]),
        4.0
    );
    drop(clients);
    let stopped = eventually(PATIENCE, || {
        value(&gw, "switchyard_upstream_processes", &[("upstream", "pc")]) == 0.0
    })
    .await;
    assert!(stopped, "per-client processes outlived their clients");
    let labels = [("upstream", "pc"), ("reason", "stopped")];
    let reaped = value(&gw, "switchyard_upstream_process_exits_total", &labels);
    assert_eq!(
        reaped, 4.0,
        "every per-client process was stopped by switchyard"
    );
    assert_eq!(kids(tag).len(), 2, "the pool's remain: {:?}", kids(tag));
    gw.shutdown().await;
    until_no_kids(tag).await;
}

/// 20 per-client sessions: 20 processes, each client sees only the
/// replies and notifications of its own.
#[tokio::test]
async fn twenty_clients_get_twenty_processes_and_only_their_own_messages() {
    let tag = "twenty";
    let (gw, url) = ws_gateway(&format!("mode = \"per-client\"\n{}", tool_command(tag))).await;
    let mut clients = Vec::new();
    for _ in 0..20 {
        clients.push(TestClient::connect(Speak::JsonRpc, &url).await);
    }
    let mut pids = HashSet::new();
    for client in &mut clients {
        client
            .send(r#"{"jsonrpc":"2.0","id":1,"method":"whoami","params":{}}"#)
            .await;
        // The tool says hello before it replies, and the order holds.
        let hello = json(&client.recv().await);
        assert_eq!(hello["method"], "hello", "{hello}");
        let reply = json(&client.recv().await);
        let pid = reply["result"]["pid"].as_u64().expect("pid");
        assert_eq!(
            hello["params"]["pid"], pid,
            "a notification of another process"
        );
        pids.insert(pid);
    }
    assert_eq!(pids.len(), 20, "one process per client");
    let alive: HashSet<u64> = kids(tag).iter().map(|k| u64::from(k.pid)).collect();
    assert_eq!(alive, pids, "the processes are the gateway's children");
    assert_eq!(
        value(
            &gw,
            "switchyard_upstream_processes",
            &[("upstream", "tool")]
        ),
        20.0
    );
    assert_eq!(
        value(
            &gw,
            "switchyard_upstream_processes_started_total",
            &[("upstream", "tool")]
        ),
        20.0
    );
    // Nobody else's traffic: after a marker, nothing but the marker's reply.
    for client in &mut clients {
        let v = call(client, 2, "echo", r#"{"m":2}"#).await;
        assert_eq!(v["result"]["m"], 2, "{v}");
        client.silence(Duration::from_millis(200)).await;
    }
    drop(clients);
    until_no_kids(tag).await;
    let stopped = eventually(PATIENCE, || {
        value(
            &gw,
            "switchyard_upstream_process_exits_total",
            &[("reason", "stopped")],
        ) == 20.0
    })
    .await;
    assert!(stopped, "every process stopped when its client left");
    assert_eq!(
        value(
            &gw,
            "switchyard_upstream_processes",
            &[("upstream", "tool")]
        ),
        0.0
    );
    gw.shutdown().await;
}

/// A shared process that crashes mid-call: the pending calls are
/// answered `unavailable` by the exit itself (the request timeout is two
/// minutes), the process is restarted, and the next call works.
#[tokio::test]
async fn a_crash_fails_pending_calls_at_once_and_the_pool_restarts_it() {
    let tag = "crash";
    let (gw, url) = ws_gateway(&format!("pool_size = 1\n{}", tool_command(tag))).await;
    common::wait_connected(&gw, "tool").await;
    let mut client = TestClient::connect(Speak::JsonRpc, &url).await;
    let first = call(&mut client, 1, "whoami", "{}").await;
    let first = first["result"]["pid"].as_u64().expect("pid");
    client
        .send(r#"{"jsonrpc":"2.0","id":2,"method":"hang","params":{}}"#)
        .await;
    client
        .send(r#"{"jsonrpc":"2.0","id":3,"method":"crash","params":{}}"#)
        .await;
    // Both answered, in either order.
    let mut answered = HashSet::new();
    while answered.len() < 2 {
        let v = json(&client.recv().await);
        assert_eq!(v["error"]["code"], -32009, "unavailable: {v}");
        answered.insert(v["id"].as_u64().expect("id"));
    }
    assert_eq!(answered, HashSet::from([2, 3]));
    // Restarted with backoff: the next call is served by a new process.
    let mut next = None;
    for id in 10..1000 {
        let v = call(&mut client, id, "whoami", "{}").await;
        if let Some(pid) = v["result"]["pid"].as_u64() {
            next = Some(pid);
            break;
        }
        assert_eq!(v["error"]["code"], -32009, "unavailable: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let next = next.expect("the pool restarted the process");
    assert_ne!(next, first);
    let failed = eventually(PATIENCE, || {
        value(
            &gw,
            "switchyard_upstream_process_exits_total",
            &[("reason", "failed")],
        ) == 1.0
    })
    .await;
    assert!(failed, "the crash (exit status 3) is counted as failed");
    gw.shutdown().await;
    until_no_kids(tag).await;
}

/// A per-client process that exits closes its client (1001), after its
/// pending call is answered `unavailable`.
#[tokio::test]
async fn a_per_client_process_that_exits_closes_its_client() {
    let tag = "pc-crash";
    let (gw, url) = ws_gateway(&format!("mode = \"per-client\"\n{}", tool_command(tag))).await;
    let mut client = TestClient::connect(Speak::JsonRpc, &url).await;
    call(&mut client, 1, "whoami", "{}").await;
    client
        .send(r#"{"jsonrpc":"2.0","id":2,"method":"hang","params":{}}"#)
        .await;
    client
        .send(r#"{"jsonrpc":"2.0","id":3,"method":"crash","params":{}}"#)
        .await;
    let mut answered = HashSet::new();
    let end = loop {
        match client.next().await {
            Ok(text) => {
                let v = json(&text);
                if v.get("method").is_some() {
                    continue;
                }
                assert_eq!(v["error"]["code"], -32009, "unavailable: {v}");
                answered.insert(v["id"].as_u64().expect("id"));
            }
            Err(end) => break end,
        }
    };
    assert_eq!(
        answered,
        HashSet::from([2, 3]),
        "both calls answered before the close"
    );
    assert_eq!(end, Ended::Close(1001));
    until_no_kids(tag).await;
    gw.shutdown().await;
}

/// A process that exits while something it started keeps its stdout
/// open (a wrapper's child): no end of file comes, the exit itself fails
/// the pending calls and closes the client, and the leftover in its
/// process group is stopped.
#[tokio::test]
async fn an_exit_answers_pending_calls_even_when_its_stdout_stays_open() {
    let tag = "orphan";
    let (gw, url) = ws_gateway(&format!("mode = \"per-client\"\n{}", tool_command(tag))).await;
    let mut client = TestClient::connect(Speak::JsonRpc, &url).await;
    call(&mut client, 1, "whoami", "{}").await;
    client
        .send(r#"{"jsonrpc":"2.0","id":2,"method":"hang","params":{}}"#)
        .await;
    client
        .send(r#"{"jsonrpc":"2.0","id":3,"method":"crash_orphan","params":{}}"#)
        .await;
    let mut orphan = None;
    let mut answered = HashSet::new();
    let end = loop {
        match client.next().await {
            Ok(text) => {
                let v = json(&text);
                if v["method"] == "orphan" {
                    orphan = v["params"]["pid"].as_u64();
                    continue;
                }
                assert_eq!(v["error"]["code"], -32009, "unavailable: {v}");
                let detail = v["error"]["data"].as_str().unwrap_or_default();
                assert!(detail.contains("upstream process exited"), "{v}");
                answered.insert(v["id"].as_u64().expect("id"));
            }
            Err(end) => break end,
        }
    };
    assert_eq!(answered, HashSet::from([2, 3]));
    assert_eq!(end, Ended::Close(1001));
    let orphan = orphan.expect("the tool named its child");
    // Stopped with its group: gone, or a zombie awaiting whoever adopted it.
    let stopped = eventually(PATIENCE, || {
        std::fs::read_to_string(format!("/proc/{orphan}/stat")).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    })
    .await;
    assert!(stopped, "the exited process's group was not stopped");
    until_no_kids(tag).await;
    gw.shutdown().await;
}

/// `max_processes` holds: at the cap a new client's call fails with
/// `resource_exhausted` and nothing is forked; when a client leaves, its
/// room is reused.
#[tokio::test]
async fn the_process_cap_holds() {
    let tag = "cap";
    let (gw, url) = ws_gateway(&format!(
        "mode = \"per-client\"\nmax_processes = 2\n{}",
        tool_command(tag)
    ))
    .await;
    let mut a = TestClient::connect(Speak::JsonRpc, &url).await;
    let mut b = TestClient::connect(Speak::JsonRpc, &url).await;
    let mut c = TestClient::connect(Speak::JsonRpc, &url).await;
    call(&mut a, 1, "whoami", "{}").await;
    call(&mut b, 1, "whoami", "{}").await;
    let refused = call(&mut c, 1, "whoami", "{}").await;
    assert_eq!(
        refused["error"]["code"], -32007,
        "resource_exhausted: {refused}"
    );
    assert_eq!(kids(tag).len(), 2, "nothing forked past the cap");
    assert_eq!(
        value(&gw, "switchyard_upstream_processes_started_total", &[]),
        2.0
    );
    drop(a);
    // Its process is reaped, then the room is there for c.
    let mut served = false;
    for id in 2..2000 {
        let v = call(&mut c, id, "whoami", "{}").await;
        if v["result"]["pid"].is_u64() {
            served = true;
            break;
        }
        assert_eq!(v["error"]["code"], -32007, "{v}");
        assert!(kids(tag).len() <= 2, "over the cap: {:?}", kids(tag));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "the room of a client that left is reused");
    drop((b, c));
    until_no_kids(tag).await;
    gw.shutdown().await;
}

/// Garbage is dropped and counted (the process lives on); a line over the
/// read limit ends the link as for a socket: the call fails `unavailable`,
/// the process is stopped and a new one serves the next call.
#[tokio::test]
async fn garbage_is_dropped_and_an_oversize_line_replaces_the_process() {
    let tag = "garbage";
    let (gw, url) = ws_gateway(&format!(
        "pool_size = 1\nmax_response_bytes = 1000\n{}",
        tool_command(tag)
    ))
    .await;
    common::wait_connected(&gw, "tool").await;
    let mut client = TestClient::connect(Speak::JsonRpc, &url).await;
    let pid = call(&mut client, 1, "whoami", "{}").await["result"]["pid"].clone();
    let v = call(&mut client, 2, "garbage", "{}").await;
    assert_eq!(v["result"], "ok", "{v}");
    let errors = value(
        &gw,
        "switchyard_protocol_errors_total",
        &[("side", "upstream")],
    );
    assert!(errors >= 1.0, "the garbage line is counted");
    let v = call(&mut client, 3, "whoami", "{}").await;
    assert_eq!(v["result"]["pid"], pid, "same process after garbage");
    let v = call(&mut client, 4, "huge", r#"{"bytes":5000}"#).await;
    assert_eq!(v["error"]["code"], -32009, "unavailable: {v}");
    let mut replaced = false;
    for id in 10..1000 {
        let v = call(&mut client, id, "whoami", "{}").await;
        if v["result"]["pid"].is_u64() {
            assert_ne!(v["result"]["pid"], pid, "a new process");
            replaced = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(replaced);
    assert_eq!(
        value(
            &gw,
            "switchyard_upstream_process_exits_total",
            &[("reason", "stopped")]
        ),
        1.0
    );
    gw.shutdown().await;
    until_no_kids(tag).await;
}

/// A gateway process (`switchyard run`): the tool's stderr lines are in
/// its log, tagged with the upstream; `env` and `cwd` reach the process;
/// at shutdown a process that ignores SIGTERM gets SIGKILL after
/// `stop_grace_ms`, and none is left behind.
#[tokio::test]
async fn stderr_is_logged_and_shutdown_kills_a_process_that_ignores_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path().join("work");
    std::fs::create_dir(&cwd).expect("cwd");
    let python = python3();
    let mut gw = common::child::Gateway::run(dir.path(), "stdio", |port| {
        format!(
            "[gateway]\nshutdown_grace_ms = 100\n\n\
             [listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:{port}\"\npath = \"/rpc\"\n\n\
             [upstreams.tool]\ndialect = \"ndjson\"\nmode = \"per-client\"\nstop_grace_ms = 300\n\
             command = [\"{python}\", \"{TOOL}\"]\nenv = {{ TOOL_GREETING = \"hello-from-env\" }}\ncwd = \"{}\"\n\n\
             [[routes]]\nlistener = \"public\"\nupstream = \"tool\"\n",
            cwd.display()
        )
    })
    .await;
    let mut client = TestClient::connect(Speak::JsonRpc, &gw.url).await;
    let me = call(&mut client, 1, "whoami", "{}").await;
    let pid = me["result"]["pid"].as_u64().expect("pid");
    let seen = std::fs::canonicalize(me["result"]["cwd"].as_str().expect("cwd")).expect("cwd");
    assert_eq!(seen, std::fs::canonicalize(&cwd).expect("cwd"));
    assert_eq!(
        call(&mut client, 2, "stderr", r#"{"lines":3}"#).await["result"],
        "ok"
    );
    assert_eq!(call(&mut client, 3, "stubborn", "{}").await["result"], "ok");
    let logged = eventually(PATIENCE, || gw.log().contains("tool says line 2")).await;
    let log = gw.log();
    assert!(logged, "stderr lines in the log:\n{log}");
    let line = log
        .lines()
        .find(|l| l.contains("tool says line 0"))
        .expect("line 0");
    assert!(
        line.contains("upstream stderr") && line.contains("upstream=tool"),
        "{line}"
    );
    assert!(line.contains(&format!("pid={pid}")), "{line}");
    assert!(
        log.contains("hello-from-env"),
        "env reaches the process:\n{log}"
    );
    // A flood is rate-limited, and every line is either logged or counted
    // as dropped in the next line logged: 1 greeting, 3 lines, 1000, then
    // single lines until one is let through after the flood.
    assert_eq!(
        call(&mut client, 4, "stderr", r#"{"lines":1000}"#).await["result"],
        "ok"
    );
    let mut written = 1 + 3 + 1000;
    let mut accounted = false;
    for id in 5..400 {
        assert_eq!(
            call(&mut client, id, "stderr", r#"{"lines":1}"#).await["result"],
            "ok"
        );
        written += 1;
        let within = Duration::from_millis(500);
        if eventually(within, || stderr_accounting(&gw.log()) == (written, true)).await {
            accounted = true;
            break;
        }
    }
    let (logged, dropped) = stderr_counts(&gw.log());
    assert!(
        accounted,
        "{logged} logged + {dropped} dropped != {written} written"
    );
    assert!(
        dropped > 0 && logged < 1000,
        "not rate-limited: {logged} logged"
    );
    let gateway_pid =
        rustix::process::Pid::from_raw(i32::try_from(gw.pid()).expect("pid")).expect("pid");
    rustix::process::kill_process(gateway_pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let status = gw.exited().await;
    assert!(status.success(), "{status}: {}", gw.log());
    let log = gw.log();
    assert!(log.contains("ignored SIGTERM; sending SIGKILL"), "{log}");
    // Reaped by the gateway: not alive, not a zombie of anyone.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the tool outlived the gateway"
    );
    drop(client);
}

/// A reload that changes a command upstream retires it: its shared
/// process is stopped and reaped, a new one serves from then on.
#[tokio::test]
async fn a_reload_replaces_the_shared_process() {
    let tag = "reload";
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("gateway.toml");
    let toml = |greeting: &str| {
        format!(
            "[listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\n\n\
             [upstreams.tool]\ndialect = \"ndjson\"\npool_size = 1\n\
             command = [\"{}\", \"{TOOL}\"]\nenv = {{ SY_TEST_TAG = \"{tag}\", TOOL_GREETING = \"{greeting}\" }}\n\n\
             [[routes]]\nlistener = \"public\"\nupstream = \"tool\"\n",
            python3()
        )
    };
    std::fs::write(&file, toml("v1")).expect("write config");
    let cfg = Config::load(Some(&file)).expect("config");
    let bound = app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let gw = bound.reload_from(Some(file.clone())).spawn();
    common::wait_connected(&gw, "tool").await;
    let mut client = TestClient::connect(Speak::JsonRpc, &url).await;
    let old = call(&mut client, 1, "whoami", "{}").await["result"]["pid"]
        .as_u64()
        .expect("pid");
    std::fs::write(&file, toml("v2")).expect("write config");
    gw.reload().await.expect("reload applied");
    let replaced = eventually(PATIENCE, || {
        let now: Vec<u32> = kids(tag).iter().map(|k| k.pid).collect();
        now.len() == 1 && u64::from(now[0]) != old
    })
    .await;
    assert!(replaced, "old process still there: {:?}", kids(tag));
    let mut client = TestClient::connect(Speak::JsonRpc, &url).await;
    let new = call(&mut client, 1, "whoami", "{}").await["result"]["pid"]
        .as_u64()
        .expect("pid");
    assert_ne!(new, old);
    let labels = [("upstream", "tool"), ("reason", "stopped")];
    assert_eq!(
        value(&gw, "switchyard_upstream_process_exits_total", &labels),
        1.0
    );
    gw.shutdown().await;
    until_no_kids(tag).await;
}

/// `(stderr lines logged, the sum of their `dropped` counts)` in `log`.
fn stderr_counts(log: &str) -> (u64, u64) {
    let mut logged = 0;
    let mut dropped = 0;
    for line in log.lines().filter(|l| l.contains("upstream stderr ")) {
        logged += 1;
        let n = line
            .split("dropped=")
            .nth(1)
            .map(|rest| {
                rest.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|digits| digits.parse::<u64>().ok())
            .expect("a dropped count");
        dropped += n;
    }
    (logged, dropped)
}

/// `(lines accounted for, whether some were dropped)`.
fn stderr_accounting(log: &str) -> (u64, bool) {
    let (logged, dropped) = stderr_counts(log);
    (logged + dropped, dropped > 0)
}
