//! `switchyard check` and `run` as an operator meets them, through the real
//! binary: which `SWITCHYARD_*` variables are configuration, secrets never
//! printed, hints for a misspelt key or a missing `--config`, warnings for a
//! listener without a route, and the CLI's dialect names.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// Every secret written into [`SECRETS_TOML`]; none may be printed.
const SECRETS: [&str; 7] = [
    "tok-listener-9f2",
    "uphdr-8f3",
    "tok-reload-7c1",
    "natspw-3b8",
    "wspw-5d4",
    "wsquery-6e0",
    "otlppw-2a7",
];

const SECRETS_TOML: &str = r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
auth_token = "tok-listener-9f2"

[upstreams.remote]
dialect = "jsonrpc-ws"
url = "ws://alice:wspw-5d4@127.0.0.1:1/rpc?token=wsquery-6e0&v=2"

[upstreams.web]
dialect = "jsonrpc-http"
url = "https://127.0.0.1:1/rpc"
headers = { Authorization = "Bearer uphdr-8f3" }

[[routes]]
listener = "public"
upstream = "remote"

[admin]
reload_token = "tok-reload-7c1"

[persistence]
backend = "nats"
nats_url = "nats://bob:natspw-3b8@127.0.0.1:4222"

[tracing]
endpoint = "http://carol:otlppw-2a7@127.0.0.1:4318/v1/traces"
"#;

/// Runs the binary with `args` and extra environment variables.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run switchyard")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `toml` into a temp dir; returns the dir (keep it) and the path.
fn config_file(toml: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("switchyard.toml");
    std::fs::write(&file, toml).expect("write config");
    let path = file.to_str().expect("UTF-8 path").to_owned();
    (dir, path)
}

#[test]
fn stray_switchyard_variables_are_ignored_with_one_warning() {
    let (_dir, file) = config_file(
        "[listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\n\
         [upstreams.d]\ndialect = \"ndjson\"\nsocket = \"/tmp/d.sock\"\n\
         [[routes]]\nlistener = \"public\"\nupstream = \"d\"\n",
    );
    // What Kubernetes sets for a Service named `switchyard`.
    let kubernetes = [
        ("SWITCHYARD_PORT", "tcp://10.0.0.7:8080"),
        ("SWITCHYARD_PORT_8080_TCP_ADDR", "10.0.0.7"),
        ("SWITCHYARD_SERVICE_HOST", "10.0.0.7"),
        ("SWITCHYARD_SERVICE_PORT", "8080"),
    ];
    let out = run(&["check", "--config", &file], &kubernetes);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "one warning for all of them: {stderr}");
    for (name, _) in kubernetes {
        assert!(warnings[0].contains(name), "{name} not named: {stderr}");
    }
    assert!(
        !stderr.contains("10.0.0.7"),
        "a value was printed: {stderr}"
    );

    // A variable with the separator is still configuration, checked.
    let mut env = kubernetes.to_vec();
    env.push(("SWITCHYARD_LISTENERS__PUBLIC__NOPE", "1"));
    let out = run(&["check", "--config", &file], &env);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(
        text(&out.stderr).contains("listeners.public.nope"),
        "{out:?}"
    );
}

#[test]
fn a_listener_named_with_capitals_is_set_from_the_environment() {
    let (_dir, file) = config_file(
        "[listeners.Public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\n\
         [upstreams.Daemon]\ndialect = \"ndjson\"\nsocket = \"/tmp/d.sock\"\n\
         [[routes]]\nlistener = \"Public\"\nupstream = \"Daemon\"\n",
    );
    let env = [
        ("SWITCHYARD_LISTENERS__PUBLIC__PATH", "/from-env"),
        ("SWITCHYARD_UPSTREAMS__DAEMON__POOL_SIZE", "7"),
    ];
    let out = run(&["check", "--config", &file], &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed: toml::Value = toml::from_str(&text(&out.stdout)).expect("check prints TOML");
    let listeners = printed["listeners"].as_table().expect("listeners");
    assert_eq!(listeners.keys().collect::<Vec<_>>(), ["Public"]);
    assert_eq!(listeners["Public"]["path"].as_str(), Some("/from-env"));
    let upstreams = printed["upstreams"].as_table().expect("upstreams");
    assert_eq!(upstreams.keys().collect::<Vec<_>>(), ["Daemon"]);
    assert_eq!(upstreams["Daemon"]["pool_size"].as_integer(), Some(7));
}

#[test]
fn check_never_prints_a_secret() {
    let (_dir, file) = config_file(SECRETS_TOML);
    let out = run(&["check", "--config", &file], &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for secret in SECRETS {
        assert!(!stdout.contains(secret), "{secret} printed:\n{stdout}");
    }
    // Still a useful picture: which server, and that a secret is set.
    let printed: toml::Value = toml::from_str(&stdout).expect("check prints TOML");
    assert_eq!(
        printed["upstreams"]["remote"]["url"].as_str(),
        Some("ws://***:***@127.0.0.1:1/rpc?token=***&v=2")
    );
    assert_eq!(
        printed["listeners"]["public"]["auth_token"].as_str(),
        Some("***")
    );
    assert_eq!(
        printed["upstreams"]["web"]["headers"]["Authorization"].as_str(),
        Some("***")
    );
    assert_eq!(printed["admin"]["reload_token"].as_str(), Some("***"));
    assert_eq!(
        printed["persistence"]["nats_url"].as_str(),
        Some("nats://***:***@127.0.0.1:4222")
    );

    // Nor do the problems: a secret of the wrong type, URLs that are wrong.
    let (_bad_dir, bad) = config_file(
        &SECRETS_TOML
            .replace("ws://alice", "http://alice")
            .replace("nats://bob", "http://bob")
            .replace("http://carol", "ftp://carol"),
    );
    let env = [("SWITCHYARD_ADMIN__RELOAD_TOKEN", "4242424242")];
    let out = run(&["check", "--config", &bad], &env);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    for needle in [
        "admin.reload_token",
        "upstreams.remote.url",
        "nats_url",
        "endpoint",
    ] {
        assert!(stderr.contains(needle), "{needle} not reported:\n{stderr}");
    }
    for secret in SECRETS.iter().chain(&["4242424242"]) {
        assert!(!stderr.contains(secret), "{secret} printed:\n{stderr}");
    }
}

#[test]
fn a_misspelt_key_or_name_gets_a_did_you_mean() {
    let (_dir, file) = config_file(
        "[listeners.public]\ndialect = \"jsonrpc-ws\"\nadress = \"127.0.0.1:0\"\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"/tmp/d.sock\"\nzzzz = 1\n\
         [[routes]]\nlistener = \"publc\"\nupstream = \"daemon\"\n",
    );
    let out = run(&["check", "--config", &file], &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    let line = |needle: &str| -> &str {
        stderr
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?}:\n{stderr}"))
    };
    assert!(
        line("adress").contains("did you mean \"address\"?"),
        "{stderr}"
    );
    assert!(
        line("\"publc\"").contains("did you mean \"public\"?"),
        "{stderr}"
    );
    // Nothing close: no guess.
    assert!(!line("zzzz").contains("did you mean"), "{stderr}");
}

#[test]
fn run_without_config_says_so_and_shows_the_demo() {
    for sub in ["run", "check"] {
        let out = run(&[sub], &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{sub}: {stderr}");
        assert!(
            stderr.contains("no --config FILE was given"),
            "{sub}: {stderr}"
        );
        assert!(stderr.contains("switchyard demo"), "{sub}: {stderr}");
    }
}

#[test]
fn a_listener_without_a_route_is_a_warning() {
    let (_dir, file) = config_file(
        "[listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\n\
         [listeners.lonely]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/x\"\n\
         [upstreams.d]\ndialect = \"ndjson\"\nsocket = \"/tmp/d.sock\"\n\
         [[routes]]\nlistener = \"public\"\nupstream = \"d\"\n",
    );
    let out = run(&["check", "--config", &file], &[]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("listeners.lonely"), "{stderr}");
    assert!(warnings[0].contains("no route matched"), "{stderr}");
}

#[test]
fn the_daemon_takes_the_dialect_names_of_the_configuration() {
    // An address in use: a daemon that parsed its arguments fails to bind
    // (exit 1) at once; a refused argument is clap's exit 2.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    for dialect in ["jsonrpc-ws", "holon-rpc", "jsonrpc", "holon"] {
        let out = run(
            &["daemon", "--ws-listen", &addr, "--ws-dialect", dialect],
            &[],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{dialect}: {stderr}");
        assert!(!stderr.contains("invalid value"), "{dialect}: {stderr}");
    }
}
