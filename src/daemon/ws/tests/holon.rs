//! holon-rpc dialect tests.

use super::*;

async fn holon() -> (WsDaemon, Client) {
    let d = start(WsDialect::Holon).await;
    let (c, selected) = connect_with(&d.url(), Some("holon-rpc")).await;
    assert_eq!(selected.as_deref(), Some("holon-rpc"));
    (d, c)
}

#[tokio::test]
async fn holon_methods() {
    let (d, mut c) = holon().await;
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":"1","method":"echo","params":{"x": 1}}"#,
            r#"{"jsonrpc":"2.0","id":"1","result":{"x": 1}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"\u0032","method":"echo"}"#,
            r#"{"jsonrpc":"2.0","id":"\u0032","result":{}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"3","method":"subtract","params":{"minuend":5,"subtrahend":7}}"#,
            r#"{"jsonrpc":"2.0","id":"3","result":-2}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"4","method":"get_data"}"#,
            r#"{"jsonrpc":"2.0","id":"4","result":["hello",5]}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"5","method":"update","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":"5","result":null}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"h1","method":"rpc.heartbeat","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":"h1","result":{}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"6","method":"nope"}"#,
            r#"{"jsonrpc":"2.0","id":"6","error":{"code":-32601,"message":"method \"nope\" not registered"}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"7","method":"Subscribe"}"#,
            r#"{"jsonrpc":"2.0","id":"7","error":{"code":-32601,"message":"method \"Subscribe\" not registered"}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"8","method":"sum","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","id":"8","error":{"code":-32602,"message":"params must be an object"}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"9","method":"fail","params":{"code":13,"message":"boom"}}"#,
            r#"{"jsonrpc":"2.0","id":"9","error":{"code":13,"message":"boom"}}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"10","method":"whoami"}"#,
            r#"{"jsonrpc":"2.0","id":"10","result":{"connection":1}}"#,
        ),
    ];
    for (request, reply) in cases {
        assert_eq!(call(&mut c, request).await, reply, "for {request}");
    }
    d.stop().await;
}

#[tokio::test]
async fn holon_protocol_errors_close_1002() {
    let d = start(WsDialect::Holon).await;
    let invalid = |reason: &str| (1002, format!("invalid envelope: {reason}"));
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":"1","#,
            (1002, "malformed JSON".to_owned()),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#,
            invalid("id must be a non-empty string"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"echo"}"#,
            invalid("id must be a non-empty string"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":" ","method":"echo"}"#,
            invalid("id must be a non-empty string"),
        ),
        (
            r#"[{"jsonrpc":"2.0","id":"1","method":"echo"}]"#,
            invalid("batches are not supported"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"1","method":"echo","extra":1}"#,
            invalid(r#"unknown key "extra""#),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"s1","result":1,"error":{"code":1,"message":""}}"#,
            invalid("a response needs exactly one of result and error"),
        ),
    ];
    for (frame, want) in cases {
        let mut c = connect(&d).await;
        send(&mut c, frame).await;
        assert_eq!(closed(&mut c).await, want, "for {frame}");
    }
    let mut c = connect(&d).await;
    c.send(Message::binary(b"{}".to_vec())).await.unwrap();
    assert_eq!(closed(&mut c).await.0, 1003);
    d.stop().await;
}

#[tokio::test]
async fn holon_callback_and_push() {
    let (d, mut c) = holon().await;
    send(&mut c, r#"{"jsonrpc":"2.0","id":"1","method":"callback","params":{"method":"ui.Ask","params":{"q":"?"}}}"#).await;
    let ask = recv(&mut c).await;
    assert_eq!(
        ask,
        r#"{"jsonrpc":"2.0","id":"s1","method":"ui.Ask","params":{"q":"?"}}"#
    );
    // Requests keep flowing while the callback waits.
    let hb = call(
        &mut c,
        r#"{"jsonrpc":"2.0","id":"h1","method":"rpc.heartbeat"}"#,
    )
    .await;
    assert_eq!(hb, r#"{"jsonrpc":"2.0","id":"h1","result":{}}"#);
    send(&mut c, r#"{"jsonrpc":"2.0","id":"s1","result":null}"#).await;
    let reply = recv(&mut c).await;
    assert_eq!(
        reply,
        r#"{"jsonrpc":"2.0","id":"1","result":{"reply":null}}"#
    );

    send(
        &mut c,
        r#"{"jsonrpc":"2.0","id":"2","method":"push","params":{"method":"ui.Tick","params":{}}}"#,
    )
    .await;
    let tick = recv(&mut c).await;
    assert_eq!(
        tick,
        r#"{"jsonrpc":"2.0","id":"s2","method":"ui.Tick","params":{}}"#
    );
    let pushed = recv(&mut c).await;
    assert_eq!(
        pushed,
        r#"{"jsonrpc":"2.0","id":"2","result":{"pushed":true}}"#
    );
    // The push's reply and an unknown reply id are both consumed silently.
    send(
        &mut c,
        r#"{"jsonrpc":"2.0","id":"s2","error":{"code":12,"message":"x"}}"#,
    )
    .await;
    send(&mut c, r#"{"jsonrpc":"2.0","id":"s77","result":{}}"#).await;
    let echo = call(
        &mut c,
        r#"{"jsonrpc":"2.0","id":"3","method":"echo","params":{}}"#,
    )
    .await;
    assert_eq!(echo, r#"{"jsonrpc":"2.0","id":"3","result":{}}"#);
    d.stop().await;
}

#[tokio::test]
async fn holon_whoami_close_me_and_stop() {
    let (d, mut c1) = holon().await;
    let mut c2 = connect(&d).await;
    let whoami = r#"{"jsonrpc":"2.0","id":"w","method":"whoami"}"#;
    let two = r#"{"jsonrpc":"2.0","id":"w","result":{"connection":2}}"#;
    assert_eq!(call(&mut c2, whoami).await, two);
    let bye = call(&mut c1, r#"{"jsonrpc":"2.0","id":"x","method":"close_me"}"#).await;
    assert_eq!(
        bye,
        r#"{"jsonrpc":"2.0","id":"x","result":{"closing":true}}"#
    );
    assert_eq!(closed(&mut c1).await.0, 1001);
    // Reading on sends the client's close reply; then the server hangs up.
    assert!(tokio::time::timeout(WAIT, c1.next())
        .await
        .unwrap()
        .is_none());
    eventually(|| d.connections() == 1).await;
    send(
        &mut c2,
        r#"{"jsonrpc":"2.0","id":"z","method":"sleep","params":{"ms":5000}}"#,
    )
    .await;
    tokio::time::timeout(WAIT, d.stop()).await.unwrap();
    let end = tokio::time::timeout(WAIT, c2.next()).await.unwrap();
    assert!(
        !matches!(end, Some(Ok(Message::Text(_) | Message::Close(_)))),
        "{end:?}"
    );
}
