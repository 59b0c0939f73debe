//! The binary: the demo prints working endpoints and commands, and
//! an invalid configuration exits 64 listing every problem, before any
//! socket is opened.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::demo::{http_get, shell_words, Demo};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

#[test]
fn demo_prints_every_endpoint_and_each_answers() {
    // The WebSocket port asked for is taken: the demo falls back to a free
    // one and says so.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_addr = taken.local_addr().expect("addr").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_arg = dir.path().to_str().expect("UTF-8 path");
    let demo = Demo::start(
        BIN,
        &[
            "--listen",
            &taken_addr,
            "--admin",
            "127.0.0.1:0",
            "--dir",
            dir_arg,
        ],
    );
    let all = demo.lines.join("\n");
    assert!(
        all.contains(&format!("{taken_addr} is taken")),
        "no fallback note:\n{all}"
    );
    for label in [
        "JSON-RPC 2.0 over WebSocket",
        "holon-rpc over WebSocket",
        "Sideband (SBP) over WebSocket",
        "NDJSON over a Unix socket",
        "reference daemon",
        "status page",
        "Prometheus metrics",
        "readiness",
    ] {
        let url = demo.endpoint(label);
        assert!(
            !url.contains(&taken_addr),
            "{label} on the taken port: {url}"
        );
    }

    // Every printed `switchyard call` command works as pasted, and together
    // they reach every WebSocket and Unix endpoint.
    let mut reached = Vec::new();
    for command in demo
        .commands
        .iter()
        .filter(|c| c.starts_with("switchyard call"))
    {
        let words = shell_words(command);
        let out = Command::new(BIN)
            .args(&words[1..])
            .output()
            .expect("run call");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("result"),
            "{command}: {out:?}"
        );
        reached.extend(words.into_iter().filter(|w| w.contains("://")));
        println!("{command}\n  {}", stdout.trim());
    }
    for (label, url) in &demo.endpoints {
        if url.starts_with("ws://") || url.starts_with("unix://") {
            assert!(
                reached.contains(url),
                "no printed command reaches {label} {url}"
            );
        }
    }
    let answer = |command_part: &str| {
        let command = demo
            .commands
            .iter()
            .find(|c| c.contains(command_part))
            .unwrap_or_else(|| panic!("no command with {command_part:?}"));
        let words = shell_words(command);
        let out = Command::new(BIN).args(&words[1..]).output().expect("call");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(
        answer("subtract"),
        r#"{"jsonrpc":"2.0","result":19,"id":1}"#
    );
    assert_eq!(
        answer("--holon"),
        r#"{"jsonrpc":"2.0","result":{"hello":"holon"},"id":"1"}"#
    );
    let sideband: serde_json::Value =
        serde_json::from_str(&answer("--sideband")).expect("a JSON envelope");
    assert_eq!(sideband["t"], "R");
    assert_eq!(sideband["result"], serde_json::json!({"text": "hi"}));
    assert_eq!(
        answer("get_data"),
        r#"{"jsonrpc":"2.0","result":["hello",5],"id":1}"#
    );

    // The admin endpoints and the playground answer; the printed curl
    // commands name them.
    let (status, _, body) = http_get(demo.endpoint("status page"), &[]);
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("id=\"listeners\""));
    let (status, _, body) = http_get(demo.endpoint("Prometheus metrics"), &[]);
    assert_eq!(status, 200);
    let metrics = String::from_utf8_lossy(&body).into_owned();
    for listener in ["jsonrpc", "holon", "sideband", "ndjson"] {
        let ok = format!("listener=\"{listener}\",outcome=\"ok\"");
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("switchyard_requests_total") && l.contains(&ok)),
            "no ok request counted on {listener}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let (status, _, body) = http_get(demo.endpoint("readiness"), &[]);
        if status == 200 || Instant::now() > deadline {
            break (status, String::from_utf8_lossy(&body).into_owned());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(ready, (200, "ready\n".to_owned()));
    for command in demo
        .commands
        .iter()
        .filter(|c| c.starts_with("curl -s http"))
    {
        let url = shell_words(command)[2].clone();
        assert_eq!(http_get(&url, &[]).0, 200, "{command}");
    }
    // The JSON-RPC over HTTP line works as pasted, with the real curl.
    let post = demo
        .commands
        .iter()
        .find(|c| c.starts_with("curl -s -H"))
        .expect("a curl line for the HTTP endpoint");
    let words = shell_words(post);
    let out = Command::new(common::curl::require_curl())
        .args(&words[1..])
        .output()
        .expect("run curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"jsonrpc":"2.0","result":19,"id":1}"#,
        "{post}: {out:?}"
    );
    assert!(
        words
            .last()
            .is_some_and(|url| *url == demo.endpoint("over HTTP")),
        "{post}"
    );
    // The upstream leg the playground shows: the daemon's lines, with the
    // gateway's ids.
    let admin = demo.playground.trim_end_matches("/playground");
    let (status, _, body) = http_get(&format!("{admin}/demo/upstream?after=0"), &[]);
    assert_eq!(status, 200);
    let tap: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    let lines = tap["lines"].as_array().expect("lines");
    assert!(
        lines.iter().any(|l| l["dir"] == "in"
            && l["text"]
                .as_str()
                .is_some_and(|t| t.contains("\"subtract\""))),
        "{tap:#}"
    );
    assert!(lines.iter().any(|l| l["dir"] == "out"), "{tap:#}");
    let (status, headers, body) = http_get(&demo.playground, &[]);
    assert_eq!(status, 200, "{}", demo.playground);
    assert!(headers
        .iter()
        .any(|(n, v)| n == "content-type" && v.starts_with("text/html")));
    assert!(String::from_utf8_lossy(&body).contains("/playground/app.js"));
    drop(taken);
    demo.stop();
}

#[test]
fn demo_defaults_to_fixed_ports() {
    let out = Command::new(BIN)
        .args(["demo", "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("127.0.0.1:8080"), "{help}");
    assert!(help.contains("127.0.0.1:9090"), "{help}");
}

#[test]
fn invalid_config_exits_64_listing_every_problem_without_binding() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("never.sock");
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        format!(
            r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
bogus_key = 1

[listeners.local]
dialect = "ndjson"
socket = "{}"

[upstreams.daemon]
dialect = "smoke-signals"
socket = "/tmp/x.sock"
"#,
            sock.display()
        ),
    )
    .expect("write");
    for sub in ["check", "run"] {
        let out = Command::new(BIN)
            .args([sub, "--config"])
            .arg(&file)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(64), "{sub}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The unknown key does not hide the semantic problem elsewhere.
        for needle in ["bogus_key", "smoke-signals"] {
            assert!(
                stderr.contains(needle),
                "{sub}: missing {needle:?} in {stderr}"
            );
        }
        assert!(!sock.exists(), "{sub} created a socket before validating");
    }

    // Semantic problems are all listed together.
    std::fs::write(
        &file,
        r#"
[listeners.public]
dialect = "jsonrpc-ws"
max_batch_items = 0

[upstreams.daemon]
dialect = "smoke-signals"

[[routes]]
listener = "public"
upstream = "nowhere"
"#,
    )
    .expect("write");
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "listeners.public.address",
        "max_batch_items",
        "smoke-signals",
        "nowhere",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in:\n{stderr}");
    }
}

#[test]
fn check_prints_the_effective_config() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/switchyard.example.toml"
    );
    let out = Command::new(BIN)
        .args(["check", "--config", example])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let parsed: toml::Value = toml::from_str(&stdout).expect("check prints TOML");
    assert!(parsed.get("listeners").is_some(), "{stdout}");
}

#[test]
fn run_sizes_its_runtime_from_gateway_worker_threads() {
    let dir = tempfile::tempdir().expect("tempdir");
    for workers in [1usize, 3] {
        let config = dir.path().join(format!("w{workers}.toml"));
        let socket = dir.path().join(format!("w{workers}.sock"));
        std::fs::write(
            &config,
            format!(
                "[gateway]\nworker_threads = {workers}\n\n\
                 [listeners.main]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
                 [upstreams.d]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
                 [[routes]]\nlistener = \"main\"\nupstream = \"d\"\n",
                socket.display(),
                dir.path().join("nobody.sock").display(),
            ),
        )
        .expect("write config");
        let mut gw = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn run");
        // Serving once its listener socket exists.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(socket.exists(), "the gateway never listened");
        // A new thread takes its name a moment after it exists: on a busy
        // machine, count again until the number settles (or time is up).
        let count = || {
            std::fs::read_dir(format!("/proc/{}/task", gw.id()))
                .expect("/proc")
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                // tokio's default thread name (no blocking threads run yet).
                .filter(|name| name.trim() == "tokio-rt-worker")
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut named_workers = count();
        while named_workers != workers && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            named_workers = count();
        }
        let _ = gw.kill();
        let _ = gw.wait();
        assert_eq!(named_workers, workers, "runtime worker threads");
    }
}

/// Waits for `child` to exit, at most `within`; kills it after that.
fn wait_with_timeout(
    child: &mut std::process::Child,
    within: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Do not leave a stray process behind a failed assertion.
    let _ = child.kill();
    None
}

/// A stdout whose reader is already gone (as after `| head`): a socket whose
/// peer end is closed, so every write fails with EPIPE.
fn closed_stdout() -> Stdio {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    drop(ours);
    Stdio::from(std::os::fd::OwnedFd::from(theirs))
}

#[test]
fn no_command_panics_on_a_closed_stdout() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/switchyard.example.toml"
    );
    let runs: [&[&str]; 4] = [
        &["check", "--config", example],
        &["--help"],
        &["--version"],
        &["demo", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"],
    ];
    for args in runs {
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(closed_stdout())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        // The demo stops once it cannot show its endpoints.
        let status = wait_with_timeout(&mut child, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{args:?} did not exit with its stdout closed"));
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
            .expect("read stderr");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_ne!(status.code(), Some(101), "{args:?}: {stderr}");
        assert!(status.success(), "{args:?}: {status:?} {stderr}");
    }
}

/// `switchyard run` with one JSON-RPC listener that requires `token` and
/// no upstream, started with `SWITCHYARD_TOKEN` in its environment (the
/// configuration ignores it). Returns the child and the listener's URL.
fn gateway_requiring(dir: &std::path::Path, token: &str) -> (std::process::Child, String) {
    let config = dir.join("switchyard.toml");
    std::fs::write(
        &config,
        format!(
            "[listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\n\
             path = \"/rpc\"\nauth_token = \"{token}\"\nallow_topics = [\"a.>\"]\n"
        ),
    )
    .expect("write config");
    let mut child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&config)
        .env("SWITCHYARD_TOKEN", token)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn switchyard run");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
            let Ok(line) = line else { break };
            all.push_str(&line);
            all.push('\n');
            if let Some(start) = line.find("ws://") {
                let url = line[start..].trim_end_matches('"').to_owned();
                // The test may have given up waiting.
                let _ = tx.send(Ok(url));
            }
        }
        let _ = tx.send(Err(all));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(url)) => (child, url),
        other => {
            let _ = child.kill();
            panic!("the gateway did not start: {other:?}");
        }
    }
}

/// Runs `switchyard call ARGS` without `SWITCHYARD_TOKEN` unless given;
/// returns its exit code, stdout and stderr.
fn call(args: &[&str], env_token: Option<&str>) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("call").args(args).env_remove("SWITCHYARD_TOKEN");
    if let Some(token) = env_token {
        cmd.env("SWITCHYARD_TOKEN", token);
    }
    let out = cmd.output().expect("run switchyard call");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn call_sends_its_token_as_a_bearer_header_and_exits_3_on_an_error_reply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut gw, url) = gateway_requiring(dir.path(), "s3cret");
    let subscribe = [url.as_str(), "rpc.subscribe", r#"{"topic":"a.b"}"#];

    // No token: the upgrade is refused; no reply, exit 1.
    let (code, stdout, stderr) = call(&subscribe, None);
    assert_eq!(code, Some(1), "{stdout} {stderr}");
    assert!(stderr.contains("401"), "{stderr}");

    // The token from --token, or from $SWITCHYARD_TOKEN; not in the URL.
    let with_token = [&subscribe[..], &["--token", "s3cret"]].concat();
    let (code, stdout, stderr) = call(&with_token, None);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(r#""subscribed":true"#), "{stdout}");
    let (code, stdout, stderr) = call(&subscribe, Some("s3cret"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(r#""subscribed":true"#), "{stdout}");

    // An error reply is printed, and the exit status says so.
    let (code, stdout, stderr) = call(&[&url, "no.such.method", "--token", "s3cret"], None);
    assert_eq!(code, Some(3), "{stdout} {stderr}");
    assert!(stdout.contains("-32601"), "{stdout}");

    let _ = gw.kill();
    let _ = gw.wait();
}
