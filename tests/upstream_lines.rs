//! How switchyard reads and writes an NDJSON upstream's lines (ndjson.md):
//! a reply ending in CRLF is read without its `\r`, blank and
//! whitespace-only lines are skipped, and a line that is not UTF-8 is
//! dropped and counted; the reply after each of them still reaches its
//! client. A request above the upstream's `max_request_bytes` is refused
//! without leaving a byte of it on the line.

mod common;

use common::clients::{SbClient, Speak};
use common::*;
use switchyard::{app, config::Config};
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

const UPSTREAM_DURATION: &str = "switchyard_upstream_request_duration_seconds";

/// Answers every request with its method and the length of the line it
/// came on; closes the connection at the first line that is not a JSON
/// request (what a strict daemon does with a broken line).
async fn strict_daemon(listener: UnixListener) {
    let (stream, _) = listener.accept().await.expect("accept");
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(req) = serde_json::from_str::<serde_json::Value>(&line) else {
            return;
        };
        let reply = serde_json::json!({
            "jsonrpc": "2.0",
            "id": req["id"],
            "result": {"method": req["method"], "line_bytes": line.len()},
        });
        if write
            .write_all(format!("{reply}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

#[tokio::test]
async fn a_request_above_the_upstream_limit_is_refused_and_leaves_nothing_on_the_line() {
    let (_dir, gateway, url) =
        front_of("pool_size = 1\nmax_request_bytes = 200", strict_daemon).await;
    let mut ws = connect(&url).await;
    let request = |id: u32, method: &str, pad: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"{method}","params":["{}"],"id":{id}}}"#,
            "x".repeat(pad)
        )
    };
    let upstream_durations = || histogram_count(&gateway, UPSTREAM_DURATION);
    // A small call first: the link is up and lines reach the daemon.
    send(&mut ws, &request(1, "small", 10)).await;
    let first = json(&recv(&mut ws).await);
    assert_eq!(first["result"]["method"], "small", "{first}");
    assert_eq!(upstream_durations(), 1, "the answered call's upstream time");
    // Too long for the daemon: refused by switchyard, never written.
    send(&mut ws, &request(2, "big", 300)).await;
    let refused = json(&recv(&mut ws).await);
    assert_eq!(refused["id"], 2, "{refused}");
    let detail = refused["error"].to_string();
    assert!(
        detail.contains("exceeds the upstream limit of 200 bytes"),
        "{refused}"
    );
    // The upstream never saw it: it has no upstream duration.
    assert_eq!(upstream_durations(), 1, "a call never written has none");
    // The next line reaches the daemon whole: nothing of the refused one
    // was left before it (the daemon would have closed the connection).
    send(&mut ws, &request(3, "after", 10)).await;
    let after = json(&recv(&mut ws).await);
    assert_eq!(after["id"], 3, "{after}");
    assert_eq!(after["result"]["method"], "after", "{after}");
    assert_eq!(
        after["result"]["line_bytes"], first["result"]["line_bytes"],
        "the same line as the first call's, but for its method and id of the same lengths"
    );
    assert_eq!(upstream_durations(), 2);
    gateway.shutdown().await;
}

/// Sideband CBOR params are transcoded before the link's locks and then
/// copied into the write queue with their id: the daemon gets the same
/// JSON line a JSON-RPC client's call makes, and a request above the
/// limit is refused on this path too, leaving nothing on the line.
#[tokio::test]
async fn cbor_params_reach_the_line_as_json_and_the_limit_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("upstream.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    tokio::spawn(strict_daemon(listener));
    let toml = stack_toml(&socket, "", "pool_size = 1\nmax_request_bytes = 200").replace(
        "dialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"",
        "dialect = \"sideband\"\naddress = \"127.0.0.1:0\"\npath = \"/sb\"",
    );
    let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let gateway = bound.spawn();
    let mut sb = SbClient::connect(Speak::SidebandCbor, &url).await;
    let request = |id: u32, method: &str, pad: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"{method}","params":["{}",{{"n":-1.5,"t":true}}],"id":{id}}}"#,
            "x".repeat(pad)
        )
    };
    // The line the daemon read: method, params in JSON and the gateway's
    // id, nothing else (the same length as the text it was sent as, but
    // for the gateway id "1" in place of the client's "10").
    sb.send_jsonrpc(&request(10, "small", 10)).await;
    let first = json(&sb.next_jsonrpc().await.expect("reply"));
    assert_eq!(first["id"], 10, "{first}");
    assert_eq!(first["result"]["method"], "small", "{first}");
    let sent = request(10, "small", 10);
    assert_eq!(first["result"]["line_bytes"], sent.len() - 1, "{first}");
    // Above the daemon's limit once transcoded: refused, never written.
    sb.send_jsonrpc(&request(11, "big", 300)).await;
    let refused = json(&sb.next_jsonrpc().await.expect("reply"));
    assert_eq!(refused["id"], 11, "{refused}");
    assert!(
        refused["error"]
            .to_string()
            .contains("exceeds the upstream limit of 200 bytes"),
        "{refused}"
    );
    // The next line reaches the daemon whole (a broken line would have
    // made it close the connection, failing this call).
    sb.send_jsonrpc(&request(12, "after", 10)).await;
    let after = json(&sb.next_jsonrpc().await.expect("reply"));
    assert_eq!(after["id"], 12, "{after}");
    assert_eq!(after["result"]["method"], "after", "{after}");
    assert_eq!(
        after["result"]["line_bytes"], first["result"]["line_bytes"],
        "{after}"
    );
    gateway.shutdown().await;
}
