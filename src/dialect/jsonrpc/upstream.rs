//! JSON-RPC 2.0 towards an upstream (the upstream half of the JSON-RPC
//! WebSocket and NDJSON dialects, which differ only in framing): integer
//! ids, params an array or an object (absent ones `{}` when configured).
//! Inbound texts are decoded by [`super::decode_upstream_in`], which
//! holon-rpc upstreams share (the same JSON-RPC shapes).

use std::borrow::Cow;

use crate::dialect::holon::is_structured;
use crate::dialect::link::{Framing, Options};
use crate::dialect::Dialect;
use crate::envelope::{raw_from_string, Payload};
use crate::error::{ErrorKind, GatewayError};

/// A JSON-RPC upstream link: nothing of its own beyond its settings.
#[derive(Debug)]
pub(crate) struct JsonRpcUpstream {
    /// Lines (NDJSON) or text frames (JSON-RPC WebSocket).
    framing: Framing,
    /// Offer the `jsonrpc` subprotocol.
    offer: bool,
    /// Send `{}` for absent params.
    fill_empty: bool,
}

// === impl JsonRpcUpstream ===

impl JsonRpcUpstream {
    /// A codec for `framing` (lines or text frames).
    pub(crate) fn new(framing: Framing, opts: Options) -> Self {
        JsonRpcUpstream {
            framing,
            offer: opts.offer_subprotocol,
            fill_empty: opts.fill_empty_params,
        }
    }

    /// NDJSON for lines, JSON-RPC WebSocket for frames.
    pub(crate) fn dialect(&self) -> Dialect {
        match self.framing {
            Framing::Line => Dialect::Ndjson,
            Framing::Text | Framing::Binary => Dialect::JsonRpc,
        }
    }

    pub(crate) fn framing(&self) -> Framing {
        self.framing
    }

    /// `jsonrpc`, when configured (WebSocket only).
    pub(crate) fn subprotocol(&self) -> Option<&'static str> {
        (self.offer && self.framing != Framing::Line).then_some("jsonrpc")
    }

    /// Params must be an array or an object; absent ones become `{}` when
    /// configured.
    pub(crate) fn params<'a>(
        &self,
        params: Option<&'a Payload>,
    ) -> Result<Option<Cow<'a, Payload>>, GatewayError> {
        match params {
            Some(p) if !is_structured(p) => Err(GatewayError::with_detail(
                ErrorKind::InvalidParams,
                "params must be an array or an object for this upstream",
            )),
            Some(p) => Ok(Some(Cow::Borrowed(p))),
            None => Ok(self.fill_empty.then(empty_object)),
        }
    }
}

/// `{}`, for an upstream that wants params present.
pub(crate) fn empty_object<'a>() -> Cow<'a, Payload> {
    Cow::Owned(Payload::Json(raw_from_string(String::from("{}"))))
}
