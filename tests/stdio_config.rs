//! Configuration of process upstreams (`command`, `env`, `cwd`,
//! `max_processes`, `stop_grace_ms`), through the public API only.

use std::time::Duration;

use switchyard::config::raw::RawConfig;
use switchyard::config::{Config, UpstreamMode, UpstreamTarget};

/// A listener and one upstream whose table is `upstream`.
fn with_upstream(upstream: &str) -> String {
    format!(
        "[listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\n\n\
         [upstreams.tool]\n{upstream}\n\n\
         [[routes]]\nlistener = \"public\"\nupstream = \"tool\"\n"
    )
}

fn problems(upstream: &str) -> Vec<String> {
    let text = with_upstream(upstream);
    match Config::from_toml(&text) {
        Ok(_) => panic!("expected an invalid configuration:\n{text}"),
        Err(e) => e.problems().to_vec(),
    }
}

fn assert_has(problems: &[String], needle: &str) {
    assert!(
        problems.iter().any(|p| p.contains(needle)),
        "no problem mentions {needle:?}; got:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_command_upstream_is_argv_env_and_cwd_with_documented_defaults() {
    let text = with_upstream(
        "dialect = \"ndjson\"\ncommand = [\"/usr/bin/tool\", \"--stdio\", \"a b\"]\n\
         env = { TOOL_TOKEN = \"s3cret\" }\ncwd = \"/srv/tool\"\nmode = \"per-client\"\n",
    );
    let config = Config::from_toml(&text).expect("valid");
    let u = config.upstream("tool").expect("tool");
    let UpstreamTarget::Process(spec) = &u.target else {
        panic!("not a process target: {:?}", u.target);
    };
    assert_eq!(spec.argv, ["/usr/bin/tool", "--stdio", "a b"]);
    assert_eq!(
        spec.env.get("TOOL_TOKEN").map(String::as_str),
        Some("s3cret")
    );
    assert_eq!(spec.cwd.as_deref(), Some(std::path::Path::new("/srv/tool")));
    assert_eq!(u.mode, UpstreamMode::PerClient);
    assert_eq!(u.max_processes.get(), 64, "documented default");
    assert_eq!(
        u.stop_grace,
        Duration::from_millis(1000),
        "documented default"
    );
}

#[test]
fn exactly_one_of_socket_and_command_and_no_command_on_websocket() {
    let both = problems("dialect = \"ndjson\"\nsocket = \"/tmp/x.sock\"\ncommand = [\"tool\"]\n");
    assert_has(
        &both,
        "upstreams.tool.command: cannot be combined with socket",
    );
    let neither = problems("dialect = \"ndjson\"\n");
    assert_has(
        &neither,
        "upstreams.tool.socket: required for dialect ndjson",
    );
    let ws =
        problems("dialect = \"jsonrpc-ws\"\nurl = \"ws://127.0.0.1:1/\"\ncommand = [\"tool\"]\n");
    assert_has(
        &ws,
        "upstreams.tool.command: not allowed for dialect jsonrpc-ws",
    );
}

#[test]
fn every_problem_of_a_command_upstream_is_reported() {
    let all =
        problems("dialect = \"ndjson\"\ncommand = []\nmax_processes = 0\nstop_grace_ms = 0\n");
    assert_has(&all, "upstreams.tool.command: must name a program");
    assert_has(&all, "upstreams.tool.max_processes: must be greater than 0");
    let more = problems(
        "dialect = \"ndjson\"\ncommand = [\"\"]\nenv = { \"A=B\" = \"x\" }\ncwd = \"\"\n\
         streaming_methods = [\"Subscribe\"]\npool_size = 3\nmax_processes = 2\nstop_grace_ms = 0\n",
    );
    assert_has(&more, "upstreams.tool.command[0]: must not be empty");
    assert_has(&more, "upstreams.tool.env.A=B: names must be non-empty");
    assert_has(&more, "upstreams.tool.cwd: must not be empty");
    assert_has(
        &more,
        "upstreams.tool.streaming_methods: not supported for command upstreams",
    );
    assert_has(
        &more,
        "upstreams.tool.pool_size: must be <= max_processes (2)",
    );
    assert_has(
        &more,
        "upstreams.tool.stop_grace_ms: must be greater than 0",
    );
    let stray = problems(
        "dialect = \"ndjson\"\nsocket = \"/tmp/x.sock\"\nenv = { A = \"1\" }\ncwd = \"/\"\n",
    );
    assert_has(
        &stray,
        "upstreams.tool.env: applies to command upstreams only",
    );
    assert_has(
        &stray,
        "upstreams.tool.cwd: applies to command upstreams only",
    );
}

/// `env` values are where API keys go: `switchyard check` never prints them.
#[test]
fn env_values_are_hidden_when_the_configuration_is_shown() {
    let text = with_upstream(
        "dialect = \"ndjson\"\ncommand = [\"tool\"]\nenv = { TOOL_TOKEN = \"s3cret\" }\n",
    );
    let printed = RawConfig::from_toml(&text)
        .expect("parses")
        .to_toml_string();
    assert!(!printed.contains("s3cret"), "printed:\n{printed}");
    assert!(printed.contains("TOOL_TOKEN"), "printed:\n{printed}");
}

#[test]
fn the_example_file_has_a_process_upstream() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/switchyard.example.toml"
    );
    let text = std::fs::read_to_string(path).expect("example file");
    let config = Config::from_toml(&text).expect("example config is valid");
    let tool = config.upstream("tool").expect("tool upstream");
    let UpstreamTarget::Process(spec) = &tool.target else {
        panic!("not a process target: {:?}", tool.target);
    };
    assert_eq!(spec.argv, ["switchyard", "daemon", "--stdio"]);
    assert_eq!(tool.mode, UpstreamMode::PerClient);
}
