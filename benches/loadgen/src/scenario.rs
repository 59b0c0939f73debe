//! The scenarios: what each runs against which target, at what load.
//!
//! `latency`, `throughput`, `large` and `fixed-rate` run every target of
//! `target::standard()`; `idle` and `fan-in` run the JSON-RPC gateway only;
//! `fanout` runs the JSON-RPC gateway with a pub/sub feed; `scaleout` the
//! same feed to 1,000 subscribers through the in-process broker, then on a
//! NATS core backbone over one and over two instances; `persist` the same
//! feed stored in a persistent topic, once per store backend; `http`
//! switchyard's `jsonrpc-http` listener over HTTP/1.1 (16 keep-alive
//! connections) and HTTP/2 (one connection, 256 streams), each beside
//! floor H (a bare hyper echo process) under the same load.

use std::time::Duration;

use anyhow::bail;

use super::drive::Load;
use super::persist::Backend;
use super::target::{self, TargetSpec};
use super::wire::{HttpVersion, Wire};

/// Every scenario, in run order.
pub(crate) const NAMES: [&str; 10] = [
    "latency",
    "throughput",
    "large",
    "fixed-rate",
    "idle",
    "fan-in",
    "fanout",
    "scaleout",
    "persist",
    "http",
];

/// The scaleout scenario's subscribers (with `--smoke`: two per instance
/// of the two-instance row, one on each pattern).
const SCALEOUT_SUBSCRIBERS: usize = 1000;
const SCALEOUT_SMOKE_SUBSCRIBERS: usize = 4;

/// The http scenario: HTTP/1.1 keep-alive connections (one request at a
/// time on each), and the streams in flight on the one HTTP/2 connection
/// (switchyard's default `max_in_flight` per connection).
const HTTP1_CONNS: usize = 16;
const HTTP2_STREAMS: usize = 256;

/// Cap on requests in flight per connection in the open-loop scenario.
const OPEN_LOOP_CAP: usize = 1024;

/// Settings from the command line that shape the scenarios.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Measured time per run (after warm-up).
    pub(crate) duration: Duration,
    /// Tiny loads for the smoke test.
    pub(crate) smoke: bool,
    /// switchyard's upstream pool size (fan-in always uses 1); `None`:
    /// switchyard's default (`--default-config`).
    pub(crate) pool_size: Option<usize>,
    /// Connections held open in the idle scenario.
    pub(crate) idle_conns: usize,
}

/// What a run does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    /// Requests, closed or open loop.
    Traffic(Load),
    /// Connections held open, then one request each.
    Idle(usize),
    /// Subscribers of one pub/sub feed.
    Fanout(usize),
    /// Persistent subscribers of one stored feed (the backend is the
    /// target's).
    Persist,
}

/// One target under one load.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    /// Row label.
    pub(crate) label: String,
    /// What is measured.
    pub(crate) target: TargetSpec,
    /// What it is given.
    pub(crate) shape: Shape,
    /// switchyard's upstream pool size for this run (`None`: its default).
    pub(crate) pool_size: Option<usize>,
}

/// A named list of runs, reported as one table.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    /// Name, as given to `--scenario`.
    pub(crate) name: &'static str,
    /// One line on what it shows.
    pub(crate) about: String,
    /// Its runs, in table order.
    pub(crate) runs: Vec<Run>,
}

/// The scenarios named in `names` (`all` for every one), in run order.
pub(crate) fn plan(names: &[String], opts: &Options) -> anyhow::Result<Vec<Scenario>> {
    for n in names {
        if n != "all" && !NAMES.contains(&n.as_str()) {
            bail!(
                "unknown scenario {n:?}; expected all or one of {}",
                NAMES.join(", ")
            );
        }
    }
    let all = names.is_empty() || names.iter().any(|n| n == "all");
    Ok(NAMES
        .iter()
        .filter(|n| all || names.iter().any(|m| m == *n))
        .map(|n| scenario(n, opts))
        .collect())
}

fn scenario(name: &'static str, o: &Options) -> Scenario {
    let runs = match name {
        "idle" => idle_runs(o),
        "fan-in" => fan_in_runs(o.smoke),
        "fanout" => fanout_runs(o.smoke),
        "scaleout" => scaleout_runs(o.smoke),
        "persist" => persist_runs(),
        "http" => http_runs(o),
        _ => floors_and_gateways(Shape::Traffic(traffic_load(name, o.smoke)), o),
    };
    let about = if o.smoke && name == "fanout" {
        format!("{} (smoke: 1 and 3 subscribers)", about(name))
    } else if o.smoke && name == "scaleout" {
        format!(
            "{} (smoke: {SCALEOUT_SMOKE_SUBSCRIBERS} subscribers)",
            about(name)
        )
    } else if o.smoke {
        format!("{} (smoke: scaled down, see the load column)", about(name))
    } else {
        about(name).to_owned()
    };
    Scenario { name, about, runs }
}

/// One line on what a scenario shows, at full size.
fn about(name: &str) -> &'static str {
    match name {
        "latency" => "1 connection, 1 request in flight, 64 B params",
        "throughput" => "16 connections x 32 in flight, 256 B params",
        "large" => "64 connections x 8 in flight, 16 KiB params",
        "fixed-rate" => "5,000 req/s open loop over 16 connections, 256 B params",
        "idle" => "N idle WebSocket connections held open to switchyard",
        "http" => {
            "JSON-RPC over HTTP, 256 B params: HTTP/1.1 keep-alive over 16 connections (one \
             request at a time on each), and HTTP/2 (h2c) over ONE connection with 256 streams in \
             flight; switchyard's jsonrpc-http listener in front of the NDJSON daemon, beside \
             floor H (a bare hyper echo process) under the same load"
        }
        "persist" => {
            "one feed at 1,000 events/s of 256 B into ONE persistent topic, 10 persistent \
             subscribers acknowledging every message, per store backend; then a 10,000-message \
             backlog resumed (20 with --smoke)"
        }
        "fanout" => {
            "one feed at 1,000 events/s of 256 B fanned out to 1, 100 and 1,000 JSON-RPC \
             WebSocket subscribers (half on daemon.>), DEFAULT configuration plus the feed"
        }
        "scaleout" => {
            "the fanout feed (1,000 events/s of 256 B) to the same 1,000 JSON-RPC WebSocket \
             subscribers: the in-process broker, then [pubsub] backend = \"nats\" (a NATS core \
             server of the run's own) with the subscribers on one instance and split evenly over \
             two (the feed published by the first only: publish_upstream_events = false on the \
             second), DEFAULT configuration plus the feed and the backbone. On one machine this \
             shows the cost per delivered event of each instance and of NATS, not more cores"
        }
        _ => "200 clients onto ONE upstream connection vs 16 clients (pool_size 1)",
    }
}

/// The load of a scenario that runs every standard target.
fn traffic_load(name: &str, smoke: bool) -> Load {
    let closed = |conns, window, params_bytes| Load {
        conns,
        window,
        params_bytes,
        rate: None,
    };
    match name {
        "latency" => closed(1, 1, 64),
        "throughput" => closed(pick(smoke, 16, 2), pick(smoke, 32, 4), 256),
        "large" => closed(pick(smoke, 64, 2), pick(smoke, 8, 2), 16 * 1024),
        // fixed-rate: open loop.
        _ => Load {
            rate: Some(if smoke { 200 } else { 5000 }),
            ..closed(pick(smoke, 16, 2), OPEN_LOOP_CAP, 256)
        },
    }
}

fn pick(smoke: bool, full: usize, small: usize) -> usize {
    if smoke {
        small
    } else {
        full
    }
}

/// Every standard target under the same shape.
fn floors_and_gateways(shape: Shape, o: &Options) -> Vec<Run> {
    target::standard()
        .into_iter()
        .map(|t| Run {
            label: t.name.to_owned(),
            target: t,
            shape,
            pool_size: o.pool_size,
        })
        .collect()
}

/// Floor H and the `jsonrpc-http` gateway, over HTTP/1.1 then HTTP/2.
fn http_runs(o: &Options) -> Vec<Run> {
    target::http_targets()
        .into_iter()
        .map(|t| {
            let (conns, window) = match t.wire {
                Wire::Http(HttpVersion::H2) => (1, pick(o.smoke, HTTP2_STREAMS, 16)),
                _ => (pick(o.smoke, HTTP1_CONNS, 2), 1),
            };
            Run {
                label: t.name.to_owned(),
                target: t,
                shape: Shape::Traffic(Load {
                    conns,
                    window,
                    params_bytes: 256,
                    rate: None,
                }),
                pool_size: o.pool_size,
            }
        })
        .collect()
}

/// The JSON-RPC gateway, held open idle. Only this gateway target: 10,000
/// connections per listener would add tens of seconds to the run.
fn idle_runs(o: &Options) -> Vec<Run> {
    let t = target::switchyard_jsonrpc();
    vec![Run {
        label: t.name.to_owned(),
        target: t,
        shape: Shape::Idle(o.idle_conns),
        pool_size: o.pool_size,
    }]
}

/// The JSON-RPC gateway with one upstream connection: many clients, then 16.
fn fan_in_runs(smoke: bool) -> Vec<Run> {
    let t = target::switchyard_jsonrpc();
    [pick(smoke, 200, 20), pick(smoke, 16, 4)]
        .into_iter()
        .map(|clients| Run {
            label: format!("{} x{clients} clients, pool 1", t.name),
            target: t,
            shape: Shape::Traffic(Load {
                conns: clients,
                window: pick(smoke, 8, 2),
                params_bytes: 256,
                rate: None,
            }),
            pool_size: Some(1),
        })
        .collect()
}

/// The feed's subscribers: 1, 100 and 1,000 (1 and 3 with `--smoke`).
fn fanout_runs(smoke: bool) -> Vec<Run> {
    let t = target::switchyard_feed();
    let counts: &[usize] = if smoke { &[1, 3] } else { &[1, 100, 1000] };
    counts
        .iter()
        .map(|&n| Run {
            label: format!("{} x{n} subscribers", t.name),
            target: t,
            shape: Shape::Fanout(n),
            pool_size: None,
        })
        .collect()
}

/// The same subscribers through the in-process broker, then on the NATS
/// backbone over one and over two instances.
fn scaleout_runs(smoke: bool) -> Vec<Run> {
    let n = pick(smoke, SCALEOUT_SUBSCRIBERS, SCALEOUT_SMOKE_SUBSCRIBERS);
    [
        (target::switchyard_feed(), "local broker, 1 instance"),
        (target::switchyard_backbone(1), "nats backbone, 1 instance"),
        (target::switchyard_backbone(2), "nats backbone, 2 instances"),
    ]
    .into_iter()
    .map(|(t, label)| Run {
        label: format!("{label} x{n} subscribers"),
        target: t,
        shape: Shape::Fanout(n),
        pool_size: None,
    })
    .collect()
}

/// The stored feed, once per backend.
fn persist_runs() -> Vec<Run> {
    [Backend::Memory, Backend::Embedded, Backend::Nats]
        .into_iter()
        .map(|backend| {
            let t = target::switchyard_persist(backend);
            Run {
                label: t.name.to_owned(),
                target: t,
                shape: Shape::Persist,
                pool_size: None,
            }
        })
        .collect()
}
