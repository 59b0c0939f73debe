//! Trace export end to end: the gateway exports its spans to an in-test
//! OTLP/HTTP receiver that decodes the real protobuf payload
//! (`ExportTraceServiceRequest`), and the exporter's failures never slow or
//! break traffic; and a caller's `traceparent` (on a `jsonrpc-http` POST,
//! on a WebSocket upgrade) reaches an HTTP upstream in the same trace.
//!
//! The tracing subscriber and tracer provider are process-wide and can be
//! installed once, so every tracing assertion lives in this file, in one
//! test function, in phases.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use parking_lot::Mutex;
use prost::Message as _;
use switchyard::app::{self, Running};
use switchyard::config::{Config, OtlpProtocol, TracingConfig};
use switchyard::daemon::{Daemon, DaemonOptions};
use switchyard::telemetry::{self, Telemetry};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";

/// Requests sent while the collector misbehaves, each of which must be
/// answered within [`PROMPT`]. A request held up by the export would wait
/// as long as the collector hangs (the whole phase), so this is a margin
/// for a busy machine, not a speed target.
const PROBES: usize = 20;
const PROMPT: Duration = Duration::from_secs(5);

/// An OTLP/HTTP receiver on `127.0.0.1:0`: POST /v1/traces, protobuf body.
struct Receiver {
    url: String,
    state: Arc<ReceiverState>,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct ReceiverState {
    /// Every span received, in arrival order.
    spans: Mutex<Vec<Span>>,
    /// `service.name` of every resource received.
    services: Mutex<Vec<String>>,
    /// Requests whose content type was not `application/x-protobuf`.
    bad_content_type: AtomicUsize,
    /// While set, requests hang until `release` (a stuck collector).
    stall: AtomicBool,
    /// Requests currently hanging.
    stalled: AtomicUsize,
    release: CancellationToken,
}

/// The gateway under test, in front of the reference daemon.
struct Gateway {
    _dir: tempfile::TempDir,
    _daemon: Daemon,
    url: String,
    gateway: Running,
    telemetry: Telemetry,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_otlp_and_exporter_failures_never_hurt_traffic() {
    let receiver = Receiver::start().await;
    let endpoint = receiver.url.clone();
    let gw = Gateway::start(&receiver.url).await;
    assert!(gw.telemetry.exporting(), "trace export is on");

    // Phase 1: a connection joined to the caller's trace, and one without.
    let traced = traced_connection(&gw.url).await;
    let plain = plain_connection(&gw.url).await;
    let mut spans = Vec::new();
    let complete = |spans: &[Span]| {
        named(spans, "switchyard.connection").len() == 1
            && named(spans, "rpc.batch").len() == 1
            && of_kind(spans, SpanKind::Server).len() == 4
            && of_kind(spans, SpanKind::Client).len() == 4
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while !complete(&spans) && Instant::now() < deadline {
        // The batch and connection spans end just after the last reply, so
        // flush until everything arrived; an error shows in the assert below.
        let _ = gw.telemetry.flush().await;
        spans = receiver.state.spans.lock().clone();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(complete(&spans), "spans received: {}", summary(&spans));
    check_traced(&spans, &traced);
    check_plain(&spans, plain);
    assert_eq!(receiver.state.bad_content_type.load(Ordering::SeqCst), 0);
    assert!(
        receiver
            .state
            .services
            .lock()
            .iter()
            .all(|s| s == "switchyard-test"),
        "service.name: {:?}",
        receiver.state.services.lock()
    );

    // Phase 2: the collector hangs mid-export; traffic does not notice.
    receiver.state.stall.store(true, Ordering::SeqCst);
    let mut ws = connect(&gw.url).await;
    probe(&mut ws, "warm-up").await;
    let flushing = {
        let flush = gw.telemetry.flush();
        tokio::pin!(flush);
        // Drive the flush until the receiver holds a hanging export.
        let stuck = eventually(Duration::from_secs(10), || {
            receiver.state.stalled.load(Ordering::SeqCst) > 0
        });
        tokio::select! {
            result = &mut flush => panic!("a flush finished against a stuck collector: {result:?}"),
            reached = stuck => assert!(reached, "an export reached the stuck collector"),
        }
        let probes = async {
            for i in 0..PROBES {
                probe(&mut ws, &format!("stuck-{i}")).await;
            }
        };
        tokio::select! {
            result = &mut flush => panic!("a flush finished against a stuck collector: {result:?}"),
            () = probes => {}
        }
        receiver.state.release.cancel();
        tokio::time::timeout(Duration::from_secs(10), flush).await
    };
    // Its result depends on whether the timer's export or this flush met the
    // stuck collector; either way it ends.
    assert!(
        flushing.is_ok(),
        "the flush ends once the collector answers"
    );

    // Phase 3: the collector is gone (closed port); traffic does not notice.
    receiver.close().await;
    for i in 0..PROBES {
        probe(&mut ws, &format!("closed-{i}")).await;
    }
    // Connection refused is reported at once; the flush does not hang.
    let flushed = tokio::time::timeout(Duration::from_secs(10), gw.telemetry.flush()).await;
    assert!(flushed.is_ok(), "the flush ends with the collector gone");

    // Phase 4: a caller's trace reaches an HTTP upstream (export need not
    // succeed for the context to travel).
    traceparent_reaches_an_http_upstream(&endpoint).await;
    gw.stop().await;
}

/// Trace ids of phase 4: one for the `jsonrpc-http` caller, one for the
/// WebSocket caller.
const HTTP_TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const WS_TRACE_ID: &str = "5c3b1a0f9e8d7c6b5a4f3e2d1c0b0a09";

/// A second gateway (same process-wide telemetry) with a `jsonrpc-http`
/// and a `jsonrpc-ws` listener routed to an HTTP upstream that records
/// each request's headers: a `traceparent` sent by the client (as an HTTP
/// header on the POST, on the WebSocket upgrade) arrives upstream with
/// the caller's trace id and a span id of switchyard's own.
async fn traceparent_reaches_an_http_upstream(endpoint: &str) {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::TokioIo;

    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = tcp.local_addr().expect("upstream address");
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<HeaderMap>();
    tokio::spawn(async move {
        while let Ok((s, _)) = tcp.accept().await {
            let seen = seen_tx.clone();
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let _ = seen.send(req.headers().clone());
                    async move {
                        let body = req.into_body().collect().await.map(|b| b.to_bytes());
                        let v: serde_json::Value =
                            serde_json::from_slice(&body.unwrap_or_default()).unwrap_or_default();
                        let out =
                            serde_json::json!({"jsonrpc": "2.0", "result": "ok", "id": v["id"]});
                        let mut r = hyper::Response::new(Full::new(Bytes::from(out.to_string())));
                        r.headers_mut()
                            .insert("content-type", "application/json".parse().expect("ct"));
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    let toml = format!(
        "[listeners.h]\ndialect = \"jsonrpc-http\"\naddress = \"127.0.0.1:0\"\npath = \"/h\"\n\n\
         [listeners.w]\ndialect = \"jsonrpc-ws\"\naddress = \"127.0.0.1:0\"\npath = \"/w\"\n\n\
         [upstreams.u]\ndialect = \"jsonrpc-http\"\nurl = \"http://{addr}/rpc\"\n\n\
         [[routes]]\nlistener = \"h\"\nupstream = \"u\"\n\n\
         [[routes]]\nlistener = \"w\"\nupstream = \"u\"\n\n\
         [tracing]\nenabled = true\nendpoint = \"{endpoint}\"\nrecord_ids = true\n\
         sampling_ratio = 1.0\nservice_name = \"switchyard-test\"\n"
    );
    let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
    let bound = app::bind(cfg).await.expect("bind");
    let http_url = bound
        .ws_url("h")
        .expect("url")
        .replacen("ws://", "http://", 1);
    let ws_url = bound.ws_url("w").expect("url");
    let gateway = bound.spawn();

    // Over HTTP: the header on the POST.
    let uri: hyper::Uri = http_url.parse().expect("uri");
    let authority = uri.authority().expect("authority").to_string();
    let stream = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1 handshake");
    tokio::spawn(conn);
    let body = r#"{"jsonrpc":"2.0","method":"traced","params":[],"id":1}"#;
    let req = hyper::Request::post(uri.path())
        .header("host", &authority)
        .header("content-type", "application/json")
        .header(
            "traceparent",
            format!("00-{HTTP_TRACE_ID}-{PARENT_SPAN_ID}-01"),
        )
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = tokio::time::timeout(STEP, sender.send_request(req))
        .await
        .expect("answer in time")
        .expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    let headers = tokio::time::timeout(STEP, seen.recv())
        .await
        .expect("the upstream saw the call")
        .expect("upstream running");
    check_propagated(&headers, HTTP_TRACE_ID, "jsonrpc-http");

    // Over WebSocket: the header on the upgrade.
    let mut request = ws_url.as_str().into_client_request().expect("ws url");
    let traceparent = format!("00-{WS_TRACE_ID}-{PARENT_SPAN_ID}-01");
    request
        .headers_mut()
        .insert("traceparent", traceparent.parse().expect("header value"));
    let (mut ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("connect");
    send(
        &mut ws,
        r#"{"jsonrpc":"2.0","method":"traced","params":[],"id":2}"#,
    )
    .await;
    let reply = json(&recv(&mut ws).await);
    assert_eq!(reply["result"], "ok", "{reply}");
    let headers = tokio::time::timeout(STEP, seen.recv())
        .await
        .expect("the upstream saw the call")
        .expect("upstream running");
    check_propagated(&headers, WS_TRACE_ID, "jsonrpc-ws");
    gateway.shutdown().await;
}

/// `headers` carry a valid `traceparent` in trace `trace_id`, with a span
/// id that is switchyard's (not the caller's, not zero).
fn check_propagated(headers: &HeaderMap, trace_id: &str, via: &str) {
    let tp = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("{via}: no traceparent upstream: {headers:?}"));
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(parts.len(), 4, "{via}: {tp}");
    assert_eq!(parts[0], "00", "{via}: {tp}");
    assert_eq!(parts[1], trace_id, "{via}: the caller's trace");
    assert_eq!(parts[2].len(), 16, "{via}: {tp}");
    assert_ne!(
        parts[2], PARENT_SPAN_ID,
        "{via}: a span of switchyard's own"
    );
    assert_ne!(parts[2], "0000000000000000", "{via}: {tp}");
}

#[test]
fn tracing_config_defaults_and_problems() {
    let minimal = stack_toml(std::path::Path::new("/tmp/d.sock"), "", "");
    let cfg = Config::from_toml(&minimal).expect("valid");
    assert_eq!(cfg.tracing, TracingConfig::default());
    assert!(!cfg.tracing.enabled, "off by default");
    assert_eq!(cfg.tracing.endpoint, "http://127.0.0.1:4318/v1/traces");
    assert_eq!(cfg.tracing.protocol, OtlpProtocol::HttpProtobuf);
    assert_eq!(cfg.tracing.sampling_ratio, 1.0);
    assert!(!cfg.tracing.record_ids);
    assert_eq!(cfg.tracing.service_name, "switchyard");

    let bad = "\n[tracing]\nendpoint = \"https://collector:4318/v1/traces\"\n\
               protocol = \"grpc\"\nsampling_ratio = 1.5\nservice_name = \"\"\n";
    let text = stack_toml(std::path::Path::new("/tmp/d.sock"), "", bad);
    let problems = match Config::from_toml(&text) {
        Ok(_) => panic!("expected problems:\n{text}"),
        Err(e) => e.problems().to_vec(),
    };
    for key in [
        "tracing.endpoint",
        "tracing.protocol",
        "tracing.sampling_ratio",
        "tracing.service_name",
    ] {
        assert!(
            problems.iter().any(|p| p.starts_with(key)),
            "{key} is reported, all at once: {problems:#?}"
        );
    }
    let text = stack_toml(
        std::path::Path::new("/tmp/d.sock"),
        "",
        "[tracing]\nendpoint = \"not a url\"\nsampling_ratio = -0.1",
    );
    let problems = Config::from_toml(&text).err().map(|e| e.problems().len());
    assert_eq!(problems, Some(2));
    let text = stack_toml(
        std::path::Path::new("/tmp/d.sock"),
        "",
        "[tracing]\nsampling_rate = 0.5",
    );
    assert!(Config::from_toml(&text).is_err(), "unknown keys are errors");
}

/// Raw id tokens of the requests `traced_connection` sent.
struct Traced {
    single_id: &'static str,
    batch_ids: [&'static str; 2],
}

/// Opens a connection with a `traceparent`, sends a single request and a
/// batch of two, and closes it (so the connection span ends).
async fn traced_connection(url: &str) -> Traced {
    let mut request = url.into_client_request().expect("ws url");
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01");
    let headers = request.headers_mut();
    headers.insert("traceparent", traceparent.parse().expect("header value"));
    headers.insert("tracestate", "vendor=value".parse().expect("header value"));
    let (mut ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("connect");
    let traced = Traced {
        single_id: r#""single-1""#,
        batch_ids: ["11", r#""batch-2""#],
    };
    let single = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","params":{{"a":1}},"id":{}}}"#,
        traced.single_id
    );
    send(&mut ws, &single).await;
    let reply = json(&recv(&mut ws).await);
    assert_eq!(reply["result"], serde_json::json!({"a": 1}), "{reply}");
    let [first, second] = traced.batch_ids;
    let batch = format!(
        r#"[{{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":{first}}},
            {{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":{second}}}]"#
    );
    send(&mut ws, &batch).await;
    let replies = json(&recv(&mut ws).await);
    assert_eq!(replies.as_array().map(Vec::len), Some(2), "{replies}");
    ws.close(None).await.expect("close");
    traced
}

/// Opens a connection without a `traceparent` and sends one request.
async fn plain_connection(url: &str) -> &'static str {
    let mut ws = connect(url).await;
    let id = r#""plain-1""#;
    let text = format!(r#"{{"jsonrpc":"2.0","method":"echo","params":[true],"id":{id}}}"#);
    send(&mut ws, &text).await;
    let reply = json(&recv(&mut ws).await);
    assert_eq!(reply["result"], serde_json::json!([true]), "{reply}");
    id
}

/// The traced connection's spans: all in the caller's trace, connection
/// span under the caller's span, requests under it (batch items under the
/// batch span), a client span under each request.
fn check_traced(spans: &[Span], traced: &Traced) {
    let trace_id = hex_decode(TRACE_ID);
    let in_trace: Vec<&Span> = spans.iter().filter(|s| s.trace_id == trace_id).collect();
    assert_eq!(in_trace.len(), 1 + 1 + 3 + 3, "{}", summary(spans));

    let conn = only(spans, "switchyard.connection");
    assert_eq!(conn.trace_id, trace_id);
    assert_eq!(
        conn.parent_span_id,
        hex_decode(PARENT_SPAN_ID),
        "remote parent"
    );
    assert_eq!(conn.kind, SpanKind::Server as i32);
    assert_eq!(attr(conn, "switchyard.listener").as_deref(), Some("public"));
    assert!(
        conn.trace_state.contains("vendor=value"),
        "tracestate kept: {:?}",
        conn.trace_state
    );

    let single = server_span(spans, traced.single_id);
    assert_eq!(single.trace_id, trace_id);
    assert_eq!(
        single.parent_span_id, conn.span_id,
        "request under the connection"
    );
    assert_eq!(attr(single, "rpc.method").as_deref(), Some("echo"));
    check_client_child(spans, single, "echo");

    let batch = only(spans, "rpc.batch");
    assert_eq!(batch.trace_id, trace_id);
    assert_eq!(
        batch.parent_span_id, conn.span_id,
        "batch under the connection"
    );
    for (id, method) in traced.batch_ids.iter().zip(["subtract", "sum"]) {
        let item = server_span(spans, id);
        assert_eq!(item.trace_id, trace_id);
        assert_eq!(
            item.parent_span_id, batch.span_id,
            "item {id} under the batch"
        );
        assert_eq!(attr(item, "rpc.method").as_deref(), Some(method));
        check_client_child(spans, item, method);
    }
}

/// The plain connection's request starts its own trace; no connection span.
fn check_plain(spans: &[Span], id: &str) {
    let server = server_span(spans, id);
    assert!(server.parent_span_id.is_empty(), "a root span");
    assert_ne!(server.trace_id, hex_decode(TRACE_ID));
    let in_trace = spans.iter().filter(|s| s.trace_id == server.trace_id);
    assert_eq!(in_trace.count(), 2, "server and client span only");
    check_client_child(spans, server, "echo");
}

/// The server span of the request with raw id token `id`, with the RPC
/// semantic-convention attributes.
fn server_span<'a>(spans: &'a [Span], id: &str) -> &'a Span {
    let found: Vec<&Span> = of_kind(spans, SpanKind::Server)
        .into_iter()
        .filter(|s| attr(s, "rpc.jsonrpc.request_id").as_deref() == Some(id))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one server span for id {id}: {}",
        summary(spans)
    );
    let span = found[0];
    assert_eq!(span.kind, SpanKind::Server as i32, "{id}");
    assert_eq!(attr(span, "rpc.system").as_deref(), Some("jsonrpc"));
    assert_eq!(attr(span, "rpc.jsonrpc.version").as_deref(), Some("2.0"));
    span
}

/// Exactly one client span (the upstream call) under `server`.
fn check_client_child(spans: &[Span], server: &Span, method: &str) {
    let children: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == server.span_id)
        .collect();
    assert_eq!(children.len(), 1, "{}", summary(spans));
    let client = children[0];
    assert_eq!(client.name, format!("jsonrpc {method}"), "otel.name");
    assert_eq!(client.kind, SpanKind::Client as i32);
    assert_eq!(client.trace_id, server.trace_id);
    assert_eq!(attr(client, "rpc.system").as_deref(), Some("jsonrpc"));
    assert_eq!(attr(client, "rpc.method").as_deref(), Some(method));
    assert_eq!(
        attr(client, "switchyard.upstream").as_deref(),
        Some("daemon")
    );
}

/// One request and its reply, answered within [`PROMPT`].
async fn probe(ws: &mut Ws, id: &str) {
    let started = Instant::now();
    let text = format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["{id}"],"id":"{id}"}}"#);
    send(ws, &text).await;
    let reply = json(&recv(ws).await);
    assert_eq!(reply["result"], serde_json::json!([id]), "{reply}");
    let took = started.elapsed();
    assert!(took < PROMPT, "request {id} took {took:?}");
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// Request spans (`rpc.server`, `rpc.client`): those of `kind` that carry
/// `rpc.method` (the connection and batch spans are servers too).
fn of_kind(spans: &[Span], kind: SpanKind) -> Vec<&Span> {
    spans
        .iter()
        .filter(|s| s.kind == kind as i32 && attr(s, "rpc.method").is_some())
        .collect()
}

fn only<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name}: {}", summary(spans));
    found[0]
}

/// A string attribute of `span`.
fn attr(span: &Span, key: &str) -> Option<String> {
    let kv = span.attributes.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    }
}

fn summary(spans: &[Span]) -> String {
    let lines: Vec<String> = spans
        .iter()
        .map(|s| {
            format!(
                "{} trace={} id={} parent={} id_attr={:?}",
                s.name,
                hex(&s.trace_id),
                hex(&s.span_id),
                hex(&s.parent_span_id),
                attr(s, "rpc.jsonrpc.request_id")
            )
        })
        .collect();
    format!("\n{}", lines.join("\n"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

// === impl Receiver ===

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        let state = Arc::new(ReceiverState::default());
        let app = axum::Router::new()
            .route("/v1/traces", post(receive))
            .with_state(state.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await
                .expect("receiver");
        });
        Receiver {
            url: format!("http://{addr}/v1/traces"),
            state,
            stop,
            server,
        }
    }

    /// Stops accepting and waits until the port is closed.
    async fn close(self) {
        self.state.release.cancel();
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.server)
            .await
            .expect("receiver stops")
            .expect("receiver task");
    }
}

/// POST /v1/traces: decode the protobuf export request and keep its spans.
async fn receive(
    State(state): State<Arc<ReceiverState>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let protobuf = headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"application/x-protobuf");
    if !protobuf {
        state.bad_content_type.fetch_add(1, Ordering::SeqCst);
    }
    if state.stall.load(Ordering::SeqCst) && !state.release.is_cancelled() {
        state.stalled.fetch_add(1, Ordering::SeqCst);
        state.release.cancelled().await;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let request = ExportTraceServiceRequest::decode(body).expect("a valid OTLP protobuf payload");
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref()?.value.clone());
        if let Some(Value::StringValue(name)) = service {
            state.services.lock().push(name);
        }
        for scope in resource_spans.scope_spans {
            state.spans.lock().extend(scope.spans);
        }
    }
    StatusCode::OK
}

// === impl Gateway ===

impl Gateway {
    /// Starts the reference daemon and a gateway exporting to `endpoint`,
    /// installing telemetry the way `main` does.
    async fn start(endpoint: &str) -> Gateway {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("daemon.sock");
        let daemon = Daemon::start(&socket, DaemonOptions::default())
            .await
            .expect("daemon");
        let tracing = format!(
            "\n[tracing]\nenabled = true\nendpoint = \"{endpoint}\"\nrecord_ids = true\n\
             sampling_ratio = 1.0\nservice_name = \"switchyard-test\"\n"
        );
        // The [tracing] table closes the upstream table it is appended to.
        let toml = stack_toml(&socket, "", &tracing);
        let cfg = Config::from_toml(&toml).unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let telemetry = telemetry::init(&cfg.log, &cfg.tracing);
        assert!(telemetry::record_ids(), "record_ids applied");
        let bound = app::bind(cfg).await.expect("bind");
        let url = bound.ws_url("public").expect("url");
        let gateway = bound.spawn();
        wait_connected(&gateway, "daemon").await;
        Gateway {
            _dir: dir,
            _daemon: daemon,
            url,
            gateway,
            telemetry,
        }
    }

    async fn stop(self) {
        self.gateway.shutdown().await;
        self.telemetry.shutdown().await;
    }
}
