//! `/metrics` of a gateway's admin listener over a real socket, parsed with
//! the Prometheus text-format parser (`prometheus-parse`).
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use prometheus_parse::{Sample, Scrape, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::STEP;

/// GETs `/metrics` (HTTP/1.1, `Connection: close`) and parses it.
pub async fn scrape(admin: SocketAddr) -> Scrape {
    let mut stream = tokio::time::timeout(STEP, TcpStream::connect(admin))
        .await
        .expect("connect timed out")
        .expect("connect");
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(STEP, stream.read_to_end(&mut raw))
        .await
        .expect("response timed out")
        .expect("read");
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("header/body separator");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("valid exposition format")
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if size == 0 {
            return out;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
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
