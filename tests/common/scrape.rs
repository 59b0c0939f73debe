//! `/metrics` of a gateway's admin listener over a real socket, parsed with
//! the Prometheus text-format parser (`prometheus-parse`).
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use prometheus_parse::{Sample, Scrape, Value};

/// GETs `/metrics` and parses it.
pub async fn scrape(admin: SocketAddr) -> Scrape {
    let reply = super::http::get(admin, "/metrics", &[]).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    Scrape::parse(reply.text().lines().map(|l| Ok(l.to_owned()))).expect("valid exposition format")
}

fn scalar(sample: &Sample) -> f64 {
    match &sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        other => panic!("{} is not a scalar: {other:?}", sample.metric),
    }
}

/// The sum of `metric`'s samples carrying every label of `labels`. A
/// series that does not exist is an error, not 0: an assertion of `0.0`
/// must not pass because a metric or a label was renamed.
pub fn value(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    try_value(s, metric, labels).unwrap_or_else(|| {
        let mut names: Vec<&str> = s.samples.iter().map(|x| x.metric.as_str()).collect();
        names.dedup();
        panic!("no series {metric}{labels:?} in the scrape; metrics present: {names:?}")
    })
}

/// The sum of `metric`'s samples carrying every label of `labels`, or
/// `None` when no such series exists (yet).
pub fn try_value(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut matched = s
        .samples
        .iter()
        .filter(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(scalar)
        .peekable();
    matched.peek()?;
    Some(matched.sum())
}

/// Scrapes until `metric{labels}` is above `floor` or `within` passes;
/// returns the last value seen.
pub async fn wait_above(
    admin: SocketAddr,
    metric: &str,
    labels: &[(&str, &str)],
    floor: f64,
    within: Duration,
) -> f64 {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let scraped = scrape(admin).await;
        let got = try_value(&scraped, metric, labels);
        if got.is_some_and(|got| got > floor) || tokio::time::Instant::now() > deadline {
            return got.unwrap_or_else(|| value(&scraped, metric, labels));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Scrapes until `metric{labels}` equals `want` or `within` passes; returns
/// the last value seen.
pub async fn wait_value(
    admin: SocketAddr,
    metric: &str,
    labels: &[(&str, &str)],
    want: f64,
    within: Duration,
) -> f64 {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let scraped = scrape(admin).await;
        let got = try_value(&scraped, metric, labels);
        if got == Some(want) || tokio::time::Instant::now() > deadline {
            return got.unwrap_or_else(|| value(&scraped, metric, labels));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
