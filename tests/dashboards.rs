//! `dashboards/` may only reference metrics switchyard exports, and must
//! use all of them: start a gateway, scrape its admin `/metrics`, and check
//! every `switchyard_*` and `process_*` name in the Grafana dashboard and
//! the alert rules against the families found. Every alert links its
//! runbook in `deploy/OPERATE.md` and names no scrape job.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use common::*;
use prometheus_parse::{Scrape, Value};
use serde::Deserialize;
use switchyard::app;
use switchyard::config::Config;
use switchyard::daemon::{Daemon, DaemonOptions};

/// Suffixes of the series a histogram family exposes.
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// A GET of `/metrics` (a `Content-Length` body, not chunked), parsed.
async fn scrape(addr: SocketAddr) -> Scrape {
    let reply = common::http::get(addr, "/metrics", &[]).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert!(
        reply.header("transfer-encoding").is_none() && reply.header("content-length").is_some(),
        "expected a Content-Length body: {:?}",
        reply.headers
    );
    Scrape::parse(reply.text().lines().map(|l| Ok(l.to_owned()))).expect("exposition format")
}

/// `(every family name, the histogram families)` of a scrape.
fn families(scrape: &Scrape) -> (BTreeSet<String>, BTreeSet<String>) {
    let all = scrape.docs.keys().cloned().collect();
    let histograms = scrape
        .samples
        .iter()
        .filter(|s| matches!(s.value, Value::Histogram(_)))
        .map(|s| s.metric.clone())
        .collect();
    (all, histograms)
}

/// Prefixes of the families switchyard exports: its own, and the standard
/// process families.
const PREFIXES: [&str; 2] = ["switchyard_", "process_"];

/// Every `switchyard_[a-z0-9_]+` and `process_[a-z0-9_]+` token in `text`.
fn metric_names(text: &str, out: &mut BTreeSet<String>) {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    for prefix in PREFIXES {
        for (start, _) in text.match_indices(prefix) {
            let glued = text[..start].chars().next_back().is_some_and(ident);
            let name: String = text[start..].chars().take_while(|c| ident(*c)).collect();
            if !glued {
                out.insert(name);
            }
        }
    }
}

fn json_strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|i| json_strings(i, out)),
        serde_json::Value::Object(map) => map.values().for_each(|i| json_strings(i, out)),
        _ => {}
    }
}

fn yaml_strings(v: &serde_norway::Value, out: &mut Vec<String>) {
    match v {
        serde_norway::Value::String(s) => out.push(s.clone()),
        serde_norway::Value::Sequence(items) => items.iter().for_each(|i| yaml_strings(i, out)),
        serde_norway::Value::Mapping(map) => map.values().for_each(|i| yaml_strings(i, out)),
        serde_norway::Value::Tagged(t) => yaml_strings(&t.value, out),
        _ => {}
    }
}

/// The metric names referenced by one dashboards file.
fn referenced(file: &str) -> BTreeSet<String> {
    let path = format!("{}/dashboards/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut strings = Vec::new();
    if file.ends_with(".json") {
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        json_strings(&v, &mut strings);
    } else {
        for doc in serde_norway::Deserializer::from_str(&text) {
            let v = serde_norway::Value::deserialize(doc).expect("YAML");
            yaml_strings(&v, &mut strings);
        }
    }
    let mut names = BTreeSet::new();
    for s in &strings {
        metric_names(s, &mut names);
    }
    names
}

/// The exported family a referenced series name belongs to, if any.
fn family_of(name: &str, all: &BTreeSet<String>, histograms: &BTreeSet<String>) -> Option<String> {
    if all.contains(name) {
        return Some(name.to_owned());
    }
    HISTOGRAM_SUFFIXES
        .iter()
        .filter_map(|suffix| name.strip_suffix(suffix))
        .find(|base| histograms.contains(*base))
        .map(str::to_owned)
}

#[tokio::test]
async fn dashboards_and_alerts_use_only_exported_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let daemon = Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    // A process upstream too (per-client: nothing starts unless a client
    // routes to it), so that the process families are exported.
    let toml = format!(
        "{}\n[admin]\naddress = \"127.0.0.1:0\"\n\n\
         [upstreams.tool]\ndialect = \"ndjson\"\ncommand = [\"true\"]\nmode = \"per-client\"\n",
        stack_toml(&socket, "", "required = true")
    );
    let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}"));
    let bound = app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let admin = bound.admin_addr().expect("admin");
    let gateway = bound.spawn();
    wait_connected(&gateway, "daemon").await;
    // One request, so the series switchyard creates on first use exist too.
    let mut ws = connect(&url).await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#,
    )
    .await;
    recv(&mut ws).await;
    // And a close, so the close family has a series too.
    let close = tokio_tungstenite::tungstenite::Message::Close(None);
    // The gateway may answer the close and drop the socket at once.
    let _ = futures_util::SinkExt::send(&mut ws, close).await;
    assert!(
        eventually(STEP, || {
            common::try_metric_value(&gateway, "switchyard_ws_closes_total", &[])
                .is_some_and(|closes| closes > 0.0)
        })
        .await,
        "the client's close was not counted"
    );

    let scraped = scrape(admin).await;
    build_info_and_process(&scraped);
    let (all, histograms) = families(&scraped);
    assert!(
        all.iter()
            .all(|f| PREFIXES.iter().any(|p| f.starts_with(p))),
        "{all:?}"
    );
    let mut used = BTreeSet::new();
    let mut missing = Vec::new();
    for file in ["switchyard.json", "alerts.yml"] {
        let names = referenced(file);
        assert!(names.len() >= 5, "{file} references only {names:?}");
        for name in names {
            match family_of(&name, &all, &histograms) {
                Some(family) => {
                    used.insert(family);
                }
                None => missing.push(format!("{file}: {name}")),
            }
        }
    }
    assert!(
        missing.is_empty(),
        "dashboards reference metrics switchyard does not export:\n  {}\nexported: {all:?}",
        missing.join("\n  ")
    );
    let unused: Vec<&String> = all.difference(&used).collect();
    assert!(
        unused.is_empty(),
        "exported but on no dashboard panel or alert: {unused:?}"
    );
    gateway.shutdown().await;
    daemon.stop().await;
}

/// `switchyard_build_info{version, target} 1`, and on Linux the standard
/// process families.
fn build_info_and_process(scrape: &Scrape) {
    let info: Vec<_> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "switchyard_build_info")
        .collect();
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(
        info[0].labels.get("version"),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let target = format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS);
    assert_eq!(info[0].labels.get("target"), Some(target.as_str()));
    assert!(
        matches!(info[0].value, Value::Gauge(v) if v == 1.0),
        "{:?}",
        info[0].value
    );
    if cfg!(target_os = "linux") {
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_threads",
            "process_start_time_seconds",
        ] {
            let sample = scrape.samples.iter().find(|s| s.metric == family);
            assert!(sample.is_some(), "{family} is not exported");
        }
    }
}

/// The anchors GitHub gives the headings of a Markdown file: lower case,
/// punctuation other than `-` and `_` removed, spaces as `-`.
fn anchors(markdown: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .map(|title| {
            title
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

#[test]
fn every_alert_has_a_runbook_in_operate_md_and_names_no_job() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let operate = std::fs::read_to_string(format!("{dir}/deploy/OPERATE.md")).expect("OPERATE.md");
    let sections = anchors(&operate);
    let text = std::fs::read_to_string(format!("{dir}/dashboards/alerts.yml")).expect("alerts");
    let alerts: serde_norway::Value = serde_norway::from_str(&text).expect("YAML");
    let mut rules = 0;
    for group in alerts["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"].as_str().expect("alert name");
            let url = rule["annotations"]["runbook_url"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no runbook_url annotation"));
            let (page, anchor) = url
                .split_once('#')
                .unwrap_or_else(|| panic!("{name}: {url} has no #anchor"));
            assert!(
                page.starts_with("https://") && page.ends_with("/deploy/OPERATE.md"),
                "{name}: {url} is not deploy/OPERATE.md"
            );
            assert!(
                sections.contains(anchor),
                "{name}: deploy/OPERATE.md has no section #{anchor}"
            );
            assert_eq!(anchor, name.to_lowercase(), "{name}: {url}");
            let expr = rule["expr"].as_str().expect("expr");
            let compact: String = expr.split_whitespace().collect();
            for matcher in ["job=", "job!=", "job=~", "job!~"] {
                assert!(
                    !compact.contains(&format!("{{{matcher}"))
                        && !compact.contains(&format!(",{matcher}")),
                    "{name} selects a scrape job ({matcher}): {expr}"
                );
            }
            rules += 1;
        }
    }
    assert!(rules >= 10, "only {rules} alert rules");
}

#[test]
fn every_dashboard_query_is_complete() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dashboards/switchyard.json");
    let text = std::fs::read_to_string(path).expect("dashboard");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let panels = dash["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut queries = 0;
    for panel in panels {
        let id = panel["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "duplicate panel id {id}");
        assert!(panel["gridPos"]["w"].as_u64().is_some_and(|w| w <= 24));
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            assert!(expr.contains("switchyard_"), "panel {id}: {expr}");
            if expr.contains("histogram_quantile") {
                assert!(expr.contains("_bucket") && expr.contains("le"), "{expr}");
            }
            queries += 1;
        }
    }
    assert!(queries >= 20, "only {queries} queries");
    let vars = dash["templating"]["list"].as_array().expect("variables");
    assert!(vars.iter().any(|v| v["name"] == "datasource"));
}
