//! Configuration reload: `POST /reload` (token checks), every problem of
//! an invalid configuration listed (HTTP and CLI) with the old one serving
//! on, SIGHUP on a child process, and reloads under load that lose,
//! misroute or close nothing.

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use switchyard::app::{self, Running};
use switchyard::client::reload::{reload, ReloadError, Reloaded};
use switchyard::config::Config;
use switchyard::daemon::{Daemon, DaemonOptions};

#[path = "reload/listeners.rs"]
mod listeners;
#[path = "reload/load.rs"]
mod load;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");
const TOKEN: &str = "s3cret-reload-token";

/// A config file: one JSON-RPC listener `public` routed to the NDJSON
/// daemon at `socket`, an admin listener, and `extra` TOML.
fn config_text(socket: &Path, admin: &str, extra: &str) -> String {
    format!(
        r#"
[admin]
address = "127.0.0.1:0"
{admin}

[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"

[upstreams.daemon]
dialect = "ndjson"
socket = "{socket}"
backoff_initial_ms = 50
backoff_max_ms = 200

[[routes]]
listener = "public"
upstream = "daemon"
{extra}
"#,
        socket = socket.display()
    )
}

/// A gateway started from `file` (so that it can reload it).
async fn start(file: &Path) -> (Running, String, String) {
    let cfg = Config::load(Some(file)).expect("config");
    let bound = app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let admin = format!("http://{}", bound.admin_addr().expect("admin"));
    let gateway = bound.reload_from(Some(file.to_owned())).spawn();
    (gateway, url, admin)
}

/// The echo of `n` through `url` (the config serving answers it).
async fn echo(url: &str, n: u64) {
    let mut ws = connect(url).await;
    send(
        &mut ws,
        &format!(r#"{{"jsonrpc":"2.0","method":"echo","params":[{n}],"id":{n}}}"#),
    )
    .await;
    assert_eq!(json(&recv(&mut ws).await)["result"][0], n);
}

struct Setup {
    dir: tempfile::TempDir,
    daemon: Daemon,
    socket: PathBuf,
    file: PathBuf,
}

async fn setup(admin: &str) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let daemon = Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    let file = dir.path().join("switchyard.toml");
    std::fs::write(&file, config_text(&socket, admin, "")).expect("write");
    Setup {
        dir,
        daemon,
        socket,
        file,
    }
}

#[tokio::test]
async fn reload_endpoint_needs_the_configured_token() {
    let s = setup(&format!("reload_token = \"{TOKEN}\"")).await;
    let (gateway, _, admin) = start(&s.file).await;
    let step = Duration::from_secs(30);
    let status = |r: Result<Reloaded, ReloadError>| match r {
        Err(ReloadError::Refused { status, .. }) => status,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(status(reload(&admin, None, step).await), 401);
    assert_eq!(status(reload(&admin, Some("wrong"), step).await), 403);
    let prefix = &TOKEN[..TOKEN.len() - 1];
    assert_eq!(status(reload(&admin, Some(prefix), step).await), 403);
    assert!(matches!(
        reload(&admin, Some(TOKEN), step).await,
        Ok(Reloaded::Ok(2))
    ));
    gateway.shutdown().await;
    // Without `reload_token` the endpoint refuses, whatever is sent.
    std::fs::write(&s.file, config_text(&s.socket, "", "")).expect("write");
    let (gateway, _, admin) = start(&s.file).await;
    assert_eq!(status(reload(&admin, None, step).await), 403);
    assert_eq!(status(reload(&admin, Some(TOKEN), step).await), 403);
    assert_eq!(
        metric_value(&gateway, "switchyard_config_generation", &[]),
        1.0
    );
    gateway.shutdown().await;
    s.daemon.stop().await;
}

/// Three problems, each on its own key.
const THREE_PROBLEMS: &str = r#"
[log]
level = "info,=[bad"

[upstreams.other]
dialect = "ndjson"
socket = "/nonexistent/other.sock"
pool_size = 0

[[routes]]
listener = "public"
upstream = "nowhere"
method_prefix = "x."
"#;

#[tokio::test]
async fn an_invalid_reload_lists_every_problem_and_the_old_config_serves_on() {
    let s = setup(&format!("reload_token = \"{TOKEN}\"")).await;
    let (gateway, url, admin) = start(&s.file).await;
    echo(&url, 1).await;
    let good = std::fs::read_to_string(&s.file).expect("read");
    std::fs::write(&s.file, good.clone() + THREE_PROBLEMS).expect("write");
    let problems = match reload(&admin, Some(TOKEN), Duration::from_secs(30)).await {
        Ok(Reloaded::Rejected(problems)) => problems,
        other => panic!("expected a rejection, got {other:?}"),
    };
    assert_eq!(problems.len(), 3, "{problems:#?}");
    for key in ["log.level", "upstreams.other.pool_size", "nowhere"] {
        assert!(
            problems.iter().any(|p| p.contains(key)),
            "{key} in {problems:#?}"
        );
    }
    // The CLI lists them too, and exits 64 like `switchyard run` would.
    let cli = tokio::task::spawn_blocking({
        let admin = admin.clone();
        move || {
            Command::new(BIN)
                .args(["reload", "--admin", &admin, "--token", TOKEN])
                .output()
                .expect("run the CLI")
        }
    })
    .await
    .expect("CLI");
    let stderr = String::from_utf8_lossy(&cli.stderr);
    assert_eq!(cli.status.code(), Some(64), "{stderr}");
    for problem in &problems {
        assert!(stderr.contains(problem.as_str()), "{problem} in {stderr}");
    }
    // Nothing changed: same generation, same routes, connections served.
    echo(&url, 2).await;
    let rejected = [("result", "rejected")];
    let m = |name, labels| metric_value(&gateway, name, labels);
    assert_eq!(m("switchyard_config_reloads_total", &rejected), 2.0);
    assert_eq!(m("switchyard_config_generation", &[]), 1.0);
    let (status, _, page) =
        tokio::task::spawn_blocking(move || common::demo::http_get(&format!("{admin}/"), &[]))
            .await
            .expect("page");
    assert_eq!(status, 200);
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains("config generation 1"), "{page}");
    assert!(page.contains("Last rejected reload"), "{page}");
    // Fixed again, the reload applies (and the CLI says so).
    std::fs::write(&s.file, good).expect("write");
    let admin = format!("http://{}", gateway.admin_addr().expect("admin"));
    let cli = tokio::task::spawn_blocking({
        let admin = admin.clone();
        move || {
            Command::new(BIN)
                .args(["reload", "--admin", &admin, "--token", TOKEN])
                .output()
                .expect("run the CLI")
        }
    })
    .await
    .expect("CLI");
    let stdout = String::from_utf8_lossy(&cli.stdout);
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert!(stdout.contains("generation 2"), "{stdout}");
    let (_, _, page) =
        tokio::task::spawn_blocking(move || common::demo::http_get(&format!("{admin}/"), &[]))
            .await
            .expect("page");
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains("config generation 2"), "{page}");
    echo(&url, 3).await;
    gateway.shutdown().await;
    s.daemon.stop().await;
    drop(s.dir);
}

#[tokio::test]
async fn sighup_reloads_a_running_gateway() {
    let s = setup("").await;
    // The reload's own log line is held back by the first log level and
    // let through by the second: the level is reloaded too.
    let quiet = "[log]\nlevel = \"warn,switchyard::app=info,switchyard::app::reload=warn\"\n";
    let text = config_text(&s.socket, "", "");
    std::fs::write(&s.file, format!("{quiet}{text}")).expect("write");
    let mut child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&s.file)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn switchyard");
    let pid = child.id();
    // The admin address is in the log; every line is read, so that the
    // child never blocks on a full pipe.
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    // The next log line containing `needle`.
    let line_with = |needle: &'static str| {
        let rx = rx.clone();
        tokio::task::spawn_blocking(move || {
            let rx = rx.lock().expect("lock");
            loop {
                match rx.recv_timeout(Duration::from_secs(60)) {
                    Ok(line) if line.contains(needle) => return Some(line),
                    Ok(_) => continue,
                    Err(_) => return None,
                }
            }
        })
    };
    let started = line_with("admin listener serving").await.expect("join");
    let admin = started
        .as_deref()
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("address=http://"))
        })
        .expect("the admin address is logged")
        .to_owned();
    let scrape = move || {
        let url = format!("http://{admin}/metrics");
        tokio::task::spawn_blocking(move || {
            let (_, _, body) = common::demo::http_get(&url, &[]);
            String::from_utf8_lossy(&body).into_owned()
        })
    };
    let generation = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("switchyard_config_generation "))
            .map(|v| v.trim().to_owned())
    };
    let before = scrape().await.expect("scrape");
    assert_eq!(generation(&before).as_deref(), Some("1"), "{before}");
    std::fs::write(&s.file, &text).expect("write");
    let reloaded = line_with("configuration reloaded");
    let sent = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let mut now = String::new();
    for _ in 0..600 {
        now = scrape().await.expect("scrape");
        if generation(&now).as_deref() == Some("2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(generation(&now).as_deref(), Some("2"), "{now}");
    assert!(
        now.contains("switchyard_config_reloads_total{result=\"ok\"} 1"),
        "{now}"
    );
    let logged = reloaded.await.expect("join");
    assert!(
        logged.is_some_and(|l| l.contains("generation=2")),
        "log level not reloaded"
    );
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let done = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join");
    assert!(done.expect("wait").success());
    s.daemon.stop().await;
}

/// A replaced upstream still in use waits for its users (up to the longest
/// request timeout, here 10 minutes); a shutdown does not wait for that.
#[tokio::test]
async fn shutdown_does_not_wait_for_a_draining_upstream() {
    let s = setup(&format!("reload_token = \"{TOKEN}\"")).await;
    let slow = "request_timeout_ms = 600000\n";
    let text = config_text(&s.socket, &format!("reload_token = \"{TOKEN}\""), "")
        .replace("path = \"/rpc\"\n", &format!("path = \"/rpc\"\n{slow}"));
    std::fs::write(&s.file, &text).expect("write");
    let (gateway, url, admin) = start(&s.file).await;
    wait_connected(&gateway, "daemon").await;
    // Held here, the old `daemon` cannot finish draining.
    let held = gateway.upstream("daemon").expect("upstream");
    let changed = text.replace("backoff_max_ms = 200", "backoff_max_ms = 300");
    std::fs::write(&s.file, changed).expect("write");
    let outcome = reload(&admin, Some(TOKEN), Duration::from_secs(30)).await;
    assert!(matches!(outcome, Ok(Reloaded::Ok(2))), "{outcome:?}");
    echo(&url, 1).await;
    let stopped = tokio::time::timeout(Duration::from_secs(120), gateway.shutdown()).await;
    assert!(stopped.is_ok(), "shutdown waited for the drain");
    drop(held);
    s.daemon.stop().await;
}

#[tokio::test]
async fn a_reload_changing_persistence_is_rejected_and_the_store_serves_on() {
    let s = setup("").await;
    let topics = "\n[[persistent_topics]]\ntopic = \"daemon.orders\"\n";
    let good = std::fs::read_to_string(&s.file).expect("read") + topics;
    std::fs::write(&s.file, &good).expect("write");
    let (gateway, url, _) = start(&s.file).await;
    let mut ws = connect(&url).await;
    let subscribe = r#"{"jsonrpc":"2.0","method":"rpc.subscribe.persistent","params":{"subscription_id":"r","topic":"daemon.orders"},"id":1}"#;
    send(&mut ws, subscribe).await;
    assert_eq!(
        json(&recv(&mut ws).await)["result"]["resumed_from_sequence"],
        0
    );

    let changed = good.replace("daemon.orders", "daemon.other");
    std::fs::write(&s.file, changed).expect("write");
    let problems = gateway.reload().await.expect_err("rejected");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(problems[0].contains("[persistence]"), "{problems:#?}");
    assert!(problems[0].contains("restart"), "{problems:#?}");

    // Other changes still reload, and the subscription is still held.
    let other = format!("{good}\n[log]\nlevel = \"debug\"\n");
    std::fs::write(&s.file, other).expect("write");
    gateway.reload().await.expect("an unchanged store reloads");
    send(&mut ws, &subscribe.replace("\"id\":1", "\"id\":2")).await;
    let again = json(&recv(&mut ws).await);
    assert_eq!(again["id"], 2);
    assert_eq!(again["result"]["resumed_from_sequence"], 0, "{again}");
    gateway.shutdown().await;
    s.daemon.stop().await;
}
