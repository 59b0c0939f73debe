//! TLS on WebSocket listeners: `wss://` with a certificate generated here,
//! plain `ws://` refused on that port, and the `tls_cert`/`tls_key` checks.
//! TLS to WebSocket upstreams: a `wss://` upstream (switchyard's own TLS
//! listener in front of the reference daemon, its certificate signed by a
//! CA generated here) trusted through `ca_file`, refused with another CA,
//! and `switchyard call --ca-file … wss://…`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::{CertificateDer, ServerName};
use switchyard::config::Config;
use switchyard::daemon::DaemonOptions;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// A self-signed certificate for `localhost`/127.0.0.1, as PEM files.
struct Pems {
    _dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    der: CertificateDer<'static>,
}

fn self_signed() -> Pems {
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let certified = rcgen::generate_simple_self_signed(names).expect("rcgen");
    let dir = tempfile::tempdir().expect("tempdir");
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).expect("write cert");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("write key");
    Pems {
        _dir: dir,
        cert,
        key,
        der: certified.cert.der().clone(),
    }
}

fn tls_keys(cert: &Path, key: &Path) -> String {
    format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"",
        cert.display(),
        key.display()
    )
}

/// Connects over TLS trusting only `der`, then upgrades to WebSocket.
async fn connect_wss(
    url: &str,
    der: &CertificateDer<'static>,
) -> WebSocketStream<TlsStream<TcpStream>> {
    let authority = url
        .strip_prefix("wss://")
        .and_then(|rest| rest.split('/').next())
        .expect("wss URL");
    let tls = connect_tls(authority, der).await;
    let port = authority.rsplit(':').next().expect("port");
    let path = url.splitn(4, '/').nth(3).unwrap_or_default();
    let request = format!("wss://localhost:{port}/{path}");
    let (ws, _) = tokio_tungstenite::client_async(request, tls)
        .await
        .expect("WebSocket upgrade over TLS");
    ws
}

/// A TLS connection to `authority`, trusting only `der`.
async fn connect_tls(authority: &str, der: &CertificateDer<'static>) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der.clone()).expect("trust the test certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(authority).await.expect("tcp connect");
    let name = ServerName::try_from("localhost").expect("server name");
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake")
}

/// Waits until the server ends the connection (EOF or reset): true, or
/// false if it is still open after `secs`.
async fn closed_by_server<S: tokio::io::AsyncRead + Unpin>(stream: &mut S, secs: u64) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// A connection closed for its unfinished handshake or head, `took` after it
/// was opened: not before the configured 300 ms, and well before the 10 s
/// default (a listener that ignored the setting would take 10 s).
fn assert_closed_at_the_header_timeout(took: std::time::Duration, what: &str) {
    assert!(
        took >= std::time::Duration::from_millis(300),
        "{what}: closed after {took:?}, before header_read_timeout_ms = 300"
    );
    assert!(
        took < std::time::Duration::from_secs(6),
        "{what}: closed after {took:?}: the 300 ms setting was not applied (default 10 s)"
    );
}

#[tokio::test]
async fn a_stalled_handshake_or_request_head_is_closed_after_the_header_read_timeout() {
    use tokio::io::AsyncWriteExt;
    let pems = self_signed();
    let keys = tls_keys(&pems.cert, &pems.key);
    let stack = Stack::start(
        &format!("{keys}\nheader_read_timeout_ms = 300"),
        "",
        DaemonOptions::default(),
    )
    .await;
    let authority = stack
        .url
        .strip_prefix("wss://")
        .and_then(|rest| rest.split('/').next())
        .expect("wss URL")
        .to_owned();
    // Each is closed not before the 300 ms configured and well before the
    // built-in 10 s default (measured from the connect).
    // No handshake at all.
    let started = tokio::time::Instant::now();
    let mut silent = TcpStream::connect(&authority).await.expect("connect");
    assert!(
        closed_by_server(&mut silent, 20).await,
        "stalled TLS handshake"
    );
    assert_closed_at_the_header_timeout(started.elapsed(), "stalled TLS handshake");
    // Half a ClientHello.
    let started = tokio::time::Instant::now();
    let mut partial = TcpStream::connect(&authority).await.expect("connect");
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .expect("write");
    assert!(
        closed_by_server(&mut partial, 20).await,
        "partial ClientHello"
    );
    assert_closed_at_the_header_timeout(started.elapsed(), "partial ClientHello");
    // A handshake, then half a request line.
    let started = tokio::time::Instant::now();
    let mut tls = connect_tls(&authority, &pems.der).await;
    tls.write_all(b"GET /rpc HT").await.expect("write");
    tls.flush().await.expect("flush");
    assert!(closed_by_server(&mut tls, 20).await, "stalled request head");
    assert_closed_at_the_header_timeout(started.elapsed(), "stalled request head");
    // A real client is unaffected.
    let mut ws = connect_wss(&stack.url, &pems.der).await;
    ws.send(Message::Text(
        r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#.into(),
    ))
    .await
    .expect("send");
    assert_eq!(json(&common::recv(&mut ws).await)["id"], 1);
    stack.gateway.shutdown().await;
}

#[tokio::test]
async fn wss_serves_json_rpc_and_plain_ws_is_refused() {
    let pems = self_signed();
    let mut stack = Stack::start(
        &tls_keys(&pems.cert, &pems.key),
        "",
        DaemonOptions::default(),
    )
    .await;
    assert!(stack.url.starts_with("wss://127.0.0.1:"), "{}", stack.url);

    let mut ws = connect_wss(&stack.url, &pems.der).await;
    ws.send(Message::Text(
        r#"{"jsonrpc":"2.0","method":"echo","params":{"over":"tls"},"id":1}"#.into(),
    ))
    .await
    .expect("send");
    let reply = json(&common::recv(&mut ws).await);
    assert_eq!(reply["id"], 1);
    assert_eq!(reply["result"]["over"], "tls");

    // A plain WebSocket client on the TLS port gets no upgrade.
    let plain = stack.url.replacen("wss://", "ws://", 1);
    let attempt = tokio::time::timeout(STEP, tokio_tungstenite::connect_async(plain)).await;
    assert!(
        matches!(attempt, Ok(Err(_))),
        "plain ws:// must fail on a TLS listener"
    );
    // ... and the TLS listener still serves afterwards.
    let mut again = connect_wss(&stack.url, &pems.der).await;
    again
        .send(Message::Text(
            r#"{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}"#.into(),
        ))
        .await
        .expect("send");
    assert_eq!(json(&common::recv(&mut again).await)["id"], 2);

    // Graceful shutdown closes upgraded TLS connections with 1001.
    let stopping = tokio::spawn(stack.gateway.shutdown());
    let code = loop {
        let frame = tokio::time::timeout(STEP, ws.next())
            .await
            .expect("timed out waiting for close");
        match frame {
            Some(Ok(Message::Close(f))) => break f.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(code, Some(1001));
    tokio::time::timeout(STEP, stopping)
        .await
        .expect("shutdown finishes")
        .expect("shutdown");
    stack.daemon.take().expect("daemon").stop().await;
}

#[test]
fn tls_cert_without_tls_key_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let toml = stack_toml(&socket, "tls_cert = \"/etc/cert.pem\"", "");
    let error = Config::from_toml(&toml).expect_err("tls_cert alone must be rejected");
    let text = error.to_string();
    assert!(
        text.contains("listeners.public.tls_key: required when tls_cert is set"),
        "{text}"
    );

    let toml = stack_toml(&socket, "tls_key = \"/etc/key.pem\"", "");
    let text = Config::from_toml(&toml)
        .expect_err("tls_key alone")
        .to_string();
    assert!(text.contains("listeners.public.tls_cert"), "{text}");
}

#[test]
fn listeners_sharing_an_address_must_agree_on_tls() {
    let toml = r#"
[listeners.a]
dialect = "jsonrpc-ws"
address = "127.0.0.1:9555"
path = "/a"
tls_cert = "/c.pem"
tls_key = "/k.pem"

[listeners.b]
dialect = "holon-rpc"
address = "127.0.0.1:9555"
path = "/b"

[listeners.n]
dialect = "ndjson"
socket = "/tmp/switchyard-tls-test.sock"
tls_cert = "/c.pem"
tls_key = "/k.pem"

[upstreams.up]
dialect = "ndjson"
socket = "/tmp/switchyard-tls-up.sock"

[[routes]]
listener = "a"
upstream = "up"

[[routes]]
listener = "b"
upstream = "up"

[[routes]]
listener = "n"
upstream = "up"
"#;
    let text = Config::from_toml(toml)
        .expect_err("must be rejected")
        .to_string();
    assert!(
        text.contains("listeners.b: shares its address with listeners.a"),
        "{text}"
    );
    assert!(
        text.contains("listeners.n.tls_cert: not allowed for dialect ndjson"),
        "{text}"
    );
}

#[tokio::test]
async fn unreadable_certificate_fails_at_bind_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let missing = dir.path().join("missing.pem");
    let toml = stack_toml(&socket, &tls_keys(&missing, &missing), "");
    let cfg = Config::from_toml(&toml).expect("paths are checked at bind");
    let error = switchyard::app::bind(cfg)
        .await
        .expect_err("missing certificate");
    let text = error.to_string();
    assert!(
        text.contains("listener public: tls_cert") && text.contains("missing.pem"),
        "{text}"
    );
}

#[tokio::test]
async fn status_page_shows_the_wss_address_of_a_tls_listener() {
    let pems = self_signed();
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let toml = format!(
        "{}\n[admin]\naddress = \"127.0.0.1:0\"\n",
        stack_toml(&socket, &tls_keys(&pems.cert, &pems.key), "")
    );
    let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    assert!(url.starts_with("wss://"), "{url}");
    let admin = bound.admin_addr().expect("admin listener");
    let gateway = bound.spawn();

    let reply = common::http::get(admin, "/", &[]).await;
    let page = reply.text();
    assert_eq!(reply.status, 200, "{page}");
    assert!(page.contains(&url), "the page lacks {url}:\n{page}");
    let plain = url.replacen("wss://", "ws://", 1);
    assert!(!page.contains(&plain), "the page shows {plain}:\n{page}");
    gateway.shutdown().await;
}

/// A CA and a certificate it signed for `localhost`/127.0.0.1, as PEM files.
struct Chain {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn ca_signed() -> Chain {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    // A name of its own: another test CA is then an unknown issuer, not
    // one whose signature does not match.
    static CAS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CAS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("switchyard test CA {n}"));
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let server_key = rcgen::KeyPair::generate().expect("server key");
    let server = rcgen::CertificateParams::new(names)
        .expect("server params")
        .signed_by(&server_key, &ca)
        .expect("server certificate");
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca_path, cert, key) = (
        dir.path().join("ca.pem"),
        dir.path().join("server.pem"),
        dir.path().join("server.key"),
    );
    std::fs::write(&ca_path, ca.pem()).expect("write CA");
    std::fs::write(&cert, server.pem()).expect("write cert");
    std::fs::write(&key, server_key.serialize_pem()).expect("write key");
    Chain {
        _dir: dir,
        ca: ca_path,
        cert,
        key,
    }
}

/// A gateway whose upstream `inner` is the `wss://` URL `url`, with
/// `upstream_extra` lines in its table.
fn wss_upstream_toml(url: &str, upstream_extra: &str) -> String {
    format!(
        r#"
[listeners.public]
dialect = "jsonrpc-ws"
address = "127.0.0.1:0"
path = "/rpc"

[upstreams.inner]
dialect = "jsonrpc-ws"
url = "{url}"
pool_size = 1
backoff_initial_ms = 50
backoff_max_ms = 200
{upstream_extra}

[[routes]]
listener = "public"
upstream = "inner"
"#
    )
}

/// `switchyard call` with `args`, `SSL_CERT_FILE` (the system roots) set
/// to `system_roots`: its exit status, stdout and stderr.
async fn cli_call(args: &[&str], system_roots: &Path) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("call")
        .args(args)
        .env("SSL_CERT_FILE", system_roots)
        .env_remove("SSL_CERT_DIR")
        .output()
        .await
        .expect("run switchyard call");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_wss_upstream_trusted_through_ca_file_carries_calls() {
    let chain = ca_signed();
    let inner = Stack::start(
        &tls_keys(&chain.cert, &chain.key),
        "",
        DaemonOptions::default(),
    )
    .await;
    assert!(inner.url.starts_with("wss://127.0.0.1:"), "{}", inner.url);
    let extra = format!("ca_file = \"{}\"", chain.ca.display());
    let toml = wss_upstream_toml(&inner.url, &extra);
    let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("public").expect("url");
    let outer = bound.spawn();
    wait_connected(&outer, "inner").await;

    let mut ws = connect(&url).await;
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"echo","params":{"via":"wss"},"id":7}"#,
    )
    .await;
    let reply = json(&recv(&mut ws).await);
    assert_eq!(reply["id"], 7, "{reply}");
    assert_eq!(reply["result"]["via"], "wss", "{reply}");
    outer.shutdown().await;
    inner.gateway.shutdown().await;
}

#[tokio::test]
async fn switchyard_call_dials_wss_with_a_ca_file_or_the_system_roots() {
    let (chain, other) = (ca_signed(), ca_signed());
    let inner = Stack::start(
        &tls_keys(&chain.cert, &chain.key),
        "",
        DaemonOptions::default(),
    )
    .await;
    let ca = chain.ca.display().to_string();
    let url = inner.url.as_str();
    let call = [url, "echo", r#"{"over":"tls"}"#];

    // --ca-file: trusted, whatever the system roots are.
    let args = [&["--ca-file", ca.as_str()][..], &call].concat();
    let (ok, stdout, stderr) = cli_call(&args, &other.ca).await;
    assert!(ok, "{stderr}");
    assert_eq!(json(stdout.trim())["result"]["over"], "tls", "{stdout}");

    // No --ca-file: the system roots (SSL_CERT_FILE here) decide.
    let (ok, stdout, stderr) = cli_call(&call, &chain.ca).await;
    assert!(ok, "{stderr}");
    assert_eq!(json(stdout.trim())["result"]["over"], "tls", "{stdout}");
    let (ok, _, stderr) = cli_call(&call, &other.ca).await;
    assert!(!ok, "a certificate the system roots do not vouch for");
    let refused =
        format!("TLS handshake with {url} failed: invalid peer certificate: UnknownIssuer");
    assert!(stderr.contains(&refused), "{stderr}");

    // The wrong CA file is refused the same way.
    let wrong = other.ca.display().to_string();
    let args = [&["--ca-file", wrong.as_str()][..], &call].concat();
    let (ok, _, stderr) = cli_call(&args, &chain.ca).await;
    assert!(!ok, "a CA that did not sign the certificate");
    assert!(stderr.contains(&refused), "{stderr}");
    inner.gateway.shutdown().await;
}

#[tokio::test]
async fn a_wss_upstream_with_the_wrong_ca_is_logged_naming_its_url() {
    use std::io::BufRead;
    let (chain, other) = (ca_signed(), ca_signed());
    let inner = Stack::start(
        &tls_keys(&chain.cert, &chain.key),
        "",
        DaemonOptions::default(),
    )
    .await;
    // A credential in the URL stays out of the log line.
    let url = format!("{}?access_token=s3cret", inner.url);
    // No attempt cut short on a busy machine: the first failure (the one
    // logged at warn) is the TLS one.
    let extra = format!(
        "ca_file = \"{}\"\nconnect_timeout_ms = 30000",
        other.ca.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("switchyard.toml");
    std::fs::write(&config, wss_upstream_toml(&url, &extra)).expect("write config");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["run", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn switchyard");
    let stderr = child.stderr.take().expect("stderr piped");
    let shown = format!("{}?access_token=***", inner.url);
    let needle = shown.clone();
    // Read on a blocking thread: the TLS upstream runs on this runtime.
    let line = tokio::task::spawn_blocking(move || {
        let wanted = |l: &str| {
            l.contains("upstream connect failed")
                && l.contains(&needle)
                && l.contains("TLS handshake failed")
        };
        let mut seen = Vec::new();
        // Ends at the line, or when the child's stderr closes (the test
        // kills it after a generous timeout).
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if wanted(&line) {
                return Ok(line);
            }
            seen.push(line);
        }
        Err(seen.join("\n"))
    });
    // Generous: the machine may be busy; returns as soon as the line is in.
    let line = tokio::time::timeout(std::time::Duration::from_secs(60), line).await;
    // Best effort: the child may have exited already.
    let _ = child.kill();
    let _ = child.wait();
    let line = match line {
        Ok(Ok(Ok(line))) => line,
        Ok(Ok(Err(seen))) => panic!("no connect failure naming {shown}:\n{seen}"),
        Ok(Err(e)) => panic!("reader: {e}"),
        Err(_) => panic!("no connect failure naming {shown} in time"),
    };
    assert!(!line.contains("s3cret"), "{line}");
    inner.gateway.shutdown().await;
}

#[test]
fn ca_file_applies_to_wss_upstreams_only() {
    let toml = wss_upstream_toml("ws://127.0.0.1:9/rpc", "ca_file = \"/ca.pem\"");
    let text = Config::from_toml(&toml)
        .expect_err("ca_file on ws://")
        .to_string();
    assert!(
        text.contains("upstreams.inner.ca_file: applies to wss:// URLs only"),
        "{text}"
    );
    let toml = wss_upstream_toml("wss://127.0.0.1:9/rpc", "ca_file = \"/ca.pem\"");
    let cfg = Config::from_toml(&toml).expect("ca_file on wss://");
    assert_eq!(
        cfg.upstreams[0].ca_file.as_deref(),
        Some(Path::new("/ca.pem"))
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = stack_toml(&dir.path().join("d.sock"), "", "ca_file = \"/ca.pem\"");
    let text = Config::from_toml(&toml)
        .expect_err("ca_file on ndjson")
        .to_string();
    assert!(
        text.contains("upstreams.daemon.ca_file: not allowed for dialect ndjson"),
        "{text}"
    );
}
