//! Daemon tests over real sockets in a temporary directory.

// In tests a panic is the failure report (STYLE §8.3 rule 5 exempts tests).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio_util::codec::Decoder;

use super::conn::{LineCodec, LineError};
use super::*;

const WAIT: Duration = Duration::from_secs(5);

struct Fixture {
    _dir: tempfile::TempDir,
    daemon: Daemon,
}

struct Client {
    lines: Lines<BufReader<OwnedReadHalf>>,
    wr: OwnedWriteHalf,
}

async fn start(hld_quirks: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("d.sock");
    let daemon = Daemon::start(&path, DaemonOptions { hld_quirks })
        .await
        .unwrap();
    Fixture { _dir: dir, daemon }
}

impl Fixture {
    async fn client(&self) -> Client {
        let (rd, wr) = UnixStream::connect(self.daemon.path())
            .await
            .unwrap()
            .into_split();
        Client {
            lines: BufReader::new(rd).lines(),
            wr,
        }
    }
}

impl Client {
    async fn send(&mut self, line: &str) {
        self.wr.write_all(line.as_bytes()).await.unwrap();
        self.wr.write_all(b"\n").await.unwrap();
    }

    async fn recv(&mut self) -> Option<String> {
        tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .unwrap()
            .unwrap()
    }

    async fn call(&mut self, line: &str) -> String {
        self.send(line).await;
        self.recv().await.unwrap()
    }
}

#[tokio::test]
async fn spec_examples() {
    let fx = start(false).await;
    let mut c = fx.client().await;
    let cases = [
        (
            r#"{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}"#,
            r#"{"jsonrpc":"2.0","result":19,"id":1}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"subtract","params":[23,42],"id":2}"#,
            r#"{"jsonrpc":"2.0","result":-19,"id":2}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"subtract","params":{"subtrahend":23,"minuend":42},"id":3}"#,
            r#"{"jsonrpc":"2.0","result":19,"id":3}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"}"#,
            r#"{"jsonrpc":"2.0","result":7,"id":"1"}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"sum","params":[0.5,2],"id":1.0}"#,
            r#"{"jsonrpc":"2.0","result":2.5,"id":1.0}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"get_data","id":"9"}"#,
            r#"{"jsonrpc":"2.0","result":["hello",5],"id":"9"}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"foobar","id":"1"}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":"1"}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"foobar, "params":"bar","baz]"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}"#,
        ),
        (
            r#"{"jsonrpc":"2.1","method":"m","id":7}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":7}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"echo","params":null,"id":7}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":7}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"m","id":{"a":1}}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}"#,
        ),
        (
            "[]",
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}"#,
        ),
        (
            "[1,2]",
            r#"[{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null},{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}]"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"echo","params":{"a": [1, "\u0041"]},"id":"\u0041"}"#,
            r#"{"jsonrpc":"2.0","result":{"a": [1, "\u0041"]},"id":"\u0041"}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"sum","params":{"a":1},"id":12345678901234567890}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params","data":"invalid type: map, expected a sequence at line 1 column 0"},"id":12345678901234567890}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"fail","params":{"code":7,"message":"no","data":{"x":null}},"id":null}"#,
            r#"{"jsonrpc":"2.0","error":{"code":7,"message":"no","data":{"x":null}},"id":null}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"fail","id":1}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"failure"},"id":1}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"update","params":[1],"id":1}"#,
            r#"{"jsonrpc":"2.0","result":null,"id":1}"#,
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(c.call(input).await, expected, "input: {input}");
    }
}

#[tokio::test]
async fn batches_and_notifications() {
    let fx = start(false).await;
    let mut c = fx.client().await;
    let batch = r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"jsonrpc":"2.0","method":"notify_hello","params":[7]},{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":"2"},{"foo":"boo"},{"jsonrpc":"2.0","method":"foo.get","params":{"name":"myself"},"id":"5"},{"jsonrpc":"2.0","method":"get_data","id":"9"}]"#;
    let expected = r#"[{"jsonrpc":"2.0","result":7,"id":"1"},{"jsonrpc":"2.0","result":19,"id":"2"},{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null},{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":"5"},{"jsonrpc":"2.0","result":["hello",5],"id":"9"}]"#;
    assert_eq!(c.call(batch).await, expected);
    // Silent lines: notifications, an all-notification batch, empty lines, CRLF.
    c.send(r#"{"jsonrpc":"2.0","method":"update","params":[1,2,3,4,5]}"#)
        .await;
    c.send(r#"{"jsonrpc":"2.0","method":"foobar"}"#).await;
    c.send(r#"[{"jsonrpc":"2.0","method":"notify_sum","params":[1,2,4]},{"jsonrpc":"2.0","method":"notify_hello","params":[7]}]"#).await;
    c.send("").await;
    c.send("\r").await;
    let sleepy = r#"[{"jsonrpc":"2.0","method":"sleep","params":[30],"id":1},{"jsonrpc":"2.0","method":"echo","id":2}]"#;
    let expected =
        r#"[{"jsonrpc":"2.0","result":30,"id":1},{"jsonrpc":"2.0","result":null,"id":2}]"#;
    assert_eq!(c.call(&format!("{sleepy}\r")).await, expected);
}

#[tokio::test]
async fn concurrent_requests_and_parse_error_keeps_connection() {
    let fx = start(false).await;
    let mut c = fx.client().await;
    c.send(r#"{"jsonrpc":"2.0","method":"sleep","params":{"ms":300},"id":1}"#)
        .await;
    c.send("   ").await;
    c.send(r#"{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}"#)
        .await;
    assert_eq!(
        c.recv().await.unwrap(),
        r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#
    );
    assert_eq!(
        c.recv().await.unwrap(),
        r#"{"jsonrpc":"2.0","result":[2],"id":2}"#
    );
    assert_eq!(
        c.recv().await.unwrap(),
        r#"{"jsonrpc":"2.0","result":300,"id":1}"#
    );
    // A half-close still gets the pending answer, then EOF; a final line
    // without `\n` is processed at EOF.
    c.send(r#"{"jsonrpc":"2.0","method":"sleep","params":[50],"id":3}"#)
        .await;
    c.wr.write_all(br#"{"jsonrpc":"2.0","method":"echo","id":4}"#)
        .await
        .unwrap();
    c.wr.shutdown().await.unwrap();
    assert_eq!(
        c.recv().await.unwrap(),
        r#"{"jsonrpc":"2.0","result":null,"id":4}"#
    );
    assert_eq!(
        c.recv().await.unwrap(),
        r#"{"jsonrpc":"2.0","result":50,"id":3}"#
    );
    assert_eq!(c.recv().await, None);
}

#[tokio::test]
async fn hld_quirks() {
    let fx = start(true).await;
    let mut c = fx.client().await;
    let cases = [
        (
            r#"{"jsonrpc":"2.0","method":"sum","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","result":3,"id":null}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":null}"#,
            r#"{"jsonrpc":"2.0","result":3,"id":null}"#,
        ),
        (
            r#"[{"jsonrpc":"2.0","method":"sum","params":[1],"id":1}]"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#,
        ),
        (
            "[]",
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#,
        ),
        (
            "null",
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid request: must be JSON-RPC 2.0"},"id":null}"#,
        ),
        (
            r#"{"jsonrpc":"1.0","method":"sum","id":4}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid request: must be JSON-RPC 2.0"},"id":4}"#,
        ),
        (
            r#"{"jsonrpc":2.0,"method":"sum","id":4}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"<x>","id":5}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found: \u003cx\u003e"},"id":5}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","id":5}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found: "},"id":5}"#,
        ),
        (
            r#"{"JSONRPC":"2.0","Method":"get_data","ID":1e3}"#,
            r#"{"jsonrpc":"2.0","result":["hello",5],"id":1000}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"sum","id":6}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32603,"message":"invalid request: unexpected end of JSON input"},"id":6}"#,
        ),
        (
            r#"{"jsonrpc":"2.0","method":"get_data","id":1e400}"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#,
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(c.call(input).await, expected, "input: {input}");
    }
    // FIFO: the slow call blocks the one behind it.
    c.send(r#"{"jsonrpc":"2.0","method":"sleep","params":[150],"id":1}"#)
        .await;
    c.send(r#"{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}"#)
        .await;
    assert_eq!(
        c.recv().await.unwrap(),
        r#"{"jsonrpc":"2.0","result":150,"id":1}"#
    );
    assert_eq!(
        c.recv().await.unwrap(),
        r#"{"jsonrpc":"2.0","result":[2],"id":2}"#
    );
}

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

#[tokio::test]
async fn stop_closes_open_connections() {
    let fx = start(false).await;
    let path = fx.daemon.path().to_owned();
    let mut busy = fx.client().await;
    busy.send(r#"{"jsonrpc":"2.0","method":"sleep","params":[60000],"id":1}"#)
        .await;
    let mut sub = fx.client().await;
    sub.call(r#"{"jsonrpc":"2.0","method":"Subscribe","id":1}"#)
        .await;
    let mut idle = fx.client().await;
    assert_eq!(
        idle.call(r#"{"jsonrpc":"2.0","method":"echo","id":1}"#)
            .await,
        r#"{"jsonrpc":"2.0","result":null,"id":1}"#
    );
    tokio::time::timeout(WAIT, fx.daemon.stop()).await.unwrap();
    assert!(!path.exists());
    for c in [&mut busy, &mut idle] {
        assert_eq!(c.recv().await, None);
    }
    let mut rest = String::new();
    // Events may already be queued; what matters is EOF.
    let mut rd = sub.lines.into_inner();
    tokio::time::timeout(WAIT, rd.read_to_string(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert!(UnixStream::connect(&path).await.is_err());
}

#[tokio::test]
async fn socket_lifecycle() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("d.sock");
    // A stale socket file nobody answers on is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let daemon = Daemon::start(&path, DaemonOptions::default())
        .await
        .unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let err = Daemon::start(&path, DaemonOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    daemon.stop().await;
    std::fs::write(&path, b"not a socket").unwrap();
    let err = Daemon::start(&path, DaemonOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
    assert!(path.exists());
}

#[test]
fn line_codec_limits_and_crlf() {
    let mut codec = LineCodec::new(4);
    let mut buf = BytesMut::from(&b"ab\r\nabcd\nab"[..]);
    assert_eq!(codec.decode(&mut buf).unwrap().as_deref(), Some(&b"ab"[..]));
    assert_eq!(
        codec.decode(&mut buf).unwrap().as_deref(),
        Some(&b"abcd"[..])
    );
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert_eq!(
        codec.decode_eof(&mut buf).unwrap().as_deref(),
        Some(&b"ab"[..])
    );
    let mut buf = BytesMut::from(&b"abcde"[..]);
    assert!(matches!(codec.decode(&mut buf), Err(LineError::TooLong(4))));
}

#[test]
fn too_long_line_reply() {
    let line = request::too_long_line(1_048_576);
    assert_eq!(
        line,
        b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32600,\"message\":\"Invalid Request\",\"data\":\"Line exceeds maximum of 1048576 bytes\"},\"id\":null}\n"
    );
}

#[tokio::test]
async fn oversized_line_gets_error_then_close() {
    let fx = start(false).await;
    let mut c = fx.client().await;
    let mut wr = c.wr;
    // The daemon may close before the whole line is written; that is the point.
    let writer = tokio::spawn(async move {
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..=super::conn::MAX_LINE >> 20 {
            if wr.write_all(&chunk).await.is_err() {
                break;
            }
        }
        wr
    });
    let reply = c.lines.next_line().await.unwrap().unwrap();
    assert!(
        reply.contains("\"data\":\"Line exceeds maximum of 16777216 bytes\""),
        "{reply}"
    );
    assert_eq!(
        tokio::time::timeout(WAIT, c.lines.next_line())
            .await
            .unwrap()
            .unwrap(),
        None
    );
    drop(writer.await.unwrap());
}
