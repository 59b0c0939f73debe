//! What the load generator says and what it expects back.
//!
//! Every request calls the reference daemon's `echo` with params
//! `{"nonce":"<16 hex>","pad":"xxx…"}`, sized to the scenario's params bytes.
//! A reply is accepted only if it carries the request's id AND its nonce, so
//! a reply delivered to the wrong client (whose ids overlap, since every
//! client counts from 1) is caught as a mismatch. The bare WebSocket echo
//! (floor B) sends the request itself back; its `params` stand in for the
//! `result`.

use serde::de::IgnoredAny;
use serde::Deserialize;

/// The RPC dialect a target speaks to its clients.
///
/// Later: a `Holon` variant (holon-rpc envelopes) and `Sideband` ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// JSON-RPC 2.0, as WebSocket text frames or NDJSON lines.
    JsonRpc,
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
    /// An error reply for this id (`None`: no usable id).
    Error(Option<u64>),
    /// Not a reply this generator can attribute to any request.
    Malformed,
}

/// Bytes of `{"nonce":"<16 hex>","pad":""}` around the pad.
const PARAMS_OVERHEAD: usize = 37;

#[derive(Deserialize)]
struct RawReply<'a> {
    #[serde(default)]
    id: Option<u64>,
    #[serde(borrow, default)]
    result: Option<Body<'a>>,
    #[serde(borrow, default)]
    params: Option<Body<'a>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Body<'a> {
    nonce: &'a str,
}

// === impl Wire ===

impl Wire {
    /// The pad that makes params `params_bytes` long.
    pub(crate) fn pad(params_bytes: usize) -> String {
        "x".repeat(params_bytes.saturating_sub(PARAMS_OVERHEAD))
    }

    /// One request text (no line terminator: the transport frames it).
    pub(crate) fn request(self, id: u64, nonce: u64, pad: &str) -> String {
        match self {
            Wire::JsonRpc => format!(
                r#"{{"jsonrpc":"2.0","method":"echo","params":{{"nonce":"{nonce:016x}","pad":"{pad}"}},"id":{id}}}"#
            ),
        }
    }

    /// Classifies one reply text.
    pub(crate) fn parse(self, text: &str) -> Reply {
        match self {
            Wire::JsonRpc => parse_jsonrpc(text),
        }
    }
}

fn parse_jsonrpc(text: &str) -> Reply {
    let Ok(raw) = serde_json::from_str::<RawReply<'_>>(text) else {
        return Reply::Malformed;
    };
    if raw.error.is_some() {
        return Reply::Error(raw.id);
    }
    let body = raw.result.or(raw.params);
    match (
        raw.id,
        body.and_then(|b| u64::from_str_radix(b.nonce, 16).ok()),
    ) {
        (Some(id), Some(nonce)) => Reply::Echo { id, nonce },
        _ => Reply::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_have_the_requested_size() {
        let text = Wire::JsonRpc.request(7, 0xabc, &Wire::pad(256));
        let start = text.find("\"params\":").map(|i| i + 9).unwrap_or(0);
        let end = text.rfind(",\"id\"").unwrap_or(0);
        assert_eq!(end - start, 256);
    }

    #[test]
    fn replies_are_classified() {
        let req = Wire::JsonRpc.request(7, 0xabc, "xx");
        let echo = Reply::Echo {
            id: 7,
            nonce: 0xabc,
        };
        assert_eq!(Wire::JsonRpc.parse(&req), echo);
        let reply = r#"{"jsonrpc":"2.0","result":{"nonce":"0000000000000abc","pad":""},"id":7}"#;
        assert_eq!(Wire::JsonRpc.parse(reply), echo);
        let err = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"x"},"id":7}"#;
        assert_eq!(Wire::JsonRpc.parse(err), Reply::Error(Some(7)));
        assert_eq!(Wire::JsonRpc.parse("nope"), Reply::Malformed);
    }
}
