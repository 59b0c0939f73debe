//! A link's own bookkeeping when it refuses a request: nothing of the
//! refused call stays behind.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Link, Waiter};
use crate::config::Config;
use crate::dialect::UpstreamCodec;
use crate::envelope::{raw_from_string, Payload};
use crate::pubsub::broker::Broker;
use crate::telemetry::metrics::Metrics;
use crate::upstream::health::LinkHealth;
use crate::upstream::outlet::{FrameQueue, Outlet, Wire};
use crate::upstream::shared::UpstreamShared;

/// A Sideband link of an upstream whose requests may be at most 200
/// bytes, writing to `tx`.
fn sideband_link(tx: mpsc::Sender<Wire>) -> Arc<Link> {
    let cfg = Config::from_toml(
        "[listeners.l]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\n\n\
         [upstreams.u]\ndialect = \"sideband\"\nurl = \"ws://127.0.0.1:9/\"\nmax_request_bytes = 200\n\n\
         [[routes]]\nlistener = \"l\"\nupstream = \"u\"\n",
    )
    .unwrap();
    let cfg = cfg.upstreams.into_iter().next().unwrap();
    let metrics = Metrics::new().unwrap();
    let name = cfg.name.clone();
    let shared = Arc::new(UpstreamShared {
        broker: Arc::new(Broker::new(16)),
        recorder: None,
        published: metrics.events.published.with_label_values(&[&name]),
        entries: metrics.correlator_entries.with_label_values(&[&name]),
        calls: (
            metrics.upstream_in_flight.with_label_values(&[&name]),
            metrics
                .upstream_request_duration
                .with_label_values(&[&name]),
        ),
        processes: crate::upstream::shared::Processes::new(&cfg, &metrics),
        traffic: crate::upstream::shared::Traffic::new(&metrics, cfg.dialect),
        cfg,
        metrics,
        stopping: CancellationToken::new(),
        writers: TaskTracker::new(),
        health: LinkHealth::new(),
        tls: None,
    });
    let out = Outlet::Frames(FrameQueue::new(tx));
    let codec = shared.codec();
    Link::new(out, codec, shared, None)
}

fn cids(link: &Link) -> usize {
    match link.codec() {
        UpstreamCodec::Sideband(c) => c.pending_cids(),
        UpstreamCodec::JsonRpc(_) | UpstreamCodec::Holon(_) => panic!("a Sideband link"),
    }
}

fn params(text: &str) -> Payload {
    Payload::Json(raw_from_string(text.to_owned()))
}

/// A request refused after its cid was issued (too long for the
/// upstream, or its queue refused it) forgets that cid: the map holds one
/// entry per pending call, so refusals cannot grow it.
#[test]
fn a_refused_sideband_request_leaves_no_cid_behind() {
    let (tx, rx) = mpsc::channel(4);
    let link = sideband_link(tx);
    let (waiter, _rx) = oneshot::channel();
    let sent = link.send_request("echo", Some(&params("[1]")), Waiter::Task(waiter));
    assert!(sent.is_ok(), "a short request is queued");
    assert_eq!(cids(&link), 1, "its cid waits for the reply");

    let long = format!("[\"{}\"]", "x".repeat(300));
    let (waiter, _rx) = oneshot::channel();
    let refused = link.send_request("echo", Some(&params(&long)), Waiter::Task(waiter));
    let Err((e, Some(Waiter::Task(_)))) = refused else {
        panic!("refused, with the waiter back");
    };
    assert!(e.to_string().contains("exceeds the upstream limit"), "{e}");
    assert_eq!(cids(&link), 1, "the refused request's cid is forgotten");

    drop(rx);
    let (waiter, _rx) = oneshot::channel();
    let refused = link.send_request("echo", Some(&params("[2]")), Waiter::Task(waiter));
    let Err((e, _)) = refused else {
        panic!("refused: the writer is gone");
    };
    assert!(e.to_string().contains("upstream connection lost"), "{e}");
    assert_eq!(cids(&link), 1, "and so is the cid of one the queue refused");
}
