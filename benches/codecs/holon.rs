//! holon-rpc text frames: the strict client decode and the frame render.
//!
//! holon-rpc shares the JSON-RPC renderer (`Style::Holon`: a void result
//! is written `{}`); its decoder is its own (string ids, object params,
//! unknown keys refused).

use std::hint::black_box;

use criterion::Criterion;
use switchyard::dialect::jsonrpc::{render, Style};
use switchyard::dialect::{holon, Dialect, Inbound, Item};
use switchyard::envelope::Message;

use super::{bytes, large_params, small_request, small_response};

/// holon-rpc: decode and encode of small and large requests and responses.
pub(super) fn holon_rpc(c: &mut Criterion) {
    let large = large_params().to_string();
    let texts = [
        ("request-small", small_request()),
        (
            "request-large",
            format!(r#"{{"jsonrpc":"2.0","method":"echo","params":{large},"id":"c1"}}"#),
        ),
        ("response-small", small_response()),
        (
            "response-large",
            format!(r#"{{"jsonrpc":"2.0","result":{large},"id":"c1"}}"#),
        ),
    ];
    let name = Dialect::Holon.as_str();

    let mut g = c.benchmark_group(format!("{name}/decode"));
    for (id, text) in &texts {
        decoded(text);
        bytes(&mut g, text);
        // Read into shared bytes once, as the transport does.
        let text = bytestring::ByteString::from(text.as_str());
        g.bench_function(*id, |b| b.iter(|| holon::decode(black_box(&text))));
    }
    g.finish();

    let mut g = c.benchmark_group(format!("{name}/encode"));
    for (id, text) in &texts {
        let msg = decoded(text);
        bytes(&mut g, text);
        g.bench_function(*id, |b| b.iter(|| render(black_box(&msg), Style::Holon)));
    }
    g.finish();
}

/// The fixture as holon decodes it: one valid message, or the bench would
/// time an error path.
fn decoded(text: &str) -> Message {
    match holon::decode(&bytestring::ByteString::from(text)) {
        Inbound::Single(Item::Valid(msg)) => msg,
        other => panic!("fixture is one valid holon-rpc message, got {other:?}"),
    }
}
