//! Reloads that add and remove listeners, and that change the method
//! policy under an established connection.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::common::*;
use super::{config_text, setup, start, TOKEN};
use switchyard::client::reload::{reload, Reloaded};

/// A Unix (NDJSON) listener `local` at `path`, routed to the daemon.
fn local(path: &std::path::Path) -> String {
    format!(
        "[listeners.local]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [[routes]]\nlistener = \"local\"\nupstream = \"daemon\"\n",
        path.display()
    )
}

/// One NDJSON echo over `stream`.
async fn echo_line(lines: &mut BufReader<UnixStream>, n: u64) -> serde_json::Value {
    let line = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":[{n}],\"id\":{n}}}\n");
    lines
        .get_mut()
        .write_all(line.as_bytes())
        .await
        .expect("write");
    let mut answer = String::new();
    let read = tokio::time::timeout(STEP, lines.read_line(&mut answer)).await;
    assert!(matches!(read, Ok(Ok(n)) if n > 0), "{read:?}");
    json(&answer)
}

#[tokio::test]
async fn reloads_add_and_remove_listeners_and_a_bind_failure_changes_nothing() {
    let s = setup(&format!("reload_token = \"{TOKEN}\"")).await;
    let (gateway, url, admin) = start(&s.file).await;
    let go =
        |admin: String| async move { reload(&admin, Some(TOKEN), Duration::from_secs(30)).await };
    // A listener that cannot be bound (its port is taken) rejects the
    // whole reload, the other new listener included.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let admin_line = format!("reload_token = \"{TOKEN}\"");
    let path = s.dir.path().join("local.sock");
    let busy = format!(
        "{}\n[listeners.busy]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:{port}\"\npath = \"/rpc\"\n",
        local(&path)
    );
    std::fs::write(&s.file, config_text(&s.socket, &admin_line, &busy)).expect("write");
    match go(admin.clone()).await {
        Ok(Reloaded::Rejected(problems)) => {
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].contains("listener busy"), "{problems:?}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(!path.exists(), "nothing bound");
    assert_eq!(
        metric_value(&gateway, "switchyard_config_generation", &[]),
        1.0
    );
    // Added: bound and serving.
    let text = config_text(&s.socket, &admin_line, &local(&path));
    std::fs::write(&s.file, text).expect("write");
    assert!(matches!(go(admin.clone()).await, Ok(Reloaded::Ok(2))));
    let stream = UnixStream::connect(&path).await.expect("connect");
    let mut lines = BufReader::new(stream);
    assert_eq!(echo_line(&mut lines, 1).await["result"][0], 1);
    // Removed: no new connections; the open one is closed once drained.
    std::fs::write(&s.file, config_text(&s.socket, &admin_line, "")).expect("write");
    assert!(matches!(go(admin.clone()).await, Ok(Reloaded::Ok(3))));
    assert!(
        eventually(Duration::from_secs(30), || !path.exists()).await,
        "socket file still there"
    );
    assert!(UnixStream::connect(&path).await.is_err());
    let mut rest = String::new();
    let eof = tokio::time::timeout(Duration::from_secs(30), lines.read_line(&mut rest)).await;
    assert!(matches!(eof, Ok(Ok(0)) | Ok(Err(_))), "{eof:?} {rest}");
    // The WebSocket listener was kept all along.
    let mut ws = connect(&url).await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[4],"id":4}"#,
    )
    .await;
    assert_eq!(json(&recv(&mut ws).await)["result"][0], 4);
    gateway.shutdown().await;
    s.daemon.stop().await;
}

#[tokio::test]
async fn a_reloaded_policy_applies_to_established_connections() {
    let s = setup(&format!("reload_token = \"{TOKEN}\"")).await;
    let (gateway, url, admin) = start(&s.file).await;
    let mut ws = connect(&url).await;
    let call = r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#;
    send(&mut ws, call).await;
    assert_eq!(json(&recv(&mut ws).await)["result"][0], 1);
    // `deny_methods` on the listener: appended to the `public` table.
    let before = std::fs::read_to_string(&s.file).expect("read");
    let denied = before.replace(
        "path = \"/rpc\"\n",
        "path = \"/rpc\"\ndeny_methods = [\"ech*\"]\n",
    );
    assert_ne!(before, denied);
    std::fs::write(&s.file, denied).expect("write");
    let outcome = reload(&admin, Some(TOKEN), Duration::from_secs(30)).await;
    assert!(matches!(outcome, Ok(Reloaded::Ok(2))), "{outcome:?}");
    send(&mut ws, call).await;
    let refused = json(&recv(&mut ws).await);
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    assert_eq!(refused["error"]["data"], "forbidden by policy");
    std::fs::write(&s.file, before).expect("write");
    let outcome = reload(&admin, Some(TOKEN), Duration::from_secs(30)).await;
    assert!(matches!(outcome, Ok(Reloaded::Ok(3))), "{outcome:?}");
    send(&mut ws, call).await;
    assert_eq!(json(&recv(&mut ws).await)["result"][0], 1);
    gateway.shutdown().await;
    s.daemon.stop().await;
}

#[tokio::test]
async fn a_websocket_listener_added_by_reload_serves_and_its_removal_drains_it() {
    let s = setup(&format!("reload_token = \"{TOKEN}\"")).await;
    let (gateway, _, admin) = start(&s.file).await;
    let admin_line = format!("reload_token = \"{TOKEN}\"");
    // Another address (all of 127.0.0.2 is loopback too): a new server.
    let extra = "[listeners.extra]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.2:0\"\n\
                 path = \"/x\"\n\n[[routes]]\nlistener = \"extra\"\nupstream = \"daemon\"\n";
    std::fs::write(&s.file, config_text(&s.socket, &admin_line, extra)).expect("write");
    let outcome = reload(&admin, Some(TOKEN), Duration::from_secs(30)).await;
    assert!(matches!(outcome, Ok(Reloaded::Ok(2))), "{outcome:?}");
    // Its bound port is on the admin answers' CSP (read per answer).
    let (_, headers, _) = tokio::task::spawn_blocking({
        let admin = admin.clone();
        move || super::common::demo::http_get(&format!("{admin}/livez"), &[])
    })
    .await
    .expect("get");
    let csp = headers
        .iter()
        .find(|(n, _)| n == "content-security-policy")
        .map(|(_, v)| v.clone())
        .expect("CSP");
    let port = csp
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ws://127.0.0.2:"))
        .expect("the new listener in connect-src")
        .to_owned();
    let mut ws = connect(&format!("ws://127.0.0.2:{port}/x")).await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[5],"id":5}"#,
    )
    .await;
    assert_eq!(json(&recv(&mut ws).await)["result"][0], 5);
    // Removed: its open connection is closed as on shutdown (1001).
    std::fs::write(&s.file, config_text(&s.socket, &admin_line, "")).expect("write");
    let outcome = reload(&admin, Some(TOKEN), Duration::from_secs(30)).await;
    assert!(matches!(outcome, Ok(Reloaded::Ok(3))), "{outcome:?}");
    assert_eq!(expect_close(&mut ws).await.0, 1001);
    gateway.shutdown().await;
    s.daemon.stop().await;
}

#[tokio::test]
async fn listeners_sharing_an_address_change_while_it_serves() {
    use super::common::clients::{Speak, TestClient};
    let s = setup(&format!("reload_token = \"{TOKEN}\"")).await;
    let (gateway, url, admin) = start(&s.file).await;
    let admin_line = format!("reload_token = \"{TOKEN}\"");
    let mut old = connect(&url).await;
    send(
        &mut old,
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#,
    )
    .await;
    assert_eq!(json(&recv(&mut old).await)["result"][0], 1);
    // `public` turns holon-rpc on the same address and path (remove + add),
    // and `second` joins the address on its own path.
    let text = config_text(&s.socket, &admin_line, "")
        .replace("dialect = \"jsonrpc-ws\"", "dialect = \"holon-rpc\"")
        + "[listeners.second]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\n\
           path = \"/second\"\n\n[[routes]]\nlistener = \"second\"\nupstream = \"daemon\"\n";
    std::fs::write(&s.file, text).expect("write");
    let outcome = reload(&admin, Some(TOKEN), Duration::from_secs(30)).await;
    assert!(matches!(outcome, Ok(Reloaded::Ok(2))), "{outcome:?}");
    // The JSON-RPC connection of the replaced listener drains and closes.
    assert_eq!(expect_close(&mut old).await.0, 1001);
    let mut h = TestClient::connect(Speak::Holon, &url).await;
    h.send(r#"{"jsonrpc":"2.0","id":"7","method":"echo","params":{"x":1}}"#)
        .await;
    assert_eq!(json(&h.recv().await)["result"]["x"], 1);
    let second = url.replace("/rpc", "/second");
    let mut ws = connect(&second).await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}"#,
    )
    .await;
    assert_eq!(json(&recv(&mut ws).await)["result"][0], 2);
    // And `second` leaves again: 404 for new upgrades, 1001 for its own.
    std::fs::write(
        &s.file,
        config_text(&s.socket, &admin_line, "")
            .replace("dialect = \"jsonrpc-ws\"", "dialect = \"holon-rpc\""),
    )
    .expect("write");
    let outcome = reload(&admin, Some(TOKEN), Duration::from_secs(30)).await;
    assert!(matches!(outcome, Ok(Reloaded::Ok(3))), "{outcome:?}");
    assert_eq!(expect_close(&mut ws).await.0, 1001);
    match tokio_tungstenite::connect_async(second.as_str()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 404)
        }
        other => panic!("expected HTTP 404, got {other:?}"),
    }
    h.send(r#"{"jsonrpc":"2.0","id":"8","method":"echo","params":{"x":2}}"#)
        .await;
    assert_eq!(json(&h.recv().await)["result"]["x"], 2);
    gateway.shutdown().await;
    s.daemon.stop().await;
}
