//! How switchyard reads an NDJSON upstream's lines (ndjson.md): a reply
//! ending in CRLF is read without its `\r`, blank and whitespace-only lines
//! are skipped, and a line that is not UTF-8 is dropped and counted; the
//! reply after each of them still reaches its client.

mod common;

use common::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

/// Answers every request with a blank line, a whitespace-only line, a line
/// that is not UTF-8 and then its reply, CRLF-terminated, whose result is
/// the request's method.
async fn quirky_daemon(listener: UnixListener) {
    let (stream, _) = listener.accept().await.expect("accept");
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let req = json(&line);
        let reply = format!(
            "\n \t\r\n{}\r\n",
            serde_json::json!({"jsonrpc": "2.0", "id": req["id"], "result": req["method"]})
        );
        let mut bytes = reply.into_bytes();
        // A line of bytes that are not UTF-8, before the reply.
        bytes.splice(0..0, *b"\xff\xfe\xfd\n");
        if write.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn crlf_blank_and_non_utf8_lines_from_the_upstream_are_handled() {
    let (_dir, gateway, url) = front_of("pool_size = 1", quirky_daemon).await;
    let mut ws = connect(&url).await;
    for (id, method) in [(1, "first"), (2, "second.one")] {
        send(
            &mut ws,
            &format!(r#"{{"jsonrpc":"2.0","method":"{method}","id":{id}}}"#),
        )
        .await;
        // The result is exactly the method: nothing of the `\r` or of the
        // lines before it is left in the reply.
        assert_eq!(
            recv(&mut ws).await,
            format!(r#"{{"jsonrpc":"2.0","result":"{method}","id":{id}}}"#)
        );
    }
    let invalid = [
        ("dialect", "ndjson"),
        ("side", "upstream"),
        ("reason", "invalid_message"),
    ];
    // One line that is not UTF-8 before each reply.
    let counted = metric_value(&gateway, "switchyard_protocol_errors_total", &invalid);
    assert_eq!(counted, 2.0, "non-UTF-8 lines counted");
    gateway.shutdown().await;
}
