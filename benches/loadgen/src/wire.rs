//! What the load generator says and what it expects back.
//!
//! Every request calls the reference daemon's `echo` with params
//! `{"nonce":"<16 hex>","pad":"xxx…"}`, sized to the scenario's params bytes
//! (as JSON text; a CBOR envelope carries the same value in fewer bytes).
//! A reply is accepted only if it carries the request's id AND its nonce, so
//! a reply delivered to the wrong client (whose ids overlap, since every
//! client counts from 1) is caught as a mismatch. The bare WebSocket echo
//! (floor B) sends the request itself back; its `params` stand in for the
//! `result`.
//!
//! Ids per [`Wire`]: JSON-RPC numbers the requests `1`, `2`, …; holon-rpc,
//! whose ids are strings, sends `"c1"`, `"c2"`, … and accepts only string
//! ids back; Sideband puts the counter and the nonce into the 16-byte cid
//! (see [`sideband`]). [`Requests`] builds everything but the id and the
//! nonce once per run, so the client's own cost per request stays small.

pub(crate) mod sideband;

use std::borrow::Cow;

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Deserialize;
use switchyard::dialect::sideband::Encoding;

use super::conn::Received;

/// The subprotocol a holon-rpc client offers and must get selected.
pub(crate) const HOLON_SUBPROTOCOL: &str = "holon-rpc";

/// The RPC dialect a target speaks to its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// JSON-RPC 2.0, as WebSocket text frames or NDJSON lines.
    JsonRpc,
    /// holon-rpc envelopes in WebSocket text frames (subprotocol
    /// `holon-rpc`), string ids.
    Holon,
    /// Sideband: SBP binary frames, after the handshake, with `r`/`R`/`E`
    /// envelopes in this encoding (JSON v1 or CBOR v2).
    Sideband(Encoding),
    /// JSON-RPC 2.0, one request per HTTP POST body, number ids.
    Http(HttpVersion),
}

/// How an HTTP client speaks to its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HttpVersion {
    /// HTTP/1.1 with keep-alive: one request at a time per connection.
    H1,
    /// HTTP/2 by prior knowledge (h2c): concurrent streams on one connection.
    H2,
}

/// One message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Out {
    /// A text frame or an NDJSON line (without its terminator).
    Text(String),
    /// A binary frame.
    Binary(Vec<u8>),
}

/// What a reply said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// An echo of the request with this id and nonce.
    Echo {
        /// The request id.
        id: u64,
        /// The nonce found in the result (or echoed params).
        nonce: u64,
    },
    /// A reply whose own parts disagree (Sideband: the cid's nonce is not
    /// the result's): it cannot be the answer to any request of ours.
    Mismatch,
    /// An error reply for this id (`None`: no usable id).
    Error(Option<u64>),
    /// Not a reply at all, and nothing wrong (a Sideband Ack or Pong).
    Ignore,
    /// Not a reply this generator can attribute to any request.
    Malformed,
}

/// The requests of one run: everything but the id and the nonce is built
/// once, by the crate's own codec for Sideband.
#[derive(Debug, Clone)]
pub(crate) struct Requests {
    wire: Wire,
    body: Body,
}

#[derive(Debug, Clone)]
enum Body {
    /// JSON text: the pad, formatted in per request.
    Text(String),
    /// A Sideband frame to patch.
    Frame(sideband::Template),
}

/// Bytes of `{"nonce":"<16 hex>","pad":""}` around the pad.
const PARAMS_OVERHEAD: usize = 37;

#[derive(Deserialize)]
#[serde(bound = "I: DeserializeOwned")]
struct RawReply<'a, I> {
    #[serde(default)]
    id: Option<I>,
    #[serde(borrow, default)]
    result: Option<Nonce<'a>>,
    #[serde(borrow, default)]
    params: Option<Nonce<'a>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

/// The part of the params (or result) that is checked.
#[derive(Deserialize)]
pub(crate) struct Nonce<'a> {
    #[serde(borrow)]
    nonce: Cow<'a, str>,
}

// === impl Wire ===

impl Wire {
    /// Classifies one received message.
    pub(crate) fn parse(self, msg: &Received) -> Reply {
        match (self, msg.text()) {
            (Wire::JsonRpc | Wire::Http(_), Some(text)) => parse_json::<u64>(text, Some),
            (Wire::Holon, Some(text)) => parse_json::<String>(text, |id| holon_id(&id)),
            (Wire::Sideband(enc), None) => sideband::parse(enc, msg.bytes()),
            // Text where frames are expected, or the other way round.
            _ => Reply::Malformed,
        }
    }
}

// === impl Requests ===

impl Requests {
    /// The requests of a run whose params are `params_bytes` long.
    pub(crate) fn new(wire: Wire, params_bytes: usize) -> anyhow::Result<Self> {
        let pad = "x".repeat(params_bytes.saturating_sub(PARAMS_OVERHEAD));
        let body = match wire {
            Wire::JsonRpc | Wire::Holon | Wire::Http(_) => Body::Text(pad),
            Wire::Sideband(enc) => Body::Frame(sideband::Template::new(enc, &pad)?),
        };
        Ok(Requests { wire, body })
    }

    /// Request number `id` with `nonce`.
    pub(crate) fn make(&self, id: u64, nonce: u64) -> Out {
        match (&self.body, self.wire) {
            (Body::Text(pad), Wire::Holon) => Out::Text(format!(
                r#"{{"jsonrpc":"2.0","id":"c{id}","method":"echo","params":{}}}"#,
                params(nonce, pad)
            )),
            (Body::Text(pad), _) => Out::Text(format!(
                r#"{{"jsonrpc":"2.0","method":"echo","params":{},"id":{id}}}"#,
                params(nonce, pad)
            )),
            (Body::Frame(t), _) => Out::Binary(t.make(id, nonce)),
        }
    }
}

/// The echo params.
pub(crate) fn params(nonce: u64, pad: &str) -> String {
    format!(r#"{{"nonce":"{nonce:016x}","pad":"{pad}"}}"#)
}

/// The nonce of echoed params, if they are ours.
pub(crate) fn nonce_of(body: &Nonce<'_>) -> Option<u64> {
    let hex = body.nonce.as_ref();
    (hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

/// A holon-rpc id this generator sent: `c` and a decimal counter.
fn holon_id(id: &str) -> Option<u64> {
    id.strip_prefix('c')?.parse().ok()
}

/// A JSON-RPC or holon-rpc reply whose id is read as `I`, then mapped to
/// the counter (`None`: not an id this generator sends).
fn parse_json<I: DeserializeOwned>(text: &str, id_of: impl Fn(I) -> Option<u64>) -> Reply {
    let Ok(raw) = serde_json::from_str::<RawReply<'_, I>>(text) else {
        return Reply::Malformed;
    };
    let id = raw.id.and_then(id_of);
    if raw.error.is_some() {
        return Reply::Error(id);
    }
    match (id, raw.result.or(raw.params).as_ref().and_then(nonce_of)) {
        (Some(id), Some(nonce)) => Reply::Echo { id, nonce },
        _ => Reply::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(out: Out) -> String {
        match out {
            Out::Text(t) => t,
            Out::Binary(b) => panic!("binary request: {b:?}"),
        }
    }

    fn frame(t: &str) -> Received {
        Received::Frame(t.into())
    }

    #[test]
    fn params_have_the_requested_size() {
        for wire in [Wire::JsonRpc, Wire::Holon] {
            let reqs = Requests::new(wire, 256).expect("requests");
            let req = text(reqs.make(7, 0xabc));
            let start = req.find("\"params\":").map(|i| i + 9).unwrap_or(0);
            let end = start + req[start..].find('}').unwrap_or(0) + 1;
            assert_eq!(end - start, 256, "{req}");
        }
    }

    #[test]
    fn jsonrpc_replies_are_classified() {
        let req = text(
            Requests::new(Wire::JsonRpc, 40)
                .expect("requests")
                .make(7, 0xabc),
        );
        let echo = Reply::Echo {
            id: 7,
            nonce: 0xabc,
        };
        assert_eq!(Wire::JsonRpc.parse(&frame(&req)), echo);
        let reply = r#"{"jsonrpc":"2.0","result":{"nonce":"0000000000000abc","pad":""},"id":7}"#;
        assert_eq!(Wire::JsonRpc.parse(&Received::Line(reply.into())), echo);
        let err = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"x"},"id":7}"#;
        assert_eq!(Wire::JsonRpc.parse(&frame(err)), Reply::Error(Some(7)));
        let string_id = r#"{"jsonrpc":"2.0","result":{"nonce":"0000000000000abc"},"id":"7"}"#;
        assert_eq!(Wire::JsonRpc.parse(&frame(string_id)), Reply::Malformed);
        assert_eq!(Wire::JsonRpc.parse(&frame("nope")), Reply::Malformed);
        assert_eq!(
            Wire::JsonRpc.parse(&Received::Binary(req.into_bytes().into())),
            Reply::Malformed
        );
    }

    #[test]
    fn holon_ids_are_strings_both_ways() {
        let req = text(
            Requests::new(Wire::Holon, 40)
                .expect("requests")
                .make(7, 0xabc),
        );
        assert!(req.contains(r#""id":"c7""#), "{req}");
        let echo = Reply::Echo {
            id: 7,
            nonce: 0xabc,
        };
        assert_eq!(Wire::Holon.parse(&frame(&req)), echo);
        let reply = r#"{"jsonrpc":"2.0","id":"c7","result":{"nonce":"0000000000000abc","pad":""}}"#;
        assert_eq!(Wire::Holon.parse(&frame(reply)), echo);
        let number = r#"{"jsonrpc":"2.0","id":7,"result":{"nonce":"0000000000000abc"}}"#;
        assert_eq!(Wire::Holon.parse(&frame(number)), Reply::Malformed);
        let foreign = r#"{"jsonrpc":"2.0","id":"s1","result":{"nonce":"0000000000000abc"}}"#;
        assert_eq!(Wire::Holon.parse(&frame(foreign)), Reply::Malformed);
        let err = r#"{"jsonrpc":"2.0","id":"c7","error":{"code":14,"message":"x"}}"#;
        assert_eq!(Wire::Holon.parse(&frame(err)), Reply::Error(Some(7)));
    }
}
