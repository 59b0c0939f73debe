//! Configuration loading and validation, through the public API only.

use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

use switchyard::config::raw::RawConfig;
use switchyard::config::{
    Config, ConfigError, ListenAddr, LogFormat, NotificationPolicy, UpstreamMode, UpstreamTarget,
};
use switchyard::dialect::Dialect;

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/config/switchyard.example.toml"
);

const MINIMAL: &str = r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"

[upstreams.daemon]
dialect = "ndjson"
socket = "/tmp/d.sock"

[[routes]]
listener = "public"
upstream = "daemon"
"#;

fn problems(text: &str) -> Vec<String> {
    match Config::from_toml(text) {
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
fn example_file_loads_and_validates() {
    let text = std::fs::read_to_string(EXAMPLE).expect("example file is readable");
    let config = Config::from_toml(&text).expect("example config is valid");

    let names: Vec<_> = config.listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        ["http", "local", "public", "web"],
        "listeners come in name order"
    );
    let public = &config.listeners[2];
    assert_eq!(public.dialect, Dialect::JsonRpc);
    assert_eq!(
        public.addr,
        ListenAddr::Ws {
            addr: "127.0.0.1:8080".parse().expect("valid address"),
            path: "/rpc".to_owned(),
        }
    );
    assert_eq!(public.routes.default.as_deref(), Some("daemon"));
    assert_eq!(
        public
            .routes
            .upstream_for("admin.reload")
            .map(String::as_str),
        Some("admin")
    );
    assert_eq!(
        public.routes.upstream_for("Status").map(String::as_str),
        Some("daemon")
    );

    let http = &config.listeners[0];
    assert_eq!(http.dialect, Dialect::JsonRpcHttp);
    assert_eq!(http.routes.default.as_deref(), Some("daemon"));

    let local = &config.listeners[1];
    assert_eq!(
        local.addr,
        ListenAddr::Unix {
            path: "/tmp/switchyard.sock".into(),
            mode: 0o600,
        }
    );
    let daemon = config.upstream("daemon").expect("daemon upstream");
    assert_eq!(daemon.notifications, NotificationPolicy::AsRequest);
    assert!(daemon.ordered_replies);
    assert_eq!(
        config.upstream("admin").map(|u| &u.target),
        Some(&UpstreamTarget::Ws("ws://127.0.0.1:9000/rpc".to_owned()))
    );
}

#[test]
fn effective_config_prints_and_reloads() {
    let text = std::fs::read_to_string(EXAMPLE).expect("example file is readable");
    let printed = RawConfig::from_toml(&text)
        .expect("example parses")
        .to_toml_string();
    assert!(printed.contains("[[routes]]"), "printed:\n{printed}");
    assert!(
        printed.contains("ordered_replies = true"),
        "hld applied:\n{printed}"
    );
    let again = RawConfig::from_toml(&printed).expect("printed config parses");
    assert_eq!(again.to_toml_string(), printed, "printing is idempotent");
    let config = Config::from_toml(&printed).expect("printed config is valid");
    let daemon = config.upstream("daemon").expect("daemon upstream");
    assert_eq!(daemon.streaming_methods, ["Subscribe"]);
}

#[test]
fn defaults_are_as_documented() {
    let config = Config::from_toml(MINIMAL).expect("minimal config is valid");
    assert_eq!(config.gateway.shutdown_grace, Duration::from_millis(5000));
    assert_eq!(config.log.format, LogFormat::Text);
    assert_eq!(config.log.level, "info");

    let l = &config.listeners[0];
    assert_eq!(
        l.addr,
        ListenAddr::Ws {
            addr: "127.0.0.1:0".parse().expect("valid address"),
            path: "/".to_owned(),
        }
    );
    assert_eq!(l.max_message_bytes, 1_048_576);
    assert_eq!(l.max_batch_items, 100);
    assert_eq!(l.max_in_flight, 256);
    assert_eq!(l.outbox_capacity, 1024);
    assert_eq!(l.outbox_max_bytes, 4 << 20);
    assert_eq!(l.ping_interval, Duration::from_secs(30));
    assert_eq!(l.pong_timeout, Duration::from_secs(30));
    assert_eq!(l.request_timeout, Duration::from_secs(30));
    assert!(l.answer_ping_notification);

    let u = &config.upstreams[0];
    assert_eq!(u.target, UpstreamTarget::Unix("/tmp/d.sock".into()));
    assert_eq!(u.mode, UpstreamMode::Shared);
    assert_eq!(u.pool_size, NonZeroUsize::new(2).expect("2 > 0"));
    assert_eq!(u.max_in_flight_per_connection.get(), 4096);
    assert_eq!(u.max_pending.get(), 4096);
    assert_eq!(u.max_queued, 65_536);
    assert_eq!(u.queue_timeout, Duration::from_secs(10));
    assert_eq!(u.max_request_bytes, 1_048_576);
    assert_eq!(u.max_response_bytes, 16_777_216);
    assert_eq!(u.connect_timeout, Duration::from_millis(2000));
    assert_eq!(u.backoff_initial, Duration::from_millis(500));
    assert_eq!(u.backoff_max, Duration::from_millis(30_000));
    assert_eq!(u.notifications, NotificationPolicy::Forward);
    assert!(!u.ordered_replies && !u.fill_empty_params && !u.accepts_batches && !u.required);
    assert!(u.streaming_methods.is_empty());
}

#[test]
fn ndjson_listener_defaults_mode_0600_and_parses_octal() {
    let text = r#"
        [listeners.a]
        dialect = "ndjson"
        socket = "/tmp/a.sock"
        [listeners.b]
        dialect = "ndjson"
        socket = "/tmp/b.sock"
        socket_mode = "0660"
    "#;
    let config = Config::from_toml(text).expect("valid");
    let modes: Vec<_> = config
        .listeners
        .iter()
        .map(|l| match &l.addr {
            ListenAddr::Unix { mode, .. } => *mode,
            other => panic!("unexpected address {other:?}"),
        })
        .collect();
    assert_eq!(modes, [0o600, 0o660]);
    assert_eq!(config.listeners[0].routes.default, None);
    assert!(config.listeners[0].routes.prefixes.is_empty());
}

#[test]
fn unknown_keys_are_rejected_top_level_and_nested() {
    let top = format!("bogus = 1\n{MINIMAL}");
    let err = Config::from_toml(&top).expect_err("unknown top-level key");
    assert!(matches!(err, ConfigError::Load(_)), "{err:?}");
    assert!(err.to_string().contains("bogus"), "{err}");

    let nested = MINIMAL.replace(
        "address = \"127.0.0.1:0\"",
        "address = \"127.0.0.1:0\"\nmax_mesage_bytes = 10",
    );
    let err = Config::from_toml(&nested).expect_err("unknown listener key");
    assert!(err.to_string().contains("max_mesage_bytes"), "{err}");

    let section = format!("{MINIMAL}\n[gateway]\nshutdown_grace = 1\n");
    let err = Config::from_toml(&section).expect_err("unknown gateway key");
    assert!(err.to_string().contains("shutdown_grace"), "{err}");

    let route = format!(
        "{MINIMAL}\n[[routes]]\nlistener = \"public\"\nupstream = \"daemon\"\nprefix = \"a.\"\n"
    );
    let err = Config::from_toml(&route).expect_err("unknown route key");
    assert!(err.to_string().contains("prefix"), "{err}");
}

#[test]
fn load_errors_in_different_sections_are_all_reported() {
    let text = r#"
        [log]
        format = 1
        [listeners.a]
        dialect = "ndjson"
        foo = 1
        [listeners.b]
        max_in_flight = "many"
        [upstreams.u]
        pool_size = -3
        [[routes]]
        listener = "a"
        via = "x"
    "#;
    let err = Config::from_toml(text).expect_err("invalid");
    assert!(matches!(err, ConfigError::Load(_)), "{err:?}");
    let p = err.problems();
    for needle in [
        "log.format",
        "listeners.a.foo",
        "listeners.b.max_in_flight",
        "upstreams.u.pool_size",
        "via",
    ] {
        assert_has(p, needle);
    }
}

#[test]
fn wrong_types_are_load_errors() {
    let text = MINIMAL.replace(
        "address = \"127.0.0.1:0\"",
        "address = \"127.0.0.1:0\"\nmax_in_flight = -1",
    );
    let err = Config::from_toml(&text).expect_err("negative size");
    assert!(matches!(err, ConfigError::Load(_)), "{err:?}");
    assert!(err.to_string().contains("max_in_flight"), "{err}");
}

#[test]
fn every_problem_is_reported() {
    let long = format!("/tmp/{}.sock", "x".repeat(120));
    let text = format!(
        r#"
        [log]
        format = "xml"

        [listeners.public]
        dialect = "jsonrpc-ws"
        socket = "/tmp/p.sock"
        path = "rpc"
        max_in_flight = 0

        [listeners.local]
        dialect = "ndjson"
        socket = "{long}"
        socket_mode = "999"

        [listeners.weird]
        dialect = "grpc"

        [upstreams.daemon]
        dialect = "ndjson"
        pool_size = 0
        connect_timeout_ms = 0
        mode = "sometimes"

        [upstreams.remote]
        dialect = "sideband"

        [upstreams.web]
        dialect = "holon-rpc"
        url = "http://127.0.0.1:9000/"

        [[routes]]
        listener = "public"
        upstream = "nowhere"

        [[routes]]
        listener = "ghost"
        upstream = "daemon"

        [[routes]]
        listener = "local"
        upstream = "remote"

        [[routes]]
        listener = "local"
        upstream = "web"

        [[routes]]
        listener = "local"
        upstream = "web"
        method_prefix = "a."

        [[routes]]
        listener = "local"
        upstream = "remote"
        method_prefix = "a."
    "#
    );
    let err = Config::from_toml(&text).expect_err("invalid");
    assert!(matches!(err, ConfigError::Invalid(_)), "{err:?}");
    let p = err.problems();
    for needle in [
        "log.format: unknown value \"xml\"",
        "listeners.public.address: required for dialect jsonrpc-ws",
        "listeners.public.socket: not allowed for dialect jsonrpc-ws",
        "listeners.public.path: must start with \"/\"",
        "listeners.public.max_in_flight: must be greater than 0",
        "listeners.local.socket: ",
        "sun_path",
        "listeners.local.socket_mode: expected an octal mode",
        "listeners.weird.dialect: unknown dialect \"grpc\"",
        "upstreams.daemon.socket: required for dialect ndjson",
        "upstreams.daemon.pool_size: must be greater than 0",
        "upstreams.daemon.connect_timeout_ms: must be greater than 0",
        "upstreams.daemon.mode: unknown value \"sometimes\"",
        "upstreams.remote.url: required for dialect sideband",
        "upstreams.web.url: must start with ws:// or wss://",
        "routes[0].upstream: unknown upstream \"nowhere\"",
        "routes[1].listener: unknown listener \"ghost\"",
        "routes[3]: listener \"local\" already has a default route",
        "routes[5].method_prefix: duplicate prefix \"a.\"",
    ] {
        assert_has(p, needle);
    }
    // Display lists them one per line.
    assert_eq!(err.to_string().lines().count(), p.len());
}

#[test]
fn at_least_one_listener_is_required() {
    assert_has(
        &problems(""),
        "listeners: at least one listener is required",
    );
}

#[test]
fn the_outbox_byte_budget_is_above_zero_and_holds_a_maximal_message() {
    let with = |keys: &str| {
        MINIMAL.replace(
            "address = \"127.0.0.1:0\"\n",
            &format!("address = \"127.0.0.1:0\"\n{keys}\n"),
        )
    };
    assert_has(
        &problems(&with("outbox_max_bytes = 0")),
        "listeners.public.outbox_max_bytes: must be greater than 0",
    );
    // Below max_message_bytes (default 1 MiB): refused, saying why.
    assert_has(
        &problems(&with("outbox_max_bytes = 65536")),
        "listeners.public.outbox_max_bytes: must be at least max_message_bytes (1048576) (got 65536)",
    );
    // Equal to it, or with max_message_bytes lowered to fit: accepted.
    let config = Config::from_toml(&with("outbox_max_bytes = 1048576")).expect("valid");
    assert_eq!(config.listeners[0].outbox_max_bytes, 1 << 20);
    let config = Config::from_toml(&with("outbox_max_bytes = 65536\nmax_message_bytes = 65536"))
        .expect("valid");
    assert_eq!(config.listeners[0].outbox_max_bytes, 65536);
}

#[test]
fn listener_keys_must_fit_the_dialect() {
    let text = r#"
        [listeners.local]
        dialect = "ndjson"
        address = "127.0.0.1:1"
        path = "/x"
    "#;
    let p = problems(text);
    assert_has(
        &p,
        "listeners.local.address: not allowed for dialect ndjson",
    );
    assert_has(&p, "listeners.local.path: not allowed for dialect ndjson");
    assert_has(&p, "listeners.local.socket: required for dialect ndjson");
}

#[test]
fn forward_notifications_with_ordered_replies_are_rejected() {
    let text = MINIMAL.replace(
        "socket = \"/tmp/d.sock\"",
        "socket = \"/tmp/d.sock\"\nordered_replies = true",
    );
    assert_has(&problems(&text), "upstreams.daemon: notifications = \"forward\" cannot be combined with ordered_replies = true");

    let ok = text.replace(
        "ordered_replies = true",
        "ordered_replies = true\nnotifications = \"request\"",
    );
    let config = Config::from_toml(&ok).expect("as-request + ordered is fine");
    assert_eq!(
        config.upstreams[0].notifications,
        NotificationPolicy::AsRequest
    );
}

#[test]
fn hld_profile_fills_defaults_but_keeps_explicit_values() {
    let text = MINIMAL.replace(
        "socket = \"/tmp/d.sock\"",
        "socket = \"/tmp/d.sock\"\nprofile = \"hld\"",
    );
    let config = Config::from_toml(&text).expect("valid");
    let u = &config.upstreams[0];
    assert_eq!(u.notifications, NotificationPolicy::AsRequest);
    assert!(u.ordered_replies && u.fill_empty_params);
    assert_eq!(u.streaming_methods, ["Subscribe"]);
    assert_eq!(u.max_request_bytes, 10 * 1024 * 1024);

    let explicit = text.replace(
        "profile = \"hld\"",
        "profile = \"hld\"\nmax_request_bytes = 4096\nstreaming_methods = [\"Watch\"]",
    );
    let config = Config::from_toml(&explicit).expect("valid");
    let u = &config.upstreams[0];
    assert_eq!(u.max_request_bytes, 4096);
    assert_eq!(u.streaming_methods, ["Watch"]);

    let ws = r#"
        [listeners.l]
        dialect = "ndjson"
        socket = "/tmp/l.sock"
        [upstreams.u]
        dialect = "jsonrpc-ws"
        url = "ws://127.0.0.1:1/"
        profile = "hld"
    "#;
    assert_has(
        &problems(ws),
        "upstreams.u.profile: \"hld\" applies to ndjson upstreams only",
    );
}

#[test]
fn longest_prefix_wins() {
    let text = r#"
        [listeners.public]
        dialect = "jsonrpc-ws"
        address = "127.0.0.1:0"
        [upstreams.a]
        dialect = "ndjson"
        socket = "/tmp/a.sock"
        [upstreams.b]
        dialect = "ndjson"
        socket = "/tmp/b.sock"
        [upstreams.c]
        dialect = "ndjson"
        socket = "/tmp/c.sock"
        [[routes]]
        listener = "public"
        upstream = "a"
        method_prefix = "admin."
        [[routes]]
        listener = "public"
        upstream = "b"
        method_prefix = "admin.users."
        [[routes]]
        listener = "public"
        upstream = "c"
    "#;
    let config = Config::from_toml(text).expect("valid");
    let routes = &config.listeners[0].routes;
    assert_eq!(routes.prefixes[0].0, "admin.users.", "longest first");
    assert_eq!(
        routes.upstream_for("admin.users.list").map(String::as_str),
        Some("b")
    );
    assert_eq!(
        routes.upstream_for("admin.reload").map(String::as_str),
        Some("a")
    );
    assert_eq!(routes.upstream_for("status").map(String::as_str), Some("c"));

    let no_default = text.replace(
        "upstream = \"c\"\n",
        "upstream = \"c\"\nmethod_prefix = \"x\"\n",
    );
    let config = Config::from_toml(&no_default).expect("valid");
    assert_eq!(config.listeners[0].routes.default, None);
    assert_eq!(config.listeners[0].routes.upstream_for("status"), None);
}

#[test]
fn missing_file_is_an_error() {
    let err =
        Config::load(Some(Path::new("/nonexistent/switchyard.toml"))).expect_err("missing file");
    assert!(matches!(err, ConfigError::Load(_)), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/switchyard.toml"),
        "{err}"
    );
}

/// The only test in this binary that sets `SWITCHYARD_*` variables or merges
/// the environment (`missing_file_is_an_error` fails before reading it; all
/// others use `from_toml`), so tests running in parallel cannot observe them.
#[test]
fn environment_overrides_the_file() {
    let vars = [
        ("SWITCHYARD_GATEWAY__SHUTDOWN_GRACE_MS", "100"),
        ("SWITCHYARD_LISTENERS__PUBLIC__ADDRESS", "127.0.0.1:9999"),
        ("SWITCHYARD_UPSTREAMS__DAEMON__POOL_SIZE", "7"),
    ];
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
    let loaded = Config::load(Some(Path::new(EXAMPLE)));
    let bad = {
        std::env::set_var("SWITCHYARD_LISTENERS__PUBLIC__NOPE", "1");
        let r = Config::load(Some(Path::new(EXAMPLE)));
        std::env::remove_var("SWITCHYARD_LISTENERS__PUBLIC__NOPE");
        r
    };
    for (k, _) in vars {
        std::env::remove_var(k);
    }

    let config = loaded.expect("example + env is valid");
    assert_eq!(config.gateway.shutdown_grace, Duration::from_millis(100));
    let public = config
        .listeners
        .iter()
        .find(|l| l.name == "public")
        .expect("public listener");
    assert_eq!(
        public.addr,
        ListenAddr::Ws {
            addr: "127.0.0.1:9999".parse().expect("valid address"),
            path: "/rpc".to_owned(),
        }
    );
    let daemon = config.upstream("daemon").expect("daemon");
    assert_eq!(daemon.pool_size.get(), 7);

    let err = bad.expect_err("unknown key from the environment");
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn batches_with_ordered_replies_are_rejected() {
    let text = MINIMAL.replace(
        "socket = \"/tmp/d.sock\"",
        "socket = \"/tmp/d.sock\"\nordered_replies = true\nnotifications = \"as-request\"\naccepts_batches = true",
    );
    assert_has(
        &problems(&text),
        "upstreams.daemon: accepts_batches = true cannot be combined with ordered_replies = true",
    );
}

#[test]
fn every_unknown_key_and_every_semantic_problem_are_reported_together() {
    let text = r#"
        [listeners.a]
        dialect = "jsonrpc-ws"
        address = "127.0.0.1:0"
        adress = "127.0.0.1:1"
        max_mesage_bytes = 10

        [listeners.b]
        dialect = "bogus"
        address = "127.0.0.1:0"

        [listeners.c]
        dialect = 5
        address = "127.0.0.1:0"

        [upstreams.u]
        dialect = "ndjson"
        socket = "/tmp/u.sock"
        pool_sise = 3
        max_pending = "many"
        mode = "sometimes"

        [[routes]]
        listener = "a"
        upstream = "nowhere"
        via = "x"
    "#;
    let err = Config::from_toml(text).expect_err("invalid");
    let p = err.problems();
    for needle in [
        "listeners.a.adress",
        "listeners.a.max_mesage_bytes",
        "listeners.b.dialect: unknown dialect \"bogus\"",
        "listeners.c.dialect",
        "upstreams.u.pool_sise",
        "upstreams.u.max_pending",
        "upstreams.u.mode: unknown value \"sometimes\"",
        "routes[0]",
        "via",
        "routes[0].upstream: unknown upstream \"nowhere\"",
    ] {
        assert_has(p, needle);
    }
    // A key refused for its type is not also reported as missing.
    let c_dialect = p
        .iter()
        .filter(|m| m.contains("listeners.c.dialect"))
        .count();
    assert_eq!(c_dialect, 1, "{}", p.join("\n"));
}

#[test]
fn wrong_array_elements_are_reported_once_each() {
    let text = MINIMAL.replace(
        "address = \"127.0.0.1:0\"",
        "address = \"127.0.0.1:0\"\nallowed_origins = [1, \"http://a.example\"]\nroutes_typo = 1",
    ) + "\n[[routes]]\nlistener = \"public\"\nupstream = \"daemon\"\nvia = 7\nmethod_prefix = \"a.\"\n";
    let err = Config::from_toml(&text).expect_err("invalid");
    let p = err.problems();
    assert_has(p, "listeners.public.allowed_origins");
    assert_has(p, "listeners.public.routes_typo");
    assert_has(p, "routes[1].via");
    assert_eq!(p.len(), 3, "{}", p.join("\n"));
}

#[test]
fn a_public_websocket_listener_needs_an_origin_allow_list_or_an_explicit_star() {
    let public = MINIMAL.replace("127.0.0.1:0", "0.0.0.0:8080");
    let p = problems(&public);
    assert_has(
        &p,
        "listeners.public.allowed_origins: required when the listener is bound to a non-loopback address (0.0.0.0:8080)",
    );
    assert_eq!(p.len(), 1, "{}", p.join("\n"));
    let v6 = MINIMAL.replace("127.0.0.1:0", "[::]:0");
    assert_has(&problems(&v6), "listeners.public.allowed_origins");

    let with = |origins: &str| {
        public.replace(
            "address = \"0.0.0.0:8080\"",
            &format!("address = \"0.0.0.0:8080\"\nallowed_origins = {origins}"),
        )
    };
    let listed = Config::from_toml(&with(r#"["https://app.example.com"]"#)).expect("listed");
    assert!(!listed.listeners[0].protection.any_origin);
    let star = Config::from_toml(&with(r#"["*"]"#)).expect("explicit opt-in");
    assert!(star.listeners[0].protection.any_origin);
    assert!(star.listeners[0].protection.allowed_origins.is_empty());
    assert_has(
        &problems(&with(r#"["*", "https://app.example.com"]"#)),
        "listeners.public.allowed_origins: \"*\" allows every origin",
    );
    // Loopback keeps its safe default; a Unix listener has no origins.
    Config::from_toml(MINIMAL).expect("loopback needs no list");
}

#[test]
fn star_allows_any_origin_even_on_loopback() {
    use switchyard::limits::origin::UpgradePolicy;
    let policy = |any_origin| UpgradePolicy {
        loopback_only: true,
        any_origin,
        ..Default::default()
    };
    let evil = Some(&b"https://evil.example"[..]);
    assert!(policy(false)
        .check(Some(&b"localhost"[..]), evil, None, None)
        .is_err());
    assert_eq!(
        policy(true).check(Some(&b"localhost"[..]), evil, None, None),
        Ok(())
    );
    // Only the Origin check is opened: Host and null stay refused.
    assert!(policy(true)
        .check(Some(&b"evil.example"[..]), evil, None, None)
        .is_err());
    assert!(policy(true)
        .check(Some(&b"localhost"[..]), Some(&b"null"[..]), None, None)
        .is_err());
}

#[test]
fn publishing_keys_are_validated_and_defaulted() {
    let config = Config::from_toml(MINIMAL).expect("minimal config is valid");
    let publish = &config.upstreams[0].publish;
    assert!(publish.notifications, "published by default");
    assert!(publish.feeds.is_empty());
    assert_eq!(
        publish.topic_for("daemon", "thoughts/update"),
        "daemon.thoughts.update"
    );

    let feeds = MINIMAL.replace(
        "socket = \"/tmp/d.sock\"",
        "socket = \"/tmp/d.sock\"\ntopics = { \"a\" = \"x.*\" }\n\
         [[upstreams.daemon.feeds]]\nmethod = \"Subscribe\"\nparams = { interval_ms = 5 }\n\
         [[upstreams.daemon.feeds]]\nmethod = \"\"\ntopic = \"daemon.Subscribe\"\n\
         [[upstreams.daemon.feeds]]\nmethod = \"Watch\"\ntopic = \"bad..topic\"",
    );
    let found = problems(&feeds);
    assert_has(&found, "upstreams.daemon.topics.a");
    assert_has(
        &found,
        "upstreams.daemon.feeds[1].method: must not be empty",
    );
    assert_has(
        &found,
        "upstreams.daemon.feeds[1].topic: \"daemon.Subscribe\" is fed twice",
    );
    assert_has(&found, "upstreams.daemon.feeds[2].topic");
    assert_eq!(found.len(), 4, "{found:?}");

    let ok = MINIMAL.replace(
        "socket = \"/tmp/d.sock\"",
        "socket = \"/tmp/d.sock\"\n[[upstreams.daemon.feeds]]\nmethod = \"Subscribe\"\nparams = { interval_ms = 5 }",
    );
    let config = Config::from_toml(&ok).expect("a feed with default topic");
    let feed = &config.upstreams[0].publish.feeds[0];
    assert_eq!(feed.topic, "daemon.Subscribe");
    assert_eq!(feed.params.as_deref(), Some(r#"{"interval_ms":5}"#));

    let ws = r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"

[upstreams.w]
dialect = "jsonrpc-ws"
url = "ws://127.0.0.1:1/"
[[upstreams.w.feeds]]
method = "Subscribe"

[[routes]]
listener = "public"
upstream = "w"
"#;
    assert_has(&problems(ws), "ndjson upstreams only");
}

#[test]
fn two_listeners_on_one_address_and_path_conflict_even_on_port_0() {
    // Listeners written with one address share one server (port 0: one
    // free port), so one path can serve only one of them.
    let text = MINIMAL.replace(
        "[upstreams.daemon]",
        "[listeners.second]\ndialect = \"holon-rpc\"\naddress = \"127.0.0.1:0\"\n\n[upstreams.daemon]",
    );
    assert_has(
        &problems(&text),
        "listeners.second: listens on the same address as listeners.public",
    );
    let ok = text.replace(
        "dialect = \"holon-rpc\"\naddress = \"127.0.0.1:0\"",
        "dialect = \"holon-rpc\"\naddress = \"127.0.0.1:0\"\npath = \"/holon\"",
    );
    Config::from_toml(&ok).expect("another path on the same address is fine");
}

#[test]
fn persistence_defaults_to_memory_and_embedded_with_a_path() {
    use switchyard::persist::BackendKind;
    let config = Config::from_toml(MINIMAL).expect("minimal config is valid");
    let p = &config.persistence;
    assert_eq!(p.backend, BackendKind::Memory);
    assert_eq!(p.window, switchyard::persist::DEFAULT_WINDOW);
    assert!(p.topics.is_empty(), "no topic is persistent by default");

    let with_path = format!("{MINIMAL}\n[persistence]\npath = \"/var/lib/switchyard\"\n");
    let config = Config::from_toml(&with_path).expect("a data directory");
    assert_eq!(config.persistence.backend, BackendKind::Embedded);
    assert_eq!(
        config.persistence.path.as_deref(),
        Some(Path::new("/var/lib/switchyard"))
    );

    let topics = format!(
        "{MINIMAL}\n[persistence]\nwindow = 8\n\
         [[persistent_topics]]\ntopic = \"orders.*\"\nmax_age_seconds = 60\nmax_count = 10\nmax_bytes = 1000\nack_timeout_ms = 250\n\
         [[persistent_topics]]\ntopic = \"audit\"\n"
    );
    let config = Config::from_toml(&topics).expect("persistent topics");
    let p = &config.persistence;
    assert_eq!(p.window, 8);
    let orders = p
        .topics
        .policy("orders.eu")
        .expect("orders.* is persistent");
    assert_eq!(orders.retention.max_age, Some(Duration::from_secs(60)));
    assert_eq!(orders.retention.max_count, Some(10));
    assert_eq!(orders.retention.max_bytes, Some(1000));
    assert_eq!(orders.ack_timeout, Duration::from_millis(250));
    let audit = p.topics.policy("audit").expect("audit is persistent");
    assert_eq!(audit.retention, switchyard::persist::Retention::default());
    assert_eq!(audit.ack_timeout, Duration::from_secs(60), "default");
    assert!(p.topics.policy("orders").is_none());
}

#[test]
fn persistence_problems_are_all_reported() {
    let bad = format!(
        "{MINIMAL}\n[persistence]\nbackend = \"disk\"\nnats_url = \"http://x\"\nwindow = 0\n\
         [[persistent_topics]]\ntopic = \"a..b\"\nmax_count = 0\n\
         [[persistent_topics]]\nmax_age_seconds = 5\n\
         [[persistent_topics]]\ntopic = \"dup\"\nack_timeout_ms = 0\n\
         [[persistent_topics]]\ntopic = \"dup\"\n"
    );
    let found = problems(&bad);
    assert_has(&found, "persistence.backend: unknown value \"disk\"");
    assert_has(
        &found,
        "persistence.nats_url: only used by backend \"nats\"",
    );
    assert_has(&found, "persistence.nats_url: expected a nats:// URL");
    assert_has(&found, "persistence.window: must be greater than 0");
    assert_has(&found, "persistent_topics[0].topic");
    assert_has(
        &found,
        "persistent_topics[0].max_count: must be greater than 0",
    );
    assert_has(&found, "persistent_topics[1].topic: required");
    assert_has(
        &found,
        "persistent_topics[2].ack_timeout_ms: must be greater than 0",
    );
    assert_has(
        &found,
        "persistent_topics[3].topic: \"dup\" is listed twice",
    );
    assert_eq!(found.len(), 9, "{found:#?}");

    let huge = format!("{MINIMAL}\n[persistence]\nwindow = 2000000\n");
    assert_has(&problems(&huge), "persistence.window: at most 1048576");
    let needs = format!("{MINIMAL}\n[persistence]\nbackend = \"embedded\"\n");
    assert_has(
        &problems(&needs),
        "persistence.path: required for backend \"embedded\"",
    );
    let needs = format!("{MINIMAL}\n[persistence]\nbackend = \"nats\"\n");
    assert_has(
        &problems(&needs),
        "persistence.nats_url: required for backend \"nats\"",
    );
    let unknown = format!("{MINIMAL}\n[[persistent_topics]]\ntopic = \"a\"\nmax_age = 5\n");
    assert_has(&problems(&unknown), "max_age");
}

#[test]
fn pubsub_bounds_default_and_are_at_least_one() {
    use switchyard::pubsub::Limits;
    let config = Config::from_toml(MINIMAL).expect("minimal config is valid");
    assert_eq!(config.pubsub, Limits::default());
    let example = std::fs::read_to_string(EXAMPLE).expect("example file is readable");
    let example = Config::from_toml(&example).expect("example config is valid");
    assert_eq!(
        example.pubsub,
        Limits::default(),
        "the example lists the defaults"
    );

    let set = format!(
        "{MINIMAL}\n[pubsub]\nmax_subscriptions = 10\nmax_pattern_tokens = 4\n\
         index_bytes_per_connection = 5000\nindex_bytes_per_ip = 6000\nindex_bytes_total = 7000\n"
    );
    let config = Config::from_toml(&set).expect("pubsub bounds");
    assert_eq!(
        config.pubsub,
        Limits {
            max_subscriptions: 10,
            max_pattern_tokens: 4,
            index_bytes_per_connection: 5000,
            index_bytes_per_ip: 6000,
            index_bytes_total: 7000,
        }
    );

    let zeros = format!(
        "{MINIMAL}\n[pubsub]\nmax_subscriptions = 0\nmax_pattern_tokens = 0\n\
         index_bytes_per_connection = 0\nindex_bytes_per_ip = 0\nindex_bytes_total = 0\n"
    );
    let found = problems(&zeros);
    for field in [
        "max_subscriptions",
        "max_pattern_tokens",
        "index_bytes_per_connection",
        "index_bytes_per_ip",
        "index_bytes_total",
    ] {
        assert_has(&found, &format!("pubsub.{field}: must be at least 1"));
    }
}
