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

mod lines;
mod subscribe;

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
