//! JWT bearer tokens (`[listeners.<name>.jwt]`) on a WebSocket listener and
//! a `jsonrpc-http` listener: tokens signed in the test with keys generated
//! in the test (rcgen, ECDSA P-256), checked by the gateway against a PEM
//! public key file or a JWKS file. Valid, expired, wrong audience, wrong
//! issuer, wrong key and `alg: none` tokens; the claim naming a client;
//! an open connection closed when its token expires; a JWKS rotated by a
//! reload; tokens kept out of the logs.

mod common;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use common::clients::{Speak, TestClient};
use common::curl::curl;
use common::json;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use switchyard::app::Running;
use switchyard::config::Config;
use switchyard::daemon::{Daemon, DaemonOptions};

const ISSUER: &str = "https://idp.test";
const AUDIENCE: &str = "switchyard";

/// A signing key generated for the test.
struct Key(rcgen::KeyPair);

impl Key {
    fn new() -> Key {
        Key(rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key"))
    }

    fn public_pem(&self) -> String {
        self.0.public_key_pem()
    }

    /// The public key as a JWK with `kid`.
    fn jwk(&self, kid: &str) -> Value {
        let raw = self.0.public_key_raw();
        assert_eq!((raw.len(), raw[0]), (65, 4), "an uncompressed P-256 point");
        json!({
            "kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
            "x": URL_SAFE_NO_PAD.encode(&raw[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&raw[33..]),
        })
    }

    fn sign(&self, kid: Option<&str>, claims: &Value) -> String {
        let key =
            EncodingKey::from_ec_pem(self.0.serialize_pem().as_bytes()).expect("encoding key");
        let mut header = Header::new(Algorithm::ES256);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &key).expect("sign")
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// Claims for `sub`, expiring `ttl` seconds from now (negative: past).
fn claims(sub: &str, ttl: i64) -> Value {
    json!({
        "sub": sub,
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": now(),
        "exp": now().saturating_add_signed(ttl),
    })
}

/// The `[jwt]` table and clients of a listener `name`: the named client
/// `operator` (no static token: JWTs only) may not `echo`; any other
/// subject gets the listener's policy (no `sum`).
fn listener_tables(name: &str, keys: &str) -> String {
    format!(
        r#"deny_methods = ["sum"]

[listeners.{name}.jwt]
{keys}
algorithms = ["ES256"]
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
leeway_secs = 0
unknown_client = "listener"

[[listeners.{name}.clients]]
name = "operator"
deny_methods = ["echo"]
"#
    )
}

struct Gateway {
    dir: tempfile::TempDir,
    daemon: Option<Daemon>,
    gateway: Running,
    ws: String,
    http: String,
    file: std::path::PathBuf,
}

impl Gateway {
    /// A `jsonrpc-ws` listener `ws` and a `jsonrpc-http` listener `web`,
    /// both taking JWTs checked with `keys` (TOML lines naming the key
    /// file, written into the temp dir by `write`).
    async fn start(write: impl FnOnce(&Path) -> String) -> Gateway {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("daemon.sock");
        let daemon = Daemon::start(&socket, DaemonOptions::default())
            .await
            .expect("daemon");
        let keys = write(dir.path());
        let mut toml = String::new();
        for (name, dialect) in [("ws", "jsonrpc-ws"), ("web", "jsonrpc-http")] {
            toml.push_str(&format!(
                "[listeners.{name}]\ndialect = \"{dialect}\"\naddress = \"127.0.0.1:0\"\npath = \"/{name}\"\n{}\n",
                listener_tables(name, &keys)
            ));
        }
        toml.push_str(&format!(
            "[upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
             [[routes]]\nlistener = \"ws\"\nupstream = \"daemon\"\n\n\
             [[routes]]\nlistener = \"web\"\nupstream = \"daemon\"\n",
            socket.display()
        ));
        let file = dir.path().join("switchyard.toml");
        std::fs::write(&file, &toml).expect("write");
        let cfg = Config::load(Some(&file)).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let bound = switchyard::app::bind(cfg).await.expect("bind");
        let ws = bound.ws_url("ws").expect("url");
        let http = bound
            .ws_url("web")
            .expect("url")
            .replacen("ws://", "http://", 1);
        let gateway = bound.reload_from(Some(file.clone())).spawn();
        common::wait_connected(&gateway, "daemon").await;
        Gateway {
            dir,
            daemon: Some(daemon),
            gateway,
            ws,
            http,
            file,
        }
    }

    /// A gateway checking tokens against `key`'s PEM public key.
    async fn with_pem(key: &Key) -> Gateway {
        let pem = key.public_pem();
        Gateway::start(move |dir| {
            let path = dir.join("idp.pem");
            std::fs::write(&path, pem).expect("pem");
            format!("key_file = \"{}\"", path.display())
        })
        .await
    }

    /// The WebSocket upgrade's status with `token` as a bearer header (or
    /// 101 when it is accepted).
    async fn upgrade_status(&self, token: &str) -> u16 {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut req = self.ws.as_str().into_client_request().expect("request");
        req.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("header"),
        );
        let answer = tokio::time::timeout(common::STEP, tokio_tungstenite::connect_async(req))
            .await
            .expect("an answer");
        match answer {
            Ok((_, resp)) => resp.status().as_u16(),
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => resp.status().as_u16(),
            Err(e) => panic!("upgrade: {e}"),
        }
    }

    /// `POST` of one call to the HTTP listener with `token`: status and body.
    async fn post(&self, token: &str, method: &str) -> (u16, String) {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{}},"id":1}}"#);
        let auth = format!("Authorization: Bearer {token}");
        let a = curl(&[
            "-H",
            "Content-Type: application/json",
            "-H",
            &auth,
            "--data-binary",
            &body,
            &self.http,
        ])
        .await;
        (a.status, a.body)
    }

    async fn client(&self, token: &str) -> TestClient {
        TestClient::connect(Speak::JsonRpc, &format!("{}?token={token}", self.ws)).await
    }

    async fn stop(mut self) {
        self.gateway.shutdown().await;
        if let Some(d) = self.daemon.take() {
            d.stop().await;
        }
    }
}

async fn call(c: &mut TestClient, id: &str, method: &str) -> Value {
    c.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"{method}","params":{{}},"id":"{id}"}}"#
    ))
    .await;
    let reply = json(&c.recv().await);
    assert_eq!(reply["id"], json!(id), "{reply}");
    reply
}

fn forbidden(reply: &Value) -> bool {
    reply["error"]["code"] == -32001 && reply["error"]["data"] == "forbidden by policy"
}

/// `alg: none`, built by hand from a valid token's claims: no signature.
fn unsigned(claims: &Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let body = URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("{header}.{body}.")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_valid_token_gets_in_on_websocket_and_http() {
    let key = Key::new();
    let gw = Gateway::with_pem(&key).await;
    let valid = key.sign(None, &claims("alice", 3600));
    assert_eq!(gw.upgrade_status(&valid).await, 101);
    let (status, body) = gw.post(&valid, "get_data").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["result"], json!(["hello", 5]), "{body}");

    let mut wrong_aud = claims("alice", 3600);
    wrong_aud["aud"] = json!("someone-else");
    let mut wrong_iss = claims("alice", 3600);
    wrong_iss["iss"] = json!("https://evil.test");
    let mut no_exp = claims("alice", 3600);
    no_exp.as_object_mut().expect("object").remove("exp");
    let refused = [
        ("expired", key.sign(None, &claims("alice", -60))),
        ("wrong audience", key.sign(None, &wrong_aud)),
        ("wrong issuer", key.sign(None, &wrong_iss)),
        ("no exp", key.sign(None, &no_exp)),
        ("wrong key", Key::new().sign(None, &claims("alice", 3600))),
        ("alg none", unsigned(&claims("alice", 3600))),
        ("not a JWT", "alice".to_owned()),
    ];
    for (what, token) in &refused {
        assert_eq!(gw.upgrade_status(token).await, 401, "{what}");
        let (status, body) = gw.post(token, "get_data").await;
        assert_eq!(status, 401, "{what}: {body}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subject_claim_picks_a_named_clients_policy() {
    let key = Key::new();
    let gw = Gateway::with_pem(&key).await;
    // `operator` is a named client: no echo, but sum.
    let mut operator = gw.client(&key.sign(None, &claims("operator", 3600))).await;
    assert!(forbidden(&call(&mut operator, "1", "echo").await));
    let r = call(&mut operator, "2", "sum").await;
    assert!(!forbidden(&r), "{r}");
    // Any other subject: the listener's policy, echo but no sum.
    let mut anyone = gw.client(&key.sign(None, &claims("alice", 3600))).await;
    assert!(forbidden(&call(&mut anyone, "3", "sum").await));
    let r = call(&mut anyone, "4", "echo").await;
    assert!(!forbidden(&r), "{r}");
    // The same over HTTP.
    let operator_token = key.sign(None, &claims("operator", 3600));
    let (_, body) = gw.post(&operator_token, "echo").await;
    assert!(forbidden(&json(&body)), "{body}");
    let (_, body) = gw
        .post(&key.sign(None, &claims("alice", 3600)), "sum")
        .await;
    assert!(forbidden(&json(&body)), "{body}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_connection_closes_when_its_token_expires() {
    let key = Key::new();
    let gw = Gateway::with_pem(&key).await;
    // Expires in three seconds (leeway 0): let in, then closed at expiry.
    let token = key.sign(None, &claims("operator", 3));
    let mut ws = common::connect(&format!("{}?token={token}", gw.ws)).await;
    common::send(&mut ws, r#"{"jsonrpc":"2.0","method":"get_data","id":1}"#).await;
    assert_eq!(
        json(&common::recv(&mut ws).await)["result"],
        json!(["hello", 5])
    );
    let (code, reason) = common::expect_close(&mut ws).await;
    assert_eq!((code, reason.as_str()), (1008, "credential expired"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_picks_the_key_by_kid_and_a_reload_rereads_it() {
    let (old, new) = (Key::new(), Key::new());
    let old_jwk = old.jwk("old");
    let gw = Gateway::start(move |dir| {
        let path = dir.join("jwks.json");
        std::fs::write(&path, json!({ "keys": [old_jwk] }).to_string()).expect("jwks");
        format!("jwks_file = \"{}\"", path.display())
    })
    .await;
    let by_old = old.sign(Some("old"), &claims("alice", 3600));
    let by_new = new.sign(Some("new"), &claims("alice", 3600));
    assert_eq!(gw.upgrade_status(&by_old).await, 101);
    assert_eq!(gw.upgrade_status(&by_new).await, 401);
    // Rotation: the set now holds only the new key.
    std::fs::write(
        gw.dir.path().join("jwks.json"),
        json!({ "keys": [new.jwk("new")] }).to_string(),
    )
    .expect("rewrite");
    gw.gateway.reload().await.expect("reload");
    assert_eq!(gw.upgrade_status(&by_new).await, 101);
    assert_eq!(gw.upgrade_status(&by_old).await, 401);
    let _ = &gw.file;
    gw.stop().await;
}

fn problems(jwt: &str) -> String {
    let toml = format!(
        "[listeners.ws]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/ws\"\n\
         [listeners.ws.jwt]\n{jwt}\n\n\
         [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"/tmp/never.sock\"\n\n\
         [[routes]]\nlistener = \"ws\"\nupstream = \"daemon\"\n"
    );
    match Config::from_toml(&toml) {
        Ok(_) => panic!("expected problems:\n{toml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn none_and_hmac_algorithms_and_missing_keys_are_configuration_problems() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pem = dir.path().join("k.pem");
    std::fs::write(&pem, Key::new().public_pem()).expect("pem");
    let key = format!("key_file = \"{}\"", pem.display());
    for alg in ["none", "HS256"] {
        let e = problems(&format!("{key}\nalgorithms = [\"{alg}\"]"));
        assert!(e.contains("algorithms"), "{alg}: {e}");
    }
    let e = problems(&format!("{key}\nalgorithms = []"));
    assert!(e.contains("algorithms"), "{e}");
    let e = problems("algorithms = [\"ES256\"]");
    assert!(e.contains("key_file"), "{e}");
    let e = problems("key_file = \"/nonexistent/k.pem\"\nalgorithms = [\"ES256\"]");
    assert!(e.contains("/nonexistent/k.pem"), "{e}");
}

/// A named client's static token on the JWT listener of
/// [`tokens_never_reach_the_logs`].
const STATIC_TOKEN: &str = "static-secret-token-1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_never_reach_the_logs() {
    let key = Key::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("daemon.sock");
    let daemon = Daemon::start(&socket, DaemonOptions::default())
        .await
        .expect("daemon");
    let pem = dir.path().join("idp.pem");
    std::fs::write(&pem, key.public_pem()).expect("pem");
    let jwt_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    // `public` (open, at /rpc) is what the helper waits for; `guarded`
    // takes JWTs.
    let gateway = common::child::Gateway::run(dir.path(), "jwt-logs", |port| {
        format!(
            "[log]\nlevel = \"debug\"\n\n\
             [listeners.public]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:{port}\"\npath = \"/rpc\"\n\n\
             [listeners.guarded]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:{jwt_port}\"\npath = \"/rpc\"\n\
             [listeners.guarded.jwt]\nkey_file = \"{}\"\nalgorithms = [\"ES256\"]\nunknown_client = \"listener\"\n\n\
             [[listeners.guarded.clients]]\nname = \"cli\"\ntoken = \"{STATIC_TOKEN}\"\n\n\
             [upstreams.daemon]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
             [[routes]]\nlistener = \"public\"\nupstream = \"daemon\"\n\n\
             [[routes]]\nlistener = \"guarded\"\nupstream = \"daemon\"\n",
            pem.display(),
            socket.display()
        )
    })
    .await;
    let url = format!("ws://127.0.0.1:{jwt_port}/rpc");
    let valid = key.sign(None, &claims("alice", 3600));
    let expired = key.sign(None, &claims("alice", -60));
    // A named client's static token, and one a byte away from it.
    let near = STATIC_TOKEN.replace("-1", "-2");
    for good in [valid.as_str(), STATIC_TOKEN] {
        let mut ws = common::connect(&format!("{url}?token={good}")).await;
        common::send(&mut ws, r#"{"jsonrpc":"2.0","method":"get_data","id":1}"#).await;
        common::recv(&mut ws).await;
    }
    for bad in [&expired, &near] {
        match tokio_tungstenite::connect_async(format!("{url}?token={bad}")).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 401)
            }
            other => panic!("expected 401, got {other:?}"),
        }
    }
    let log = gateway.log();
    assert!(log.contains("token"), "the refusal is logged: {log}");
    for token in [&valid, &expired] {
        // The signature part alone would already be a leak.
        let signature = token.rsplit('.').next().expect("signature");
        assert!(!log.contains(signature), "{log}");
    }
    for secret in [STATIC_TOKEN, near.as_str()] {
        assert!(!log.contains(secret), "{log}");
    }
    // `check` prints the jwt table (key file paths only) and no token.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["check", "--config"])
        .arg(dir.path().join("jwt-logs.toml"))
        .output()
        .expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("[listeners.guarded.jwt]"), "{stdout}");
    assert!(stdout.contains("idp.pem"), "{stdout}");
    assert!(stdout.contains("\"cli\""), "{stdout}");
    assert!(!stdout.contains(STATIC_TOKEN), "{stdout}");
    gateway.stop();
    daemon.stop().await;
}

/// One HTTP/1.1 connection to `url`'s address, kept alive across requests.
async fn http1(
    url: &str,
) -> hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>> {
    let uri: hyper::Uri = url.parse().expect("uri");
    let authority = uri.authority().expect("authority").as_str().to_owned();
    let tcp = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .expect("HTTP/1 handshake");
    tokio::spawn(conn);
    sender
}

/// A request for `url` (its path and query) with `token` as a bearer.
fn request(
    method: &str,
    url: &str,
    token: &str,
    body: &str,
) -> hyper::Request<http_body_util::Full<bytes::Bytes>> {
    let uri: hyper::Uri = url.parse().expect("uri");
    hyper::Request::builder()
        .method(method)
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header("host", uri.authority().expect("authority").as_str())
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_ends_with_an_error_event_when_its_token_expires() {
    let key = Key::new();
    let gw = Gateway::with_pem(&key).await;
    // Expires in ten seconds (leeway 0; room for a slow machine to open
    // the stream first): streamed, then ended at expiry.
    let token = key.sign(None, &claims("operator", 10));
    let url = format!("{}/events?topic=daemon.events", gw.http);
    let mut sender = http1(&url).await;
    let response = tokio::time::timeout(
        common::STEP,
        sender.send_request(request("GET", &url, &token, "")),
    )
    .await
    .expect("an answer in time")
    .expect("an answer");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    // Read to the end of the stream (a stream that outlives its token by a
    // minute is the failure).
    let text = common::http::read_to_end(&mut body).await;
    assert!(text.starts_with(": subscribed\n\n"), "{text}");
    let last = text
        .rsplit_once("event: error\ndata: ")
        .map(|(_, last)| last)
        .unwrap_or_else(|| panic!("no error event: {text}"));
    let data = last
        .strip_suffix("\n\n")
        .unwrap_or_else(|| panic!("the error event is not the last: {text}"));
    assert_eq!(
        json(data),
        json!({"code": -32001, "message": "Unauthorized", "data": "credential expired"}),
        "{text}"
    );
    // The token is refused from then on, so EventSource's reconnection
    // stops at a 401.
    let (status, body) = gw.post(&token, "get_data").await;
    assert_eq!(status, 401, "{body}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_gets_401_on_a_kept_alive_connection() {
    let key = Key::new();
    let gw = Gateway::with_pem(&key).await;
    let token = key.sign(None, &claims("operator", 10));
    let call = r#"{"jsonrpc":"2.0","method":"get_data","id":1}"#;
    // One connection for every request: each is checked on its own.
    let mut sender = http1(&gw.http).await;
    let mut statuses = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let response = tokio::time::timeout(
            common::STEP,
            sender.send_request(request("POST", &gw.http, &token, call)),
        )
        .await
        .expect("an answer in time")
        .unwrap_or_else(|e| panic!("the kept-alive connection failed: {e} after {statuses:?}"));
        let status = response.status().as_u16();
        let challenge = response.headers().get("www-authenticate").cloned();
        // Read the body: the connection is reused only after it.
        let _ = http_body_util::BodyExt::collect(response.into_body()).await;
        statuses.push(status);
        if status != 200 {
            assert_eq!(status, 401, "{statuses:?}");
            assert!(challenge.is_some(), "401 without a challenge");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still 200 a minute after the token's expiry"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        sender.ready().await.expect("the connection is kept alive");
    }
    assert_eq!(statuses.first(), Some(&200), "{statuses:?}");
    gw.stop().await;
}
