//! Everything under `deploy/` and `dashboards/` parses, and the pieces fit
//! together: the compose services, mounts and config, the Prometheus scrape
//! target, the Grafana provisioning, the collector pipeline, the Kubernetes
//! probes and socket sharing, the Dockerfile and the systemd unit. No Docker
//! engine or cluster is needed: these are static checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_norway::Value;
use switchyard::config::{Config, ListenAddr, UpstreamTarget};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn path(relative: &str) -> PathBuf {
    Path::new(ROOT).join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(path(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Every document of a YAML file, merge keys (`<<: *anchor`) applied.
fn yaml_docs(relative: &str) -> Vec<Value> {
    let text = read(relative);
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| {
            let mut v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{relative}: {e}"));
            v.apply_merge()
                .unwrap_or_else(|e| panic!("{relative}: merge keys: {e}"));
            v
        })
        .collect()
}

fn yaml(relative: &str) -> Value {
    let mut docs = yaml_docs(relative);
    assert_eq!(docs.len(), 1, "{relative}: expected one document");
    docs.remove(0)
}

/// `v[k1][k2]…`, failing with the path when absent.
fn at<'a>(v: &'a Value, keys: &[&str]) -> &'a Value {
    keys.iter().fold(v, |v, k| {
        v.get(k)
            .unwrap_or_else(|| panic!("missing key {k:?} (path {keys:?})"))
    })
}

fn text<'a>(v: &'a Value, keys: &[&str]) -> &'a str {
    at(v, keys)
        .as_str()
        .unwrap_or_else(|| panic!("{keys:?} is not a string"))
}

fn seq<'a>(v: &'a Value, keys: &[&str]) -> &'a [Value] {
    at(v, keys)
        .as_sequence()
        .unwrap_or_else(|| panic!("{keys:?} is not a list"))
}

fn strings(values: &[Value]) -> Vec<&str> {
    values.iter().filter_map(Value::as_str).collect()
}

/// Every file below `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = entry.expect("dir entry").path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn every_yaml_and_json_file_parses() {
    let mut seen = Vec::new();
    for dir in ["deploy", "dashboards"] {
        for file in files(&path(dir)) {
            let relative = file.strip_prefix(ROOT).expect("under the crate");
            let relative = relative.to_str().expect("UTF-8 path");
            match file.extension().and_then(|e| e.to_str()) {
                Some("yml" | "yaml") => {
                    let docs = yaml_docs(relative);
                    assert!(!docs.is_empty(), "{relative}: no YAML document");
                    assert!(docs.iter().all(|d| !d.is_null()), "{relative}: empty doc");
                }
                Some("json") => {
                    let text = read(relative);
                    serde_json::from_str::<serde_json::Value>(&text)
                        .unwrap_or_else(|e| panic!("{relative}: {e}"));
                }
                _ => continue,
            }
            seen.push(relative.to_owned());
        }
    }
    for expected in [
        "deploy/docker-compose.yml",
        "deploy/prometheus.yml",
        "deploy/otel-collector.yml",
        "deploy/k8s/sidecar.yaml",
        "dashboards/alerts.yml",
        "dashboards/switchyard.json",
    ] {
        assert!(seen.iter().any(|s| s == expected), "{expected} not checked");
    }
}

/// The compose file's `services` mapping.
fn compose() -> Value {
    yaml("deploy/docker-compose.yml")
}

/// Host-side sources of a service's bind mounts (`./x:/y[:ro]`), and the
/// container-side targets of all its volumes.
fn mounts(service: &Value) -> Vec<(String, String)> {
    strings(seq(service, &["volumes"]))
        .into_iter()
        .map(|m| {
            let mut parts = m.split(':');
            let source = parts.next().expect("source").to_owned();
            let target = parts.next().unwrap_or_else(|| panic!("volume {m:?}"));
            (source, target.to_owned())
        })
        .collect()
}

fn mount_target(service: &Value, source: &str) -> String {
    mounts(service)
        .into_iter()
        .find(|(s, _)| s == source)
        .unwrap_or_else(|| panic!("no mount of {source}"))
        .1
}

#[test]
fn compose_has_every_service_and_its_files_exist() {
    let compose = compose();
    let services = at(&compose, &["services"]);
    let names: BTreeSet<&str> = services
        .as_mapping()
        .expect("services mapping")
        .keys()
        .filter_map(Value::as_str)
        .collect();
    for name in [
        "switchyard",
        "daemon",
        "prometheus",
        "grafana",
        "otel-collector",
        "jaeger",
    ] {
        assert!(names.contains(name), "service {name} missing: {names:?}");
    }
    for name in &names {
        let service = at(services, &[name]);
        assert!(
            service.get("image").is_some() || service.get("build").is_some(),
            "{name}: neither image nor build"
        );
        for (source, _) in service
            .get("volumes")
            .map(|_| mounts(service))
            .unwrap_or_default()
        {
            if source.starts_with('.') {
                let host = path("deploy").join(&source);
                assert!(
                    host.exists(),
                    "{name}: mount source {source} does not exist"
                );
            }
        }
    }
    let build = at(services, &["switchyard", "build"]);
    let context = path("deploy").join(text(build, &["context"]));
    assert!(context.join(text(build, &["dockerfile"])).is_file());

    // The daemon and switchyard share the socket volume.
    let daemon = at(services, &["daemon"]);
    let command = strings(seq(daemon, &["command"]));
    assert_eq!(command, ["daemon", "--socket", "/run/sy/daemon.sock"]);
    assert_eq!(mount_target(daemon, "sockets"), "/run/sy");
    let gateway = at(services, &["switchyard"]);
    assert_eq!(mount_target(gateway, "sockets"), "/run/sy");
    assert!(at(&compose, &["volumes"]).get("sockets").is_some());
}

/// `deploy/switchyard.toml` with the compose file's `SWITCHYARD_*`
/// environment applied, as `switchyard run` would load it.
fn compose_config() -> Config {
    let compose = compose();
    let env = at(&compose, &["services", "switchyard", "environment"]);
    let pairs = env
        .as_mapping()
        .expect("environment mapping")
        .iter()
        .map(|(key, value)| {
            let key = key.as_str().expect("string key");
            let value = value.as_str().expect("quoted environment value");
            (key.to_owned(), value.to_owned())
        });
    with_env(&read("deploy/switchyard.toml"), pairs)
}

/// `toml` with the `SWITCHYARD_*` variables among `env` applied, as
/// figment's Env provider does, validated.
fn with_env(toml: &str, env: impl IntoIterator<Item = (String, String)>) -> Config {
    let mut doc: toml::Table = toml::from_str(toml).expect("TOML");
    for (key, value) in env {
        let Some(path) = key.strip_prefix("SWITCHYARD_") else {
            continue;
        };
        // Like figment's Env provider: values parse as TOML, else strings.
        let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.clone()));
        let keys: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
        let (last, parents) = keys.split_last().expect("a key");
        let mut table = &mut doc;
        for k in parents {
            table = table
                .entry(k.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .expect("table");
        }
        table.insert(last.clone(), parsed);
    }
    let text = toml::to_string(&doc).expect("serialize");
    Config::from_toml(&text).unwrap_or_else(|e| panic!("config invalid:\n{e}\n{text}"))
}

/// Every WebSocket listener reachable from other hosts lists its Host names
/// and origins (no `*`) and requires a token.
fn assert_not_open(cfg: &Config, what: &str) {
    let mut exposed = 0;
    for l in &cfg.listeners {
        let ListenAddr::Ws { addr, .. } = &l.addr else {
            continue;
        };
        if addr.ip().is_loopback() {
            continue;
        }
        exposed += 1;
        let p = &l.protection;
        let name = &l.name;
        assert!(
            !p.allowed_hosts.is_empty(),
            "{what}: {name} allows any Host"
        );
        assert!(
            !p.allowed_origins.is_empty() && !p.any_origin,
            "{what}: {name} allows any origin"
        );
        assert!(p.auth_token.is_some(), "{what}: {name} needs no token");
    }
    assert!(exposed > 0, "{what}: no exposed listener checked");
}

#[test]
fn compose_config_is_valid_and_matches_the_stack() {
    let cfg = compose_config();
    let admin = cfg.admin.addr.expect("admin listener enabled");
    assert_eq!(admin.port(), 9090);
    let daemon = cfg.upstream("daemon").expect("upstream daemon");
    assert!(daemon.required, "readiness waits for the daemon");
    assert_eq!(
        daemon.target,
        UpstreamTarget::Unix("/run/sy/daemon.sock".into())
    );

    let compose = compose();
    let ports = strings(seq(&compose, &["services", "switchyard", "ports"]));
    assert!(ports.iter().any(|p| p.ends_with(":9090")), "{ports:?}");
    assert!(ports.iter().any(|p| p.ends_with(":8080")), "{ports:?}");

    // Prometheus scrapes that admin port and loads the mounted alert rules.
    let prom = yaml("deploy/prometheus.yml");
    let jobs = seq(&prom, &["scrape_configs"]);
    let job = jobs
        .iter()
        .find(|j| j.get("job_name").and_then(Value::as_str) == Some("switchyard"))
        .expect("switchyard scrape job");
    let targets = strings(seq(&seq(job, &["static_configs"])[0], &["targets"]));
    assert_eq!(targets, [format!("switchyard:{}", admin.port())]);
    // ... under a name the admin listener's Host check accepts.
    let host = targets[0].as_bytes();
    let allowed = switchyard::limits::origin::admin_host(Some(host), &cfg.admin.allowed_hosts);
    assert!(
        allowed.is_ok(),
        "Prometheus's Host {} is refused",
        targets[0]
    );
    let service = at(&compose, &["services", "prometheus"]);
    let rules = mount_target(service, "../dashboards/alerts.yml");
    assert_eq!(strings(seq(&prom, &["rule_files"])), [rules.as_str()]);
    assert_eq!(
        mount_target(service, "./prometheus.yml"),
        "/etc/prometheus/prometheus.yml"
    );
}

#[test]
fn grafana_provisioning_loads_the_dashboards() {
    let compose = compose();
    let grafana = at(&compose, &["services", "grafana"]);
    let dashboards = mount_target(grafana, "../dashboards");
    assert_eq!(
        mount_target(grafana, "./grafana/provisioning"),
        "/etc/grafana/provisioning"
    );
    let providers = yaml("deploy/grafana/provisioning/dashboards/switchyard.yml");
    let provider = &seq(&providers, &["providers"])[0];
    assert_eq!(text(provider, &["options", "path"]), dashboards);
    let sources = yaml("deploy/grafana/provisioning/datasources/datasources.yml");
    let prometheus = seq(&sources, &["datasources"])
        .iter()
        .find(|d| d.get("type").and_then(Value::as_str) == Some("prometheus"))
        .expect("a Prometheus data source");
    assert_eq!(text(prometheus, &["url"]), "http://prometheus:9090");
}

#[test]
fn collector_receives_otlp_and_exports_to_jaeger() {
    let otel = yaml("deploy/otel-collector.yml");
    let http = text(
        &otel,
        &["receivers", "otlp", "protocols", "http", "endpoint"],
    );
    assert!(http.ends_with(":4318"), "{http}");
    let pipeline = at(&otel, &["service", "pipelines", "traces"]);
    assert_eq!(strings(seq(pipeline, &["receivers"])), ["otlp"]);
    let exporters = strings(seq(pipeline, &["exporters"]));
    assert!(!exporters.is_empty());
    for name in exporters {
        let endpoint = text(&otel, &["exporters", name, "endpoint"]);
        assert!(
            endpoint.starts_with("jaeger:"),
            "{name} exports to {endpoint}"
        );
    }
    let tracing = compose_config().tracing;
    assert!(tracing.enabled, "the compose stack exports spans");
    assert!(
        tracing.endpoint.starts_with("http://otel-collector:4318/"),
        "switchyard exports to the collector: {}",
        tracing.endpoint
    );
}

#[test]
fn alert_rules_are_well_formed() {
    let alerts = yaml("dashboards/alerts.yml");
    let mut names = BTreeSet::new();
    for group in seq(&alerts, &["groups"]) {
        assert!(!text(group, &["name"]).is_empty());
        for rule in seq(group, &["rules"]) {
            let name = text(rule, &["alert"]);
            assert!(names.insert(name.to_owned()), "duplicate alert {name}");
            let expr = text(rule, &["expr"]);
            let balance = expr.chars().fold(0i32, |n, c| match c {
                '(' => n + 1,
                ')' => n - 1,
                _ => n,
            });
            assert_eq!(balance, 0, "{name}: unbalanced parentheses");
            let severity = text(rule, &["labels", "severity"]);
            assert!(["critical", "warning"].contains(&severity), "{name}");
            assert!(!text(rule, &["annotations", "summary"]).is_empty());
        }
    }
    for expected in [
        "SwitchyardRequiredUpstreamDown",
        "SwitchyardHighErrorRatio",
        "SwitchyardHighP99Latency",
        "SwitchyardLimitRejections",
        "SwitchyardReconnectStorm",
    ] {
        assert!(names.contains(expected), "alert {expected} missing");
    }
}

/// The Deployment's pod spec and the switchyard container.
fn k8s() -> (Vec<Value>, Value) {
    let docs = yaml_docs("deploy/k8s/sidecar.yaml");
    let deployment = docs
        .iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some("Deployment"))
        .expect("a Deployment")
        .clone();
    (docs, deployment)
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    seq(pod, &["containers"])
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
        .unwrap_or_else(|| panic!("container {name}"))
}

/// The container port a probe names (by name or number).
fn probe_port(c: &Value, probe: &str) -> u64 {
    let port = at(c, &[probe, "httpGet", "port"]);
    if let Some(n) = port.as_u64() {
        return n;
    }
    let name = port.as_str().expect("port name or number");
    let found = seq(c, &["ports"])
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .unwrap_or_else(|| panic!("{probe}: no port named {name}"));
    at(found, &["containerPort"]).as_u64().expect("number")
}

#[test]
fn k8s_sidecar_probes_scrape_and_share_the_socket() {
    let (docs, deployment) = k8s();
    let kinds: Vec<&str> = docs
        .iter()
        .filter_map(|d| d.get("kind").and_then(Value::as_str))
        .collect();
    assert_eq!(kinds, ["ConfigMap", "Deployment", "Service"]);
    let config_map = &docs[0];
    let cfg = Config::from_toml(text(config_map, &["data", "switchyard.toml"]))
        .unwrap_or_else(|e| panic!("ConfigMap switchyard.toml: {e}"));
    assert!(cfg
        .listeners
        .iter()
        .all(|l| l.protection.auth_token.is_none()));
    let admin = cfg.admin.addr.expect("admin enabled").port();

    let template = at(&deployment, &["spec", "template"]);
    let annotations = at(template, &["metadata", "annotations"]);
    assert_eq!(text(annotations, &["prometheus.io/scrape"]), "true");
    assert_eq!(
        text(annotations, &["prometheus.io/port"]),
        admin.to_string()
    );
    assert_eq!(text(annotations, &["prometheus.io/path"]), "/metrics");

    let pod = at(template, &["spec"]);
    let sy = container(pod, "switchyard");
    assert_eq!(text(sy, &["livenessProbe", "httpGet", "path"]), "/livez");
    assert_eq!(text(sy, &["readinessProbe", "httpGet", "path"]), "/readyz");
    assert_eq!(probe_port(sy, "livenessProbe"), u64::from(admin));
    assert_eq!(probe_port(sy, "readinessProbe"), u64::from(admin));

    // The app's socket lives in an emptyDir both containers mount.
    let volume = seq(pod, &["volumes"])
        .iter()
        .find(|v| v.get("emptyDir").is_some())
        .expect("an emptyDir volume");
    let volume = text(volume, &["name"]);
    let mount_of = |c: &Value| -> String {
        let m = seq(c, &["volumeMounts"])
            .iter()
            .find(|m| m.get("name").and_then(Value::as_str) == Some(volume))
            .expect("the emptyDir is mounted");
        text(m, &["mountPath"]).to_owned()
    };
    let app = container(pod, "app");
    let dir = mount_of(sy);
    assert_eq!(mount_of(app), dir);
    let upstream = cfg.upstreams.iter().find(|u| u.required).expect("required");
    let UpstreamTarget::Unix(socket) = &upstream.target else {
        panic!("the sidecar's upstream is a Unix socket");
    };
    assert!(socket.starts_with(&dir), "{socket:?} outside {dir}");
    let args = strings(seq(app, &["args"]));
    assert!(args.contains(&socket.to_str().expect("UTF-8")), "{args:?}");
    let non_root = at(pod, &["securityContext", "runAsNonRoot"]).as_bool();
    assert_eq!(non_root, Some(true));
    // No {SERVICE}_PORT-style variables in the pod's environment.
    let links = pod.get("enableServiceLinks").and_then(Value::as_bool);
    assert_eq!(links, Some(false), "enableServiceLinks");
}

#[test]
fn dockerfile_is_multi_stage_and_runs_as_non_root() {
    let dockerfile = read("deploy/Dockerfile");
    let lines: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let froms: Vec<&&str> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert!(froms.len() >= 2, "multi-stage: {froms:?}");
    let last = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("FROM");
    let runtime = &lines[last..];
    let user = runtime
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the runtime stage sets USER");
    assert!(
        !matches!(user.split(':').next(), Some("root" | "0")),
        "USER {user}"
    );
    assert!(runtime.iter().any(|l| l.starts_with("COPY --from=builder")));
    let exposed: Vec<&str> = runtime
        .iter()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(str::split_whitespace)
        .collect();
    assert!(
        exposed.contains(&"8080") && exposed.contains(&"9090"),
        "{exposed:?}"
    );
    assert!(runtime.iter().any(|l| l.starts_with("ENTRYPOINT")));
    assert!(path("deploy/Dockerfile.dockerignore").is_file());
}

#[test]
fn systemd_unit_is_hardened() {
    let unit = read("deploy/switchyard.service");
    let mut section = String::new();
    let mut service = BTreeMap::new();
    let mut sections = BTreeSet::new();
    for line in unit.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            sections.insert(section.clone());
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line:?}"));
        if section == "Service" {
            service.insert(key.to_owned(), value.to_owned());
        }
    }
    assert_eq!(
        sections,
        BTreeSet::from([
            "Install".to_owned(),
            "Service".to_owned(),
            "Unit".to_owned()
        ])
    );
    let get = |k: &str| {
        service
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("[Service] {k} missing"))
    };
    assert!(get("ExecStart").contains("switchyard run --config"));
    // `systemctl reload` sends the SIGHUP switchyard reloads on.
    assert_eq!(get("ExecReload"), "/bin/kill -HUP $MAINPID");
    // Started means serving: switchyard sends READY=1 (tests/sd_notify.rs).
    assert_eq!(get("Type"), "notify");
    let dynamic = service.get("DynamicUser").is_some_and(|v| v == "yes");
    assert!(dynamic || service.contains_key("User"), "a non-root user");
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("CapabilityBoundingSet", ""),
        ("RestartPreventExitStatus", "64"),
    ] {
        assert_eq!(get(key), value, "[Service] {key}");
    }
}

/// The `SWITCHYARD_*` pairs of the unit's `Environment=` lines.
fn unit_environment(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix("Environment="))
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The admin listener has no authentication: the systemd install (the
/// shipped file, with the unit's environment) binds it to loopback only,
/// while the compose stack widens it inside its container for Prometheus.
#[test]
fn the_admin_listener_is_on_loopback_outside_containers() {
    let unit = read("deploy/switchyard.service");
    assert!(
        unit.contains("deploy/switchyard.toml /etc/switchyard/switchyard.toml")
            && unit.contains("--config /etc/switchyard/switchyard.toml"),
        "the unit runs the shipped file"
    );
    let cfg = with_env(&read("deploy/switchyard.toml"), unit_environment(&unit));
    let admin = cfg.admin.addr.expect("admin listener enabled");
    assert!(
        admin.ip().is_loopback(),
        "systemd install: admin on {admin}"
    );

    let compose = compose_config().admin.addr.expect("compose admin listener");
    assert!(
        compose.ip().is_unspecified(),
        "compose: Prometheus scrapes {compose}"
    );
    let compose = self::compose();
    let ports = strings(seq(&compose, &["services", "switchyard", "ports"]));
    let published = ports.iter().find(|p| p.ends_with(":9090")).expect("9090");
    assert!(published.starts_with("127.0.0.1:"), "{published}");
    // The image, probed from outside its container, widens it the same way.
    let dockerfile = read("deploy/Dockerfile");
    assert!(
        dockerfile
            .lines()
            .any(|l| l == "ENV SWITCHYARD_ADMIN__ADDRESS=0.0.0.0:9090"),
        "the image's admin listener is reachable by probes"
    );
}

#[test]
fn shipped_configs_validate_and_are_not_open() {
    // Compose: the token comes from the host's environment, required.
    assert_not_open(&compose_config(), "docker-compose.yml");
    let compose = compose();
    let env = at(&compose, &["services", "switchyard", "environment"]);
    let token = text(env, &["SWITCHYARD_LISTENERS__PUBLIC__AUTH_TOKEN"]);
    assert!(token.starts_with("${") && token.contains(":?"), "{token}");
    assert!(
        !read("deploy/switchyard.toml").contains("auth_token ="),
        "a token in the shipped file is no secret"
    );

    // Kubernetes: the token comes from a Secret, through the environment.
    let (docs, deployment) = k8s();
    let config_map = &docs[0];
    let pod = at(&deployment, &["spec", "template", "spec"]);
    let env = seq(container(pod, "switchyard"), &["env"]);
    let pairs = env.iter().map(|e| {
        let name = text(e, &["name"]).to_owned();
        let secret = at(e, &["valueFrom", "secretKeyRef"]);
        assert!(!text(secret, &["name"]).is_empty() && !text(secret, &["key"]).is_empty());
        (name, "from-a-secret".to_owned())
    });
    let cfg = with_env(text(config_map, &["data", "switchyard.toml"]), pairs);
    assert_not_open(&cfg, "k8s/sidecar.yaml");

    // systemd: the token file is required.
    let unit = read("deploy/switchyard.service");
    assert!(
        unit.lines()
            .any(|l| l.starts_with("EnvironmentFile=/") && !l.starts_with("EnvironmentFile=-")),
        "the unit reads the token from a required EnvironmentFile"
    );
}

#[test]
fn a_public_listener_without_origins_is_refused() {
    let open = read("deploy/switchyard.toml")
        .lines()
        .filter(|l| !l.starts_with("allowed_origins"))
        .collect::<Vec<_>>()
        .join("\n");
    let err = Config::from_toml(&open).expect_err("0.0.0.0 without allowed_origins");
    assert!(
        err.to_string().contains("listeners.public.allowed_origins"),
        "{err}"
    );
}

#[test]
fn the_image_ships_a_stripped_binary() {
    let dockerfile = read("deploy/Dockerfile");
    let builder = dockerfile
        .split("\nFROM ")
        .find(|stage| stage.contains("AS builder"))
        .expect("builder stage");
    let strips = builder.contains("CARGO_PROFILE_RELEASE_STRIP=symbols")
        || builder.contains("CARGO_PROFILE_RELEASE_STRIP=true")
        || builder
            .lines()
            .any(|l| l.trim_start().starts_with("strip ") || l.contains("&& strip "));
    assert!(strips, "the builder strips the binary:\n{builder}");
    assert!(
        builder.contains("CARGO_PROFILE_RELEASE_DEBUG=0"),
        "no debug info in the image"
    );
}

/// The scale-out examples: three switchyard replicas on one NATS, the
/// compose file's and the Kubernetes Deployment's, with the backbone
/// configured (the Deployment's environment applied).
#[test]
fn scale_out_examples_fit_together() {
    let compose = yaml("deploy/scale-out/docker-compose.yml");
    let services = compose["services"].as_mapping().expect("services");
    let replicas = services
        .keys()
        .filter_map(Value::as_str)
        .filter(|name| name.starts_with("switchyard-"))
        .count();
    assert_eq!(replicas, 3, "three switchyard replicas");
    assert!(services.contains_key("nats"), "a NATS server");
    let toml = read("deploy/scale-out/switchyard.toml");
    let nats = Config::from_toml(&toml)
        .expect("scale-out config")
        .pubsub_nats
        .expect("backend = \"nats\"");
    assert_eq!(nats.urls, ["nats://nats:4222"]);

    let docs = yaml_docs("deploy/k8s/scale-out.yaml");
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "switchyard")
        .expect("the switchyard Deployment");
    assert_eq!(deployment["spec"]["replicas"].as_u64(), Some(3));
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let env = container["env"].as_sequence().expect("env");
    let token = env
        .iter()
        .any(|e| e["name"] == "SWITCHYARD_LISTENERS__PUBLIC__AUTH_TOKEN");
    assert!(token, "the listener's token comes from a Secret");
    // Values written in the file (the token's comes from the Secret).
    let env = env.iter().filter_map(|e| {
        let name = e["name"].as_str().expect("name").to_owned();
        Some((name, e["value"].as_str()?.to_owned()))
    });
    let cfg = with_env(&toml, env);
    let nats = cfg.pubsub_nats.expect("backend = \"nats\"");
    assert_eq!(nats.urls, ["nats://nats:4222"]);
    assert!(docs
        .iter()
        .any(|d| d["kind"] == "Service" && d["metadata"]["name"] == "nats"));
}
