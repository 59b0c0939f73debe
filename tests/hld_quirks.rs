//! An hld-like upstream (the reference daemon in quirk mode, with the hld
//! profile): notifications as requests whose replies are discarded, batches
//! fanned out and reassembled, replies checked for FIFO order.

mod common;

use std::time::Duration;

use common::*;
use switchyard::daemon::DaemonOptions;

const HLD: DaemonOptions = DaemonOptions { hld_quirks: true };

#[tokio::test]
async fn hld_profile_serves_batches_notifications_and_errors() {
    let stack = Stack::start("", "profile = \"hld\"\npool_size = 1", HLD).await;
    let mut ws = stack.client().await;

    // hld rejects batches; switchyard fans them out and reassembles them.
    send(&mut ws, r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"a"},{"jsonrpc":"2.0","method":"notify_hello","params":[7]},{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":"b"}]"#).await;
    let batch = json(&recv(&mut ws).await);
    let items = batch.as_array().expect("batch reply");
    assert_eq!(items.len(), 2, "{batch}");
    assert!(items.iter().any(|i| i["id"] == "a" && i["result"] == 7));
    assert!(items.iter().any(|i| i["id"] == "b" && i["result"] == 19));

    // hld answers notifications with id:null; switchyard sends them as
    // requests and discards the reply, so the client sees nothing.
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"notify_hello","params":[7]}"#,
    )
    .await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"nosuch","params":{},"id":5}"#,
    )
    .await;
    let reply = json(&recv(&mut ws).await);
    assert_eq!(reply["id"], 5, "notification leaked a reply: {reply}");
    // hld's own error text passes through unchanged.
    assert_eq!(reply["error"]["code"], -32601);
    assert_eq!(reply["error"]["message"], "Method not found: nosuch");

    // Absent params are filled with {} for hld.
    send(&mut ws, r#"{"jsonrpc":"2.0","method":"echo","id":6}"#).await;
    assert_eq!(
        recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","result":{},"id":6}"#
    );

    // No reply was unmatched and the connection never fell out of sync.
    expect_silence(&mut ws, Duration::from_millis(100)).await;
    assert_eq!(
        stack.counter("switchyard_unmatched_responses_total", &[]),
        0.0
    );
    assert_eq!(
        stack.counter("switchyard_protocol_errors_total", &[("side", "upstream")]),
        0.0
    );
    assert_eq!(
        stack.counter("switchyard_upstream_reconnects_total", &[]),
        0.0
    );
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn a_timeout_on_an_ordered_connection_retires_it() {
    let stack = Stack::start(
        "request_timeout_ms = 150",
        "profile = \"hld\"\npool_size = 1",
        HLD,
    )
    .await;
    let mut ws = stack.client().await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"sleep","params":{"ms":400},"id":1}"#,
    )
    .await;
    assert_eq!(json(&recv(&mut ws).await)["error"]["code"], -32008);
    // The sequential daemon is still busy on the old connection; a new call
    // goes over a fresh connection and is not stuck behind the slow one.
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}"#,
    )
    .await;
    assert_eq!(
        recv(&mut ws).await,
        r#"{"jsonrpc":"2.0","result":[2],"id":2}"#
    );
    let stale = [("kind", "stale")];
    assert!(
        eventually(Duration::from_secs(20), || stack
            .counter("switchyard_unmatched_responses_total", &stale)
            == 1.0)
        .await
    );
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn subscribe_streams_on_its_own_connection_and_ends_with_the_daemon() {
    let mut stack = Stack::start("", "profile = \"hld\"\npool_size = 1", HLD).await;
    let mut ws = stack.client().await;
    send(&mut ws, r#"{"jsonrpc":"2.0","method":"Subscribe","params":{"interval_ms":30,"count":3,"heartbeat_ms":20},"id":"sub-1"}"#).await;
    let confirm = json(&recv(&mut ws).await);
    assert_eq!(confirm["id"], "sub-1", "{confirm}");
    assert!(
        confirm["result"]["subscription_id"].is_string(),
        "{confirm}"
    );
    for seq in 1..=3 {
        let event = json(&recv(&mut ws).await);
        assert_eq!(event["method"], "Subscribe.event", "{event}");
        assert_eq!(event["params"]["subscription"], "sub-1", "{event}");
        assert_eq!(
            event["params"]["result"]["event"]["data"]["seq"], seq,
            "{event}"
        );
        assert!(event.get("id").is_none());
    }
    // The pooled connection is untouched: ordinary calls still work, and
    // heartbeat lines are consumed, never forwarded.
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":{"x":1},"id":2}"#,
    )
    .await;
    assert_eq!(json(&recv(&mut ws).await)["id"], 2);
    expect_silence(&mut ws, Duration::from_millis(150)).await;
    // The daemon goes away: the client is told the stream ended.
    stack.daemon.take().expect("daemon").stop().await;
    let end = json(&recv(&mut ws).await);
    assert_eq!(end["method"], "Subscribe.end", "{end}");
    assert_eq!(end["params"]["subscription"], "sub-1", "{end}");
    stack.gateway.shutdown().await;
}
