//! switchyard as the client of a Sideband upstream (sideband.md §10 "As a
//! client"), against a fake upstream built on the crate's frame codec that
//! records, per connection, everything the gateway sent it.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use switchyard::dialect::sideband::{
    decode, decode_envelope, encode, encode_envelope, random_id, random_peer_id, Body, Control,
    Encoding, Frame, Handshake, Subject,
};
use switchyard::envelope::{Message, Outcome, WireId};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// What one connection of the fake saw from the gateway, in order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    /// The gateway's handshake.
    Hello,
    /// A request, by method.
    Request(String),
    /// A reply to one of the fake's own messages, or any other envelope.
    Other(Message),
    /// A Control Close frame with its reason.
    ControlClose(String),
    /// The WebSocket close frame (code, reason).
    Closed(u16, String),
}

/// How the fake upstream treats the gateway's handshake.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Sends its handshake at once and serves calls (see [`serve`]).
    Serve,
    /// Sends its handshake at once, then closes 1000 `negotiation_failed`
    /// when the gateway's arrives (a reference server refusing it).
    RefuseAfterHello,
    /// Sends no handshake and closes 1000 `negotiation_failed` when the
    /// gateway's arrives.
    RefuseSilently,
    /// Sends a handshake of version 2, which the gateway refuses.
    WrongVersion,
}

/// A fake Sideband upstream: its URL, every connection's log, and how many
/// connections it accepted.
struct Fake {
    url: String,
    conns: Arc<Mutex<Vec<Vec<Seen>>>>,
    accepted: Arc<AtomicUsize>,
}

impl Fake {
    async fn start(mode: Mode) -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("ws://{}/sb", listener.local_addr().expect("addr"));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (logs, count) = (conns.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let log = {
                    let mut all = logs.lock().expect("lock");
                    all.push(Vec::new());
                    all.len() - 1
                };
                tokio::spawn(serve(tcp, mode, logs.clone(), log));
            }
        });
        Fake {
            url,
            conns,
            accepted,
        }
    }

    fn log(&self, conn: usize) -> Vec<Seen> {
        self.conns.lock().expect("lock")[conn].clone()
    }

    fn hellos(&self) -> usize {
        let conns = self.conns.lock().expect("lock");
        conns.iter().filter(|c| c.contains(&Seen::Hello)).count()
    }
}

fn handshake_frame(version: &str) -> Vec<u8> {
    let hello = format!(
        r#"{{"protocol":"sideband","version":"{version}","peerId":"{}","caps":["rpc","encoding/cbor"]}}"#,
        random_peer_id()
    );
    encode(&Frame::control(
        random_id(),
        Control::Handshake(hello.into_bytes()),
    ))
}

fn message_frame(data: Vec<u8>) -> Vec<u8> {
    encode(&Frame::message(random_id(), Subject::Rpc, data))
}

/// Serves one connection. Methods: `echo` answers its params; `badcode`
/// and `badcode.cbor` answer an `E` whose `code` is a string (JSON, CBOR);
/// `void.unknown` first sends a void `R` with a cid nobody used, then
/// answers; `maintenance` sends Control Close `maintenance` instead.
async fn serve(
    tcp: tokio::net::TcpStream,
    mode: Mode,
    logs: Arc<Mutex<Vec<Vec<Seen>>>>,
    log: usize,
) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
        return;
    };
    let record = |seen: Seen| logs.lock().expect("lock")[log].push(seen);
    let first = match mode {
        Mode::Serve | Mode::RefuseAfterHello => Some(handshake_frame("1")),
        Mode::WrongVersion => Some(handshake_frame("2")),
        Mode::RefuseSilently => None,
    };
    if let Some(hello) = first {
        if ws.send(WsMessage::Binary(hello.into())).await.is_err() {
            return;
        }
    }
    let mut enc = Encoding::Json;
    while let Some(Ok(msg)) = ws.next().await {
        let bytes = match msg {
            WsMessage::Binary(bytes) => bytes,
            WsMessage::Close(f) => {
                let (code, reason) = f.map_or((1005, String::new()), |f| {
                    (u16::from(f.code), f.reason.to_string())
                });
                record(Seen::Closed(code, reason));
                continue;
            }
            _ => continue,
        };
        let Ok(frame) = decode(&bytes) else { continue };
        let mut out = Vec::new();
        match frame.body {
            Body::Control(Control::Handshake(data)) => {
                record(Seen::Hello);
                if matches!(mode, Mode::RefuseAfterHello | Mode::RefuseSilently) {
                    let close = CloseFrame {
                        code: CloseCode::Normal,
                        reason: "negotiation_failed".into(),
                    };
                    // The gateway may be gone already.
                    let _ = ws.close(Some(close)).await;
                    continue;
                }
                let remote = Handshake::parse(&data).expect("gateway handshake");
                enc = Encoding::negotiate(&Handshake::local(random_peer_id(), true), &remote);
            }
            Body::Control(Control::Close(reason)) => record(Seen::ControlClose(reason)),
            Body::Message { data, .. } => {
                let msg = decode_envelope(&data, Encoding::detect(&data)).expect("envelope");
                let Message::Request { id, method, params } = msg else {
                    record(Seen::Other(msg));
                    continue;
                };
                record(Seen::Request(method.to_string()));
                let WireId::Cid(cid) = id else { continue };
                let reply = |result| {
                    let r = Message::Response {
                        id: WireId::Cid(cid),
                        result,
                    };
                    message_frame(encode_envelope(&r, enc).expect("reply"))
                };
                match method.as_str() {
                    "badcode" => {
                        let hex = common::clients::hex(&cid);
                        let e = format!(r#"{{"t":"E","cid":"{hex}","code":"x","message":"boom"}}"#);
                        out.push(message_frame(e.into_bytes()));
                    }
                    "badcode.cbor" => {
                        let mut e =
                            vec![0xa4, 0x61, b't', 0x61, b'E', 0x63, b'c', b'i', b'd', 0x50];
                        e.extend_from_slice(&cid);
                        e.extend_from_slice(b"\x64code\x61x\x67message\x64boom");
                        out.push(message_frame(e));
                    }
                    "void.unknown" => {
                        let void = Message::Response {
                            id: WireId::Cid(random_id()),
                            result: Outcome::Void,
                        };
                        out.push(message_frame(encode_envelope(&void, enc).expect("void")));
                        out.push(reply(Outcome::Void));
                    }
                    "maintenance" => out.push(encode(&Frame::control(
                        random_id(),
                        Control::Close("maintenance".into()),
                    ))),
                    _ => out.push(reply(params.map_or(Outcome::Void, Outcome::Value))),
                }
            }
            _ => {}
        }
        for frame in out {
            if ws.send(WsMessage::Binary(frame.into())).await.is_err() {
                return;
            }
        }
    }
}

/// A gateway with a JSON-RPC listener `j` routed to each `(name, url)`
/// Sideband upstream (`extra` added to every upstream table); the first
/// is the default route, the others take methods prefixed `<name>.`.
async fn gateway(upstreams: &[(&str, &str)], extra: &str) -> (switchyard::app::Running, String) {
    let mut toml = String::from(
        "[listeners.j]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/rpc\"\nrequest_timeout_ms = 60000\n",
    );
    for (i, (name, url)) in upstreams.iter().enumerate() {
        // A generous connect timeout: on a busy machine a slow handshake
        // must not become a retry.
        toml +=
            &format!("\n[upstreams.{name}]\ndialect = \"sideband\"\nurl = \"{url}\"\nconnect_timeout_ms = 10000\n{extra}\n");
        toml += &format!("\n[[routes]]\nlistener = \"j\"\nupstream = \"{name}\"\n");
        if i > 0 {
            toml += &format!("method_prefix = \"{name}.\"\n");
        }
    }
    let cfg =
        switchyard::config::Config::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let bound = switchyard::app::bind(cfg).await.expect("bind");
    let url = bound.ws_url("j").expect("url");
    (bound.spawn(), url)
}

async fn call(ws: &mut common::Ws, method: &str, id: u32) -> serde_json::Value {
    let req = format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"n":{id}}},"id":{id}}}"#);
    common::send(ws, &req).await;
    let reply = common::json(&common::recv(ws).await);
    assert_eq!(reply["id"], id, "{reply}");
    reply
}

/// An invalid `E` (a string `code`) carrying a pending
/// call's cid settles that call at once as `internal`, quoting the
/// upstream's envelope in `data`, in JSON and in CBOR; the gateway does not
/// answer it. On the client side, a void `R` with an unknown cid is
/// dropped silently too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_and_unknown_replies_from_the_upstream() {
    let fake = Fake::start(Mode::Serve).await;
    // One connection, so that its log (conn 0) holds every call.
    let (gw, url) = gateway(&[("sb", &fake.url)], "pool_size = 1").await;
    common::wait_connected(&gw, "sb").await;
    let mut ws = common::connect(&url).await;
    for (method, quoted) in [("badcode", r#""code":"x""#), ("badcode.cbor", "CBOR a4")] {
        let v = call(&mut ws, method, 1).await;
        assert_eq!(v["error"]["code"], -32603, "internal: {v}");
        let data = v["error"]["data"].as_str().unwrap_or_default();
        assert!(data.contains(quoted), "{method}: {v}");
    }
    let v = call(&mut ws, "void.unknown", 2).await;
    assert_eq!(v["result"], serde_json::Value::Null, "{v}");
    // Frames on one connection arrive in order: anything the gateway sent
    // about the replies above came before this request.
    assert_eq!(call(&mut ws, "echo", 3).await["result"]["n"], 3);
    let log = fake.log(0);
    let others: Vec<&Seen> = log.iter().filter(|s| matches!(s, Seen::Other(_))).collect();
    assert!(
        others.is_empty(),
        "the gateway answered a reply: {others:?}"
    );
    gw.shutdown().await;
}

/// A Control Close from the upstream is answered with
/// WebSocket close 1000 carrying the same reason, and nothing else (no
/// Control Close back); the call in flight fails `unavailable` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_control_close_reason_is_echoed() {
    let fake = Fake::start(Mode::Serve).await;
    // One connection, so that the call goes on conn 0 (with the default
    // pool of 4 it may take any).
    let (gw, url) = gateway(&[("sb", &fake.url)], "pool_size = 1").await;
    common::wait_connected(&gw, "sb").await;
    let mut ws = common::connect(&url).await;
    let v = call(&mut ws, "maintenance", 1).await;
    assert_eq!(v["error"]["code"], -32009, "unavailable: {v}");
    let closed = common::eventually(common::STEP, || {
        fake.log(0).iter().any(|s| matches!(s, Seen::Closed(..)))
    })
    .await;
    assert!(closed, "no close: {:?}", fake.log(0));
    assert_eq!(
        fake.log(0),
        vec![
            Seen::Hello,
            Seen::Request("maintenance".into()),
            Seen::Closed(1000, "maintenance".into()),
        ]
    );
    gw.shutdown().await;
}

/// sideband.md §10: after a `negotiation_failed` close
/// the next attempt waits the maximum backoff, whichever side refused and
/// whether the upstream's handshake had arrived. With the backoff starting
/// at 100 ms and capped at 60 s, a two-second window holds several retries
/// under exponential backoff but none after a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_handshake_waits_the_maximum_backoff() {
    let after_hello = Fake::start(Mode::RefuseAfterHello).await;
    let silently = Fake::start(Mode::RefuseSilently).await;
    let wrong_version = Fake::start(Mode::WrongVersion).await;
    let fakes = [&after_hello, &silently, &wrong_version];
    let (gw, _url) = gateway(
        &[
            ("a", &after_hello.url),
            ("b", &silently.url),
            ("c", &wrong_version.url),
        ],
        "pool_size = 1\nbackoff_initial_ms = 100\nbackoff_max_ms = 60000\n",
    )
    .await;
    let refused = common::eventually(common::STEP, || fakes.iter().all(|f| f.hellos() >= 1)).await;
    assert!(refused, "every fake saw a handshake");
    // A window far longer than the initial backoff and far shorter than the
    // maximum: no second attempt may fall in it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (name, fake) in ["after hello", "silently", "wrong version"]
        .iter()
        .zip(fakes)
    {
        assert_eq!(
            fake.accepted.load(Ordering::SeqCst),
            1,
            "{name}: retried before the maximum backoff"
        );
    }
    gw.shutdown().await;
}

/// On SIGTERM every link of a Sideband upstream's pool gets
/// Control Close `shutdown`, then WebSocket close 1001, as Sideband clients
/// of the listener do (sideband.md §10 "Closing").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pooled_upstream_link_gets_shutdown_then_1001_on_sigterm() {
    const POOL: usize = 3;
    let fake = Fake::start(Mode::Serve).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("switchyard.toml");
    let toml = format!(
        "[listeners.local]\ndialect = \"ndjson\"\nsocket = \"{}\"\n\n\
         [upstreams.sb]\ndialect = \"sideband\"\nurl = \"{}\"\npool_size = {POOL}\nconnect_timeout_ms = 10000\n\n\
         [[routes]]\nlistener = \"local\"\nupstream = \"sb\"\n",
        dir.path().join("gw.sock").display(),
        fake.url
    );
    std::fs::write(&config, toml).expect("write config");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("run")
        .arg("--config")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn switchyard");
    let connected = common::eventually(3 * common::STEP, || fake.hellos() == POOL).await;
    if !connected {
        // Do not leave a stray process behind a failed assertion.
        let _ = child.kill();
    }
    assert!(connected, "the pool never connected: {:?}", fake.conns);
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exited = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(exited.success(), "{exited:?}");
    let closed = |c: &Vec<Seen>| c.iter().any(|s| matches!(s, Seen::Closed(..)));
    let all_closed = common::eventually(common::STEP, || {
        fake.conns.lock().expect("lock").iter().all(closed)
    })
    .await;
    let conns = fake.conns.lock().expect("lock").clone();
    assert!(all_closed, "{conns:?}");
    assert_eq!(conns.len(), POOL, "{conns:?}");
    for log in &conns {
        assert_eq!(
            log[..],
            [
                Seen::Hello,
                Seen::ControlClose("shutdown".into()),
                Seen::Closed(1001, "going away".into()),
            ],
            "{conns:?}"
        );
    }
}

/// Per-client links: a client's dedicated link closed by
/// the shutdown drain says goodbye as a stopping gateway does, and the
/// shutdown waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedicated_upstream_link_gets_shutdown_then_1001_on_shutdown() {
    let fake = Fake::start(Mode::Serve).await;
    let (gw, url) = gateway(&[("sb", &fake.url)], "mode = \"per-client\"\n").await;
    let mut ws = common::connect(&url).await;
    assert_eq!(call(&mut ws, "echo", 1).await["result"]["n"], 1);
    gw.shutdown().await;
    let closed = common::eventually(common::STEP, || {
        fake.log(0).iter().any(|s| matches!(s, Seen::Closed(..)))
    })
    .await;
    assert!(closed, "no close: {:?}", fake.log(0));
    assert_eq!(
        fake.log(0),
        [
            Seen::Hello,
            Seen::Request("echo".into()),
            Seen::ControlClose("shutdown".into()),
            Seen::Closed(1001, "going away".into()),
        ]
    );
}
