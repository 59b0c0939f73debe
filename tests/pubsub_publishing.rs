//! What an upstream publishes (feeds): notifications the
//! reference JSON-RPC WebSocket daemon sends on switchyard's shared
//! connection (its `push` method) are published as `<upstream>.<method>`,
//! under the `topics` rename map's topic instead when the method is in it,
//! and not at all with `publish_notifications = false`.

mod common;

use common::clients::{Speak, TestClient};
use common::metric_value;
use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::daemon::ws::{WsDaemon, WsDialect};

struct Gw {
    upstream: WsDaemon,
    gateway: Running,
    url: String,
}

/// A JSON-RPC listener routed to the reference JSON-RPC WebSocket daemon as
/// upstream `events`, with `publishing` added to the upstream's table.
async fn gateway(publishing: &str) -> Gw {
    let upstream = WsDaemon::start("127.0.0.1:0".parse().expect("addr"), WsDialect::JsonRpc)
        .await
        .expect("upstream");
    let toml = format!(
        r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"
# ">" below: every topic of the process, not only the upstream's.
allow_topics = [">"]

[upstreams.events]
dialect = "jsonrpc-ws"
url = "{}"
pool_size = 1
{publishing}

[[routes]]
listener = "public"
upstream = "events"
"#,
        upstream.url()
    );
    let cfg = switchyard::config::Config::from_toml(&toml)
        .unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let gateway = bound.spawn();
    common::wait_connected(&gateway, "events").await;
    Gw {
        upstream,
        gateway,
        url,
    }
}

/// Sends `method` with `params` (id `id`) and returns the reply, keeping
/// the notifications that arrive first in `events`.
async fn call(
    c: &mut TestClient,
    id: u64,
    method: &str,
    params: Value,
    events: &mut Vec<Value>,
) -> Value {
    let request = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
    c.send(&request.to_string()).await;
    loop {
        let msg: Value = serde_json::from_str(&c.recv().await).expect("JSON");
        if msg["id"] == id {
            return msg;
        }
        assert_eq!(msg["method"], "rpc.notification", "{msg}");
        events.push(msg["params"].clone());
    }
}

/// Publishes `events.<method>` through the daemon's `push`.
async fn push(c: &mut TestClient, id: u64, method: &str, events: &mut Vec<Value>) {
    let params = json!({"method": method, "params": {"n": id}});
    let reply = call(c, id, "push", params, events).await;
    assert_eq!(reply["result"], json!({"pushed": true}), "{reply}");
}

/// Reads notifications until there are `n`.
async fn until(c: &mut TestClient, n: usize, events: &mut Vec<Value>) {
    while events.len() < n {
        let msg: Value = serde_json::from_str(&c.recv().await).expect("JSON");
        assert_eq!(msg["method"], "rpc.notification", "{msg}");
        events.push(msg["params"].clone());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topics_map_renames_and_other_methods_keep_upstream_dot_method() {
    let gw = gateway(r#"topics = { "orders.created" = "shop.orders" }"#).await;
    let mut sub = TestClient::connect(Speak::JsonRpc, &gw.url).await;
    let mut publisher = TestClient::connect(Speak::JsonRpc, &gw.url).await;
    let mut events = Vec::new();
    for (id, topic) in [(1, "shop.orders"), (2, "events.>")] {
        let reply = call(
            &mut sub,
            id,
            "rpc.subscribe",
            json!({"topic": topic}),
            &mut events,
        )
        .await;
        assert_eq!(reply["result"], json!({"subscribed": true}), "{reply}");
    }
    let mut ignored = Vec::new();
    push(&mut publisher, 10, "orders.created", &mut ignored).await;
    push(&mut publisher, 11, "orders.shipped", &mut ignored).await;
    until(&mut sub, 2, &mut events).await;
    // Renamed, and only under the new name (`events.>` does not see it as
    // `events.orders.created`); the next one in order, under its default.
    assert_eq!(
        events,
        [
            json!({"topic": "shop.orders", "data": {"n": 10}}),
            json!({"topic": "events.orders.shipped", "data": {"n": 11}}),
        ]
    );
    assert!(ignored.is_empty(), "{ignored:?}");
    let published = metric_value(
        &gw.gateway,
        "switchyard_events_published_total",
        &[("upstream", "events")],
    );
    assert_eq!(published, 2.0);
    gw.gateway.shutdown().await;
    gw.upstream.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_notifications_false_publishes_nothing() {
    let gw = gateway("publish_notifications = false").await;
    let mut sub = TestClient::connect(Speak::JsonRpc, &gw.url).await;
    let mut events = Vec::new();
    let reply = call(
        &mut sub,
        1,
        "rpc.subscribe",
        json!({"topic": ">"}),
        &mut events,
    )
    .await;
    assert_eq!(reply["result"], json!({"subscribed": true}), "{reply}");
    // The subscriber calls push itself: had the notification been
    // published, it would arrive before the reply on this connection
    // (switchyard reads it from the upstream before the reply).
    push(&mut sub, 2, "orders.created", &mut events).await;
    push(&mut sub, 3, "orders.created", &mut events).await;
    let published = metric_value(
        &gw.gateway,
        "switchyard_events_published_total",
        &[("upstream", "events")],
    );
    assert_eq!(published, 0.0);
    assert!(events.is_empty(), "{events:?}");
    gw.gateway.shutdown().await;
    gw.upstream.stop().await;
}
