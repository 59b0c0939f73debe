//! The binary: the demo prints working endpoints, `call` reaches them, and
//! an invalid configuration exits 64 listing every problem, before any
//! socket is opened.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

#[test]
fn demo_prints_endpoints_that_work_and_stops_on_sigterm() {
    let mut demo = Command::new(BIN)
        .args(["demo", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn demo");
    let started = Instant::now();
    let stdout = demo.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut ws_url = None;
    let mut unix_url = None;
    for line in lines.by_ref() {
        let line = line.expect("line");
        for word in line.split_whitespace() {
            if word.starts_with("ws://") && ws_url.is_none() {
                ws_url = Some(word.to_owned());
            }
            if word.starts_with("unix://") && unix_url.is_none() {
                unix_url = Some(word.to_owned());
            }
        }
        if line.contains("Ctrl-C") {
            break;
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "demo too slow to start"
    );
    let ws_url = ws_url.expect("demo printed a ws:// endpoint");
    let unix_url = unix_url.expect("demo printed the daemon socket");

    let out = Command::new(BIN)
        .args(["call", &ws_url, "subtract", "[42,23]"])
        .output()
        .expect("call");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"jsonrpc":"2.0","result":19,"id":1}"#
    );
    let out = Command::new(BIN)
        .args(["call", &unix_url, "get_data"])
        .output()
        .expect("call");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"jsonrpc":"2.0","result":["hello",5],"id":1}"#
    );

    let status = Command::new("kill")
        .args(["-TERM", &demo.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit =
        wait_with_timeout(&mut demo, Duration::from_secs(10)).expect("demo exits on SIGTERM");
    assert!(exit.success(), "{exit:?}");
}

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
        let tasks = std::fs::read_dir(format!("/proc/{}/task", gw.id())).expect("/proc");
        let named_workers = tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            // tokio's default thread name (no blocking threads run yet).
            .filter(|name| name.trim() == "tokio-rt-worker")
            .count();
        let _ = gw.kill();
        let _ = gw.wait();
        assert_eq!(named_workers, workers, "runtime worker threads");
    }
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
        &["demo", "--listen", "127.0.0.1:0"],
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
