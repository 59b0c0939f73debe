//! Sideband binary frames with JSON (v1) and CBOR (v2) RPC envelopes, and
//! JSON⇄CBOR transcoding of payloads.
//!
//! `decode` is what the gateway does with a client's request frame: the
//! frame header and subject, then the envelope. `encode` is the way back: a
//! reply whose result came from a JSON upstream (so the CBOR envelope
//! transcodes it) into an envelope, into a frame. `transcode` times the
//! payload conversions alone.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use switchyard::dialect::sideband::{
    cbor_to_json, decode, decode_envelope, encode, encode_envelope, json_to_cbor, wrap_message,
    Body, Encoding, Frame, Subject,
};
use switchyard::envelope::{Message, Outcome, Payload, WireId};

use super::large_params;

/// A fixed correlation id (and frame id), as a client would send.
const CID: [u8; 16] = *b"0123456789abcdef";

/// Sideband: frame + envelope decode and encode, both encodings, and
/// payload transcoding.
pub(super) fn sideband(c: &mut Criterion) {
    let small = String::from(r#"{"minuend":42,"subtrahend":23,"note":"sideband"}"#);
    let large = large_params().to_string();
    // The shape loadgen's throughput scenario echoes: 256 bytes, one long
    // string.
    let echo = format!(
        r#"{{"nonce":"0123456789abcdef","pad":"{}"}}"#,
        "x".repeat(224)
    );
    let payloads = [("small", &small), ("echo", &echo), ("large", &large)];

    let mut g = c.benchmark_group("sideband/decode");
    for (enc, enc_name) in [(Encoding::Json, "json"), (Encoding::Cbor, "cbor")] {
        for (size, params) in payloads {
            let frame = request_frame(enc, params);
            check_decode(&frame, enc);
            g.throughput(Throughput::Bytes(frame.len() as u64));
            g.bench_function(format!("{enc_name}-request-{size}"), |b| {
                b.iter(|| decode_request(black_box(&frame), enc))
            });
        }
    }
    g.finish();

    let mut g = c.benchmark_group("sideband/encode");
    for (enc, enc_name) in [(Encoding::Json, "json"), (Encoding::Cbor, "cbor")] {
        for (size, result) in payloads {
            let reply = Message::Response {
                id: WireId::Cid(CID),
                result: Outcome::Value(json(result)),
            };
            let frame = encode_reply(&reply, enc);
            g.throughput(Throughput::Bytes(frame.len() as u64));
            g.bench_function(format!("{enc_name}-response-{size}"), |b| {
                b.iter(|| encode_reply(black_box(&reply), enc))
            });
        }
    }
    g.finish();

    let mut g = c.benchmark_group("sideband/transcode");
    for (size, text) in payloads {
        let raw = serde_json::value::RawValue::from_string(text.clone()).expect("valid JSON");
        let cbor = json_to_cbor(&raw).expect("JSON transcodes to CBOR");
        let back = cbor_to_json(&cbor).expect("CBOR transcodes back to JSON");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(back.get()).expect("JSON"),
            serde_json::from_str::<serde_json::Value>(text).expect("JSON"),
            "the round trip keeps the value"
        );
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(format!("json-to-cbor-{size}"), |b| {
            b.iter(|| json_to_cbor(black_box(&raw)))
        });
        g.bench_function(format!("cbor-to-json-{size}"), |b| {
            b.iter(|| cbor_to_json(black_box(&cbor)))
        });
    }
    g.finish();
}

/// A client's `echo` request frame on subject `rpc`.
fn request_frame(enc: Encoding, params: &str) -> Vec<u8> {
    let msg = Message::Request {
        id: WireId::Cid(CID),
        method: "echo".into(),
        params: Some(json(params)),
    };
    let data = encode_envelope(&msg, enc).expect("the request encodes");
    encode(&Frame::message(CID, Subject::Rpc, data))
}

/// Frame, then envelope: what the gateway reads from a client.
fn decode_request(bytes: &[u8], enc: Encoding) -> Option<Message> {
    let frame = decode(bytes).ok()?;
    let Body::Message { data, .. } = frame.body else {
        return None;
    };
    decode_envelope(&data, enc).ok()
}

/// Envelope, then frame: what the gateway writes to a client.
/// As the gateway does: the envelope, then its frame head put in front.
fn encode_reply(msg: &Message, enc: Encoding) -> Vec<u8> {
    let mut frame = encode_envelope(msg, enc).expect("the reply encodes");
    wrap_message(CID, &Subject::Rpc, &mut frame);
    frame
}

/// The decode path must reach a request with the fixture's cid, or the
/// bench would time an error path.
fn check_decode(frame: &[u8], enc: Encoding) {
    match decode_request(frame, enc) {
        Some(Message::Request { id, method, .. }) => {
            assert_eq!(id, WireId::Cid(CID));
            assert_eq!(method, "echo");
        }
        other => panic!("fixture frame decodes to a request, got {other:?}"),
    }
}

fn json(text: &str) -> Payload {
    Payload::json(text).expect("fixture is valid JSON")
}
