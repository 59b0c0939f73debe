//! Graceful shutdown: finish what fits in the grace period, answer the rest
//! with -32009, close WebSockets with 1001.

mod common;

use std::time::{Duration, Instant};

use common::*;
use switchyard::daemon::DaemonOptions;

#[tokio::test]
async fn shutdown_drains_then_fails_the_rest_and_closes_1001() {
    let mut stack = Stack::start("", "", DaemonOptions::default()).await;
    // Shorten the grace period for the test through a fresh stack config.
    stack.gateway.shutdown().await;
    let toml = stack_toml(&stack.socket, "", "") + "\n[gateway]\nshutdown_grace_ms = 1500\n";
    let cfg = switchyard::config::Config::from_toml(&toml).expect("config");
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let gateway = bound.spawn();
    wait_connected(&gateway, "daemon").await;
    let mut ws = connect(&url).await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"sleep","params":{"ms":1000},"id":"fast"}"#,
    )
    .await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"sleep","params":{"ms":10000},"id":"slow"}"#,
    )
    .await;
    // Both calls are at the daemon before the shutdown starts.
    let pending = || metric_value(&gateway, "switchyard_correlator_entries", &[]);
    assert!(eventually(Duration::from_secs(20), || pending() == 2.0).await);
    let started = Instant::now();
    let stopping = tokio::spawn(gateway.shutdown());
    // New connections are refused once the shutdown has begun.
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio_tungstenite::connect_async(url.as_str()).await.is_ok() {
        assert!(Instant::now() < deadline, "still accepting after shutdown");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The fast call completes within the grace period.
    assert_eq!(json(&recv(&mut ws).await)["id"], "fast");
    // The slow one is answered -32009 when the grace period ends.
    let slow = json(&recv(&mut ws).await);
    assert_eq!(slow["id"], "slow");
    assert_eq!(slow["error"]["code"], -32009);
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1400) && elapsed < Duration::from_millis(4900),
        "{elapsed:?}"
    );
    assert_eq!(expect_close(&mut ws).await.0, 1001);
    stopping.await.expect("shutdown");
    stack.daemon.take().expect("daemon").stop().await;
}

#[tokio::test]
async fn idle_peer_that_never_answers_pings_is_dropped() {
    let stack = Stack::start(
        "ping_interval_ms = 100\npong_timeout_ms = 1000",
        "",
        DaemonOptions::default(),
    )
    .await;
    let mut live = stack.client().await;
    let mut dead = stack.client().await;
    // `live` keeps reading (tungstenite answers pings while reading);
    // `dead` is not polled at all for a while, so it never sends a pong.
    let open = || stack.counter("switchyard_connections_open", &[("listener", "public")]);
    assert!(eventually(Duration::from_secs(20), || open() == 2.0).await);
    // `live` is read all along (so it answers every ping) until the gateway
    // has dropped `dead`.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while open() != 1.0 && tokio::time::Instant::now() < deadline {
        expect_silence(&mut live, Duration::from_millis(50)).await;
    }
    assert_eq!(open(), 1.0, "the unresponsive peer was not dropped");
    use futures_util::StreamExt;
    let end = tokio::time::timeout(STEP, async {
        loop {
            match dead.next().await {
                Some(Ok(tokio_tungstenite::tungstenite::Message::Ping(_))) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("dead peer noticed");
    assert!(
        !matches!(
            end,
            Some(Ok(tokio_tungstenite::tungstenite::Message::Text(_)))
        ),
        "{end:?}"
    );
    send(
        &mut live,
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#,
    )
    .await;
    assert_eq!(
        json(&recv(&mut live).await)["result"],
        serde_json::json!([1])
    );
    stack.gateway.shutdown().await;
}
