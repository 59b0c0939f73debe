//! `dashboards/` may only reference metrics switchyard exports: start a
//! gateway, scrape its admin `/metrics`, and check every `switchyard_*` name
//! in the Grafana dashboard and the alert rules against the families found.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use common::*;
use prometheus_parse::{Scrape, Value};
use serde::Deserialize;
use switchyard::app;
use switchyard::config::Config;
use switchyard::daemon::{Daemon, DaemonOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Suffixes of the series a histogram family exposes.
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// A raw HTTP/1.1 GET of `/metrics` (`Connection: close`), parsed.
async fn scrape(addr: SocketAddr) -> Scrape {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = String::new();
    tokio::time::timeout(STEP, stream.read_to_string(&mut raw))
        .await
        .expect("response timed out")
        .expect("read");
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    let (head, body) = raw.split_once("\r\n\r\n").expect("head and body");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "expected a Content-Length body"
    );
    Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("exposition format")
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

/// Every `switchyard_[a-z0-9_]+` token in `text`.
fn metric_names(text: &str, out: &mut BTreeSet<String>) {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    for (start, _) in text.match_indices("switchyard_") {
        let glued = text[..start].chars().next_back().is_some_and(ident);
        let name: String = text[start..].chars().take_while(|c| ident(*c)).collect();
        if !glued {
            out.insert(name);
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
    let toml = format!(
        "{}\n[admin]\naddress = \"127.0.0.1:0\"\n",
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

    let (all, histograms) = families(&scrape(admin).await);
    assert!(all.iter().all(|f| f.starts_with("switchyard_")), "{all:?}");
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
    println!("exported but not on any dashboard or alert: {unused:?}");
    gateway.shutdown().await;
    daemon.stop().await;
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
