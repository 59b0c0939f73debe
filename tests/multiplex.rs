//! Many clients, one upstream connection: every reply reaches its own
//! client, none lost, none duplicated.

mod common;

use std::collections::HashSet;

use common::*;
use futures_util::{SinkExt, StreamExt};
use switchyard::daemon::DaemonOptions;
use tokio_tungstenite::tungstenite::Message;

const CLIENTS: usize = 50;
const REQUESTS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_share_one_upstream_connection() {
    let stack = Stack::start(
        "",
        "pool_size = 1\nmax_in_flight_per_connection = 256\nmax_pending = 256\nmax_queued = 20000",
        DaemonOptions::default(),
    )
    .await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let url = stack.url.clone();
        tasks.push(tokio::spawn(async move {
            let ws = connect(&url).await;
            let (mut tx, mut rx) = ws.split();
            // Every client uses the same ids 0..REQUESTS, so only id
            // rewriting keeps them apart; the nonce proves whose reply it is.
            let writer = tokio::spawn(async move {
                for r in 0..REQUESTS {
                    let text = format!(r#"{{"jsonrpc":"2.0","method":"echo","params":{{"nonce":"c{c}-r{r}"}},"id":{r}}}"#);
                    tx.feed(Message::Text(text.into())).await.expect("send");
                }
                tx.flush().await.expect("flush");
                tx
            });
            let mut seen = HashSet::new();
            while seen.len() < REQUESTS {
                let frame = tokio::time::timeout(STEP, rx.next()).await.expect("reply in time");
                let Some(Ok(Message::Text(text))) = frame else { continue };
                let v = json(&text);
                let id = v["id"].as_u64().expect("numeric id");
                assert_eq!(v["result"]["nonce"], format!("c{c}-r{id}"), "client {c} got {text}");
                assert!(seen.insert(id), "client {c}: duplicate reply for id {id}");
            }
            let _tx = writer.await.expect("writer");
            seen.len()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("client task"), REQUESTS);
    }
    // Exactly one upstream connection carried everything.
    assert_eq!(
        stack.counter("switchyard_upstream_connections", &[("upstream", "daemon")]),
        1.0
    );
    assert_eq!(
        stack.counter("switchyard_upstream_reconnects_total", &[]),
        0.0
    );
    let ok = stack.counter("switchyard_requests_total", &[("outcome", "ok")]);
    assert_eq!(ok, (CLIENTS * REQUESTS) as f64);
    assert_eq!(
        stack.counter("switchyard_unmatched_responses_total", &[]),
        0.0
    );
    stack.gateway.shutdown().await;
}
