//! The NDJSON Unix listener: socket lifecycle and line handling
//! (ndjson-unix.md §9 "As a server").

mod common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use switchyard::config::Config;
use switchyard::daemon::{Daemon, DaemonOptions};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

struct Local {
    _dir: tempfile::TempDir,
    daemon: Daemon,
    socket: PathBuf,
    gateway: switchyard::app::Running,
}

fn toml(listen: &Path, daemon: &Path, extra: &str) -> String {
    format!(
        "[listeners.local]\ndialect = \"ndjson\"\nsocket = \"{}\"\n{extra}\n\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [[routes]]\nlistener = \"local\"\nupstream = \"daemon\"\n",
        listen.display(),
        daemon.display()
    )
}

async fn start(extra: &str) -> Local {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&dir.path().join("d.sock"), DaemonOptions::default())
        .await
        .expect("daemon");
    let socket = dir.path().join("run").join("sy.sock");
    let cfg = Config::from_toml(&toml(&socket, daemon.path(), extra)).expect("config");
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let gateway = bound.spawn();
    common::wait_connected(&gateway, "daemon").await;
    Local {
        _dir: dir,
        daemon,
        socket,
        gateway,
    }
}

async fn line(reader: &mut (impl AsyncBufReadExt + Unpin)) -> String {
    let mut s = String::new();
    let n = tokio::time::timeout(common::STEP, reader.read_line(&mut s))
        .await
        .expect("line in time")
        .expect("read");
    assert!(n > 0, "connection closed while a line was expected");
    s.trim_end_matches('\n').to_owned()
}

#[tokio::test]
async fn socket_is_0600_in_a_0700_dir_and_removed_on_shutdown() {
    let local = start("").await;
    let meta = std::fs::metadata(&local.socket).expect("socket exists");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let parent = std::fs::metadata(local.socket.parent().expect("parent")).expect("dir");
    assert_eq!(parent.permissions().mode() & 0o777, 0o700);
    local.gateway.shutdown().await;
    assert!(!local.socket.exists(), "socket file left behind");
    local.daemon.stop().await;
}

#[tokio::test]
async fn lines_parse_errors_crlf_empty_lines_and_eof() {
    let local = start("").await;
    let stream = UnixStream::connect(&local.socket).await.expect("connect");
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    write.write_all(b"{not json\n").await.expect("write");
    assert_eq!(
        line(&mut reader).await,
        r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#
    );
    write.write_all(b"\xff\xfe\n").await.expect("write");
    assert_eq!(json(&line(&mut reader).await)["error"]["code"], -32700);
    // Empty lines are skipped; CRLF works; the connection stayed open.
    write
        .write_all(b"\n\r\n{\"jsonrpc\":\"2.0\",\"method\":\"sum\",\"params\":[1,2],\"id\":1}\r\n")
        .await
        .expect("write");
    assert_eq!(
        line(&mut reader).await,
        r#"{"jsonrpc":"2.0","result":3,"id":1}"#
    );
    // A final line without \n is processed at EOF, then answered before close.
    write
        .write_all(br#"{"jsonrpc":"2.0","method":"sleep","params":[100],"id":2}"#)
        .await
        .expect("write");
    write.shutdown().await.expect("half-close");
    assert_eq!(
        line(&mut reader).await,
        r#"{"jsonrpc":"2.0","result":100,"id":2}"#
    );
    let mut rest = Vec::new();
    let n = tokio::time::timeout(common::STEP, reader.read_to_end(&mut rest))
        .await
        .expect("close")
        .expect("read");
    assert_eq!(n, 0, "unexpected trailing output: {rest:?}");
    local.gateway.shutdown().await;
    local.daemon.stop().await;
}

#[tokio::test]
async fn over_long_line_gets_the_error_then_close() {
    let local = start("max_message_bytes = 64").await;
    let stream = UnixStream::connect(&local.socket).await.expect("connect");
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let long = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":["{}"],"id":1}}"#,
        "x".repeat(100)
    );
    write.write_all(long.as_bytes()).await.expect("write");
    write.write_all(b"\n").await.expect("write");
    assert_eq!(
        line(&mut reader).await,
        r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request","data":"Line exceeds maximum of 64 bytes"},"id":null}"#
    );
    let mut rest = Vec::new();
    let n = tokio::time::timeout(common::STEP, reader.read_to_end(&mut rest))
        .await
        .expect("close")
        .expect("read");
    assert_eq!(n, 0);
    local.gateway.shutdown().await;
    local.daemon.stop().await;
}

#[tokio::test]
async fn stale_socket_is_replaced_but_live_sockets_and_other_files_are_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&dir.path().join("d.sock"), DaemonOptions::default())
        .await
        .expect("daemon");
    // A stale socket: bound, then its listener dropped (nothing answers).
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind"));
    let cfg = Config::from_toml(&toml(&stale, daemon.path(), "")).expect("config");
    let bound = switchyard::app::bind(cfg.clone())
        .await
        .expect("stale socket replaced");
    // While it is live, a second gateway on the same path refuses to start.
    let err = switchyard::app::bind(cfg)
        .await
        .expect_err("already running");
    assert!(err.to_string().contains("already running"), "{err}");
    drop(bound);
    // A regular file at the path is never deleted.
    let file = dir.path().join("file.sock");
    std::fs::write(&file, b"precious").expect("write");
    let cfg = Config::from_toml(&toml(&file, daemon.path(), "")).expect("config");
    let err = switchyard::app::bind(cfg).await.expect_err("not a socket");
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&file).expect("still there"), b"precious");
    daemon.stop().await;
}

#[tokio::test]
async fn notifications_are_never_answered_and_batches_work() {
    let local = start("").await;
    let stream = UnixStream::connect(&local.socket).await.expect("connect");
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    write
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notify_hello\",\"params\":[7]}\n")
        .await
        .expect("write");
    write.write_all(b"[{\"jsonrpc\":\"2.0\",\"method\":\"sum\",\"params\":[1,2,4],\"id\":\"1\"},{\"jsonrpc\":\"2.0\",\"method\":\"notify_hello\",\"params\":[7]}]\n").await.expect("write");
    assert_eq!(
        line(&mut reader).await,
        r#"[{"jsonrpc":"2.0","result":7,"id":"1"}]"#
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    local.gateway.shutdown().await;
    local.daemon.stop().await;
}

fn json(text: &str) -> serde_json::Value {
    common::json(text)
}

#[tokio::test]
async fn idle_connections_are_closed() {
    let local = start("idle_timeout_ms = 200").await;
    let stream = UnixStream::connect(&local.socket).await.expect("connect");
    let (read, _write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut rest = Vec::new();
    let started = std::time::Instant::now();
    let n = tokio::time::timeout(common::STEP, reader.read_to_end(&mut rest))
        .await
        .expect("closed in time")
        .expect("read");
    assert_eq!(n, 0);
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
    local.gateway.shutdown().await;
    local.daemon.stop().await;
}
