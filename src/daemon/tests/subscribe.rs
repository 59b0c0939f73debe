//! The daemon's streaming `Subscribe`: events and heartbeats, the open-
//! stream count, bad params.

use super::*;

#[tokio::test]
async fn subscribe_streams_events_and_heartbeats() {
    let fx = start(false).await;
    let mut c = fx.client().await;
    let confirmation = c.call(r#"{"jsonrpc":"2.0","method":"Subscribe","params":{"interval_ms":20,"count":2,"heartbeat_ms":60},"id":3}"#).await;
    let value: serde_json::Value = serde_json::from_str(&confirmation).unwrap();
    assert_eq!(value["id"], serde_json::Value::Null);
    assert_eq!(
        value["result"]["message"],
        "Subscription established. Waiting for events..."
    );
    assert!(value["result"]["subscription_id"]
        .as_str()
        .is_some_and(|s| s.len() == 31));
    for seq in 1..=2 {
        let event: serde_json::Value = serde_json::from_str(&c.recv().await.unwrap()).unwrap();
        assert_eq!(event["result"]["event"]["type"], "new_approval");
        assert_eq!(event["result"]["event"]["data"]["seq"], seq);
        assert!(event["result"]["event"]["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')));
    }
    // Requests are now swallowed; only heartbeats follow.
    c.send(r#"{"jsonrpc":"2.0","method":"echo","id":9}"#).await;
    let heartbeat =
        r#"{"jsonrpc":"2.0","result":{"message":"Connection alive","type":"heartbeat"},"id":null}"#;
    assert_eq!(c.recv().await.unwrap(), heartbeat);
    // A half-close ends the subscription.
    c.wr.shutdown().await.unwrap();
    loop {
        match c.recv().await {
            None => break,
            Some(line) => assert_eq!(line, heartbeat),
        }
    }
}

#[tokio::test]
async fn subscribe_streams_are_counted_while_open() {
    let fx = start(false).await;
    let none = crate::daemon::SubscribeStreams {
        started: 0,
        open: 0,
    };
    assert_eq!(fx.daemon.subscribe_streams(), none);
    let mut c = fx.client().await;
    c.call(r#"{"jsonrpc":"2.0","method":"Subscribe","params":{"interval_ms":10,"pad_bytes":4},"id":1}"#)
        .await;
    let event: serde_json::Value = serde_json::from_str(&c.recv().await.unwrap()).unwrap();
    assert_eq!(event["result"]["event"]["data"]["pad"], "xxxx");
    let one = crate::daemon::SubscribeStreams {
        started: 1,
        open: 1,
    };
    assert_eq!(fx.daemon.subscribe_streams(), one);
    drop(c);
    let deadline = tokio::time::Instant::now() + WAIT;
    while fx.daemon.subscribe_streams().open > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let ended = crate::daemon::SubscribeStreams {
        started: 1,
        open: 0,
    };
    assert_eq!(fx.daemon.subscribe_streams(), ended);
}

#[tokio::test]
async fn subscribe_bad_params_closes() {
    let fx = start(true).await;
    let mut c = fx.client().await;
    let reply = c
        .call(r#"{"method":"Subscribe","params":[1],"id":1}"#)
        .await;
    assert!(
        reply
            .starts_with(r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"invalid request: "#),
        "{reply}"
    );
    assert!(reply.ends_with(r#""},"id":null}"#), "{reply}");
    assert_eq!(c.recv().await, None);
}
