//! The JSON-RPC decoders allocate nothing for the messages clients and
//! upstreams send: a request's and a reply's members are slices of the
//! text read (`dialect/jsonrpc/scan.rs`), ids and method names are held
//! inline. Counted with allocation-counter's allocator, which only this
//! test binary (and the allocation bench) links.

use bytestring::ByteString;
use switchyard::dialect::jsonrpc;

/// The shapes the allocation bench sends and receives, 256 B of padding.
fn texts() -> (ByteString, ByteString) {
    let pad = "x".repeat(256);
    let request =
        format!(r#"{{"jsonrpc":"2.0","method":"echo","params":{{"pad":"{pad}"}},"id":12345}}"#);
    let reply = format!(r#"{{"jsonrpc":"2.0","result":{{"pad":"{pad}"}},"id":12345}}"#);
    (ByteString::from(request), ByteString::from(reply))
}

#[test]
fn decoding_a_request_and_a_reply_allocates_nothing() {
    let (request, reply) = texts();
    // The first decode may set up what a thread keeps (none today); count
    // the second.
    let _ = jsonrpc::decode(&request, 100);
    let _ = jsonrpc::decode_upstream(&reply);
    let info = allocation_counter::measure(|| {
        let decoded = jsonrpc::decode(&request, 100);
        assert!(
            matches!(decoded, jsonrpc::Inbound::Single(jsonrpc::Item::Valid(_))),
            "{decoded:?}"
        );
        let replied = jsonrpc::decode_upstream(&reply);
        assert!(replied.is_ok(), "{replied:?}");
    });
    assert_eq!(info.count_total, 0, "{info:?}");
}
