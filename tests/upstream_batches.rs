//! Client batches towards an upstream configured with `accepts_batches`:
//! one array line upstream with rewritten ids, replies mapped back by id,
//! and a batch-wide error applied to every request in it.

mod common;

use common::*;
use switchyard::daemon::DaemonOptions;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

#[tokio::test]
async fn batches_go_upstream_as_one_array_and_come_back_in_order() {
    let stack = Stack::start(
        "",
        "accepts_batches = true\npool_size = 1",
        DaemonOptions::default(),
    )
    .await;
    let mut ws = stack.client().await;
    send(&mut ws, r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"jsonrpc":"2.0","method":"notify_hello","params":[7]},{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":"2"},{"foo":"boo"},{"jsonrpc":"2.0","method":"foo.get","params":{"name":"myself"},"id":"5"},{"jsonrpc":"2.0","method":"get_data","id":"9"}]"#).await;
    assert_eq!(
        recv(&mut ws).await,
        concat!(
            r#"[{"jsonrpc":"2.0","result":7,"id":"1"},"#,
            r#"{"jsonrpc":"2.0","result":19,"id":"2"},"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null},"#,
            r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":"5"},"#,
            r#"{"jsonrpc":"2.0","result":["hello",5],"id":"9"}]"#
        )
    );
    stack.gateway.shutdown().await;
}

/// Records the first line it reads, then answers it with one batch-wide
/// error without id.
async fn batch_refuser(listener: UnixListener, seen: tokio::sync::oneshot::Sender<String>) {
    let (stream, _) = listener.accept().await.expect("accept");
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    if let Ok(Some(line)) = lines.next_line().await {
        let _ = seen.send(line);
        let err = "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32000,\"message\":\"batches disabled\"},\"id\":null}\n";
        write.write_all(err.as_bytes()).await.expect("write");
    }
    // Keep the connection open until the gateway closes it.
    while let Ok(Some(_)) = lines.next_line().await {}
}

#[tokio::test]
async fn a_batch_wide_error_answers_every_request_of_the_batch() {
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel();
    let (_dir, gateway, url) = front_of("accepts_batches = true\npool_size = 1", |listener| {
        batch_refuser(listener, seen_tx)
    })
    .await;
    let mut ws = connect(&url).await;
    send(&mut ws, r#"[{"jsonrpc":"2.0","method":"a","id":"x"},{"jsonrpc":"2.0","method":"b","params":[1]},{"jsonrpc":"2.0","method":"c","id":"y"}]"#).await;
    let reply = json(&recv(&mut ws).await);
    // Upstream saw one array with gateway ids, never the client's ids.
    let line = seen_rx.await.expect("line");
    let sent = json(&line);
    let items = sent.as_array().expect("one array line upstream");
    assert_eq!(items.len(), 3);
    assert!(items[0]["id"].is_u64() && items[2]["id"].is_u64(), "{line}");
    assert!(items[1].get("id").is_none(), "{line}");
    let replies = reply.as_array().expect("batch reply");
    assert_eq!(replies.len(), 2);
    for (r, id) in replies.iter().zip(["x", "y"]) {
        assert_eq!(r["id"], id);
        assert_eq!(r["error"]["code"], -32000);
        assert_eq!(r["error"]["message"], "batches disabled");
    }
    gateway.shutdown().await;
}
