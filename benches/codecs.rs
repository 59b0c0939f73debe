//! Micro benchmarks of the pure wire codecs (`switchyard::dialect`).
//!
//! Groups are named `<dialect>/<operation>` after [`Dialect::as_str`], so a
//! new dialect is one more function in [`DIALECTS`] with its own groups,
//! and `cargo bench --bench codecs -- holon-rpc` selects one alone.
//! holon-rpc and Sideband (JSON and CBOR envelopes, and JSON⇄CBOR
//! transcoding) live in `codecs/`.
//!
//! Fixtures: a small (~100 B) and a large (~16 KiB of params) request and
//! response, a pretty-printed large request (NDJSON must minify it), a
//! 100-item batch and 100 replies. Every bench is kept short (see [`config`])
//! so that `cargo bench` over both bench files stays near two minutes.

use std::hint::black_box;
use std::time::Duration;

use bytestring::ByteString;
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use serde_json::json;
use switchyard::dialect::jsonrpc::{render, render_batch, Style};
use switchyard::dialect::{jsonrpc, Dialect, Inbound, Item};
use switchyard::envelope::Message;

/// Largest batch the fixtures build, also the `max_batch_items` passed in.
const BATCH: usize = 100;

#[path = "codecs/holon.rs"]
mod holon;
#[path = "codecs/sideband.rs"]
mod sideband;

/// One function per dialect; each registers its own groups.
const DIALECTS: &[fn(&mut Criterion)] = &[jsonrpc_ws, ndjson, holon::holon_rpc, sideband::sideband];

/// Texts shared by the JSON dialects.
struct Fixtures {
    small_request: String,
    large_request: String,
    pretty_large_request: String,
    small_response: String,
    large_response: String,
    batch_request: String,
    batch_replies: Vec<Message>,
}

criterion_group! {
    name = benches;
    config = config();
    targets = all_dialects
}
criterion_main!(benches);

/// Short runs: small samples, a few seconds per bench.
fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .nresamples(10_000)
        .configure_from_args()
}

fn all_dialects(c: &mut Criterion) {
    for dialect in DIALECTS {
        dialect(c);
    }
}

// === JSON-RPC 2.0 over WebSocket ===

/// JSON-RPC WebSocket frames: client decode, frame render, batches.
fn jsonrpc_ws(c: &mut Criterion) {
    let fx = Fixtures::new();
    let name = Dialect::JsonRpc.as_str();

    let mut g = c.benchmark_group(format!("{name}/decode"));
    for (id, text) in fx.singles() {
        bytes(&mut g, text);
        // Read into shared bytes once, as the transport does.
        let text = ByteString::from(text);
        g.bench_function(id, |b| b.iter(|| jsonrpc::decode(black_box(&text), BATCH)));
    }
    g.finish();

    let mut g = c.benchmark_group(format!("{name}/encode"));
    for (id, text) in fx.singles() {
        let msg = message(text);
        bytes(&mut g, text);
        g.bench_function(id, |b| b.iter(|| render(black_box(&msg), Style::Frame)));
    }
    g.finish();

    let mut g = c.benchmark_group(format!("{name}/batch"));
    g.throughput(Throughput::Elements(BATCH as u64));
    let batch = ByteString::from(fx.batch_request.as_str());
    g.bench_function("decode-100-requests", |b| {
        b.iter(|| jsonrpc::decode(black_box(&batch), BATCH))
    });
    g.bench_function("render-100-replies", |b| {
        b.iter(|| render_batch(black_box(&fx.batch_replies), Style::Frame))
    });
    g.finish();
}

// === NDJSON over a Unix socket ===

/// NDJSON lines: line render (with minification) and upstream reply decode.
fn ndjson(c: &mut Criterion) {
    let fx = Fixtures::new();
    let name = Dialect::Ndjson.as_str();

    let mut g = c.benchmark_group(format!("{name}/encode"));
    let lines = [
        ("request-small", &fx.small_request),
        ("request-large", &fx.large_request),
        ("request-large-pretty", &fx.pretty_large_request),
    ];
    for (id, text) in lines {
        let msg = message(text);
        bytes(&mut g, text);
        g.bench_function(id, |b| b.iter(|| render(black_box(&msg), Style::Line)));
    }
    g.finish();

    let mut g = c.benchmark_group(format!("{name}/upstream-decode"));
    for (id, text) in [
        ("response-small", &fx.small_response),
        ("response-large", &fx.large_response),
    ] {
        bytes(&mut g, text);
        let text = ByteString::from(text.as_str());
        g.bench_function(id, |b| {
            b.iter(|| jsonrpc::decode_upstream(black_box(&text)))
        });
    }
    g.finish();
}

/// Reports throughput in bytes of the input text.
fn bytes(g: &mut BenchmarkGroup<'_, WallTime>, text: &str) {
    g.throughput(Throughput::Bytes(text.len() as u64));
}

/// Decodes a fixture known to be one valid message.
fn message(text: &str) -> Message {
    match jsonrpc::decode(&ByteString::from(text), BATCH) {
        Inbound::Single(Item::Valid(msg)) => msg,
        other => panic!("fixture is one valid message, got {other:?}"),
    }
}

// === impl Fixtures ===

impl Fixtures {
    fn new() -> Self {
        let large_params = large_params();
        let large_text = large_params.to_string();
        let large_request =
            format!(r#"{{"jsonrpc":"2.0","method":"echo","params":{large_text},"id":1}}"#);
        let pretty_large_request = serde_json::to_string_pretty(&json!({
            "jsonrpc": "2.0", "method": "echo", "params": large_params, "id": 1
        }))
        .expect("serializing a json! value cannot fail; qed");
        let batch_request = (0..BATCH)
            .map(|i| format!(r#"{{"jsonrpc":"2.0","method":"sum","params":[1,2,{i}],"id":{i}}}"#))
            .collect::<Vec<_>>()
            .join(",");
        let batch_replies = (0..BATCH)
            .map(|i| message(&format!(r#"{{"jsonrpc":"2.0","result":{i},"id":{i}}}"#)))
            .collect();
        Fixtures {
            small_request: small_request(),
            large_request,
            pretty_large_request,
            small_response: small_response(),
            large_response: format!(r#"{{"jsonrpc":"2.0","result":{large_text},"id":1}}"#),
            batch_request: format!("[{batch_request}]"),
            batch_replies,
        }
    }

    /// The four single messages, by bench id.
    fn singles(&self) -> [(&'static str, &str); 4] {
        [
            ("request-small", &self.small_request),
            ("request-large", &self.large_request),
            ("response-small", &self.small_response),
            ("response-large", &self.large_response),
        ]
    }
}

/// A ~100-byte request.
fn small_request() -> String {
    String::from(
        r#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":42,"subtrahend":23},"id":"req-0001"}"#,
    )
}

/// A ~100-byte response.
fn small_response() -> String {
    String::from(
        r#"{"jsonrpc":"2.0","result":{"difference":19,"unit":"widgets","ok":true},"id":"req-0001"}"#,
    )
}

/// ~16 KiB of params: nested objects, numbers, strings with escapes.
fn large_params() -> serde_json::Value {
    let items: Vec<_> = (0..200)
        .map(|i| {
            json!({
                "key": format!("item-{i:04}"),
                "n": i,
                "ratio": f64::from(i) / 7.0,
                "tags": ["alpha", "beta \"quoted\""],
            })
        })
        .collect();
    json!({ "nonce": "0123456789abcdef", "items": items })
}
