//! The SBP handshake payload (sideband.md §3): compact UTF-8 JSON carried
//! by Control op 0.
//!
//! Parsing follows the reference's checks: a missing or non-string
//! `protocol`, `version` or `peerId`, or invalid JSON, is 1002; a wrong
//! protocol or version is 1001. Unknown keys are ignored. Every handshake
//! failure ends negotiation (ErrorFrame, then close 1000
//! `negotiation_failed`), so [`HandshakeError`] is always fatal.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The capability switchyard advertises for CBOR envelopes (§7).
pub const CAP_CBOR: &str = "encoding/cbor";
/// The other spelling of [`CAP_CBOR`] found upstream; accepted on input.
pub const CAP_CBOR_ALT: &str = "encoding:cbor";
/// The capability naming the RPC envelope layer.
pub const CAP_RPC: &str = "rpc";

/// A decoded handshake. `protocol` and `version` are implied: parsing
/// rejects anything but `"sideband"` and `"1"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// The sender's peer id (the SDK uses 32 lowercase hex characters).
    pub peer_id: String,
    /// Capabilities; unknown values are kept and ignored.
    pub caps: Vec<String>,
    /// Namespaced metadata (`tracing:…`, `vendor:…`).
    pub metadata: Map<String, Value>,
}

/// Why a handshake payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Not UTF-8 JSON, or `protocol`/`version`/`peerId` missing or not
    /// strings. SBP 1002.
    #[error("Failed to decode handshake: {0}")]
    Decode(String),
    /// `protocol` is not `"sideband"`. SBP 1001.
    #[error("Unsupported protocol: {0}")]
    UnsupportedProtocol(String),
    /// `version` is not `"1"`. SBP 1001.
    #[error("Unsupported protocol version: {0}")]
    UnsupportedVersion(String),
}

/// The members the reference checks, borrowed raw so that a wrong type is
/// reported for the right member.
#[derive(Deserialize)]
struct RawHandshake<'a> {
    #[serde(borrow)]
    protocol: Option<&'a RawValue>,
    #[serde(borrow)]
    version: Option<&'a RawValue>,
    #[serde(borrow, rename = "peerId")]
    peer_id: Option<&'a RawValue>,
    #[serde(borrow)]
    caps: Option<&'a RawValue>,
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
}

// === impl Handshake ===

impl Handshake {
    /// The handshake switchyard sends (§10): a fresh peer id per
    /// connection, `rpc`, and `encoding/cbor` when CBOR is enabled.
    pub fn local(peer_id: String, cbor: bool) -> Self {
        let mut caps = vec![CAP_RPC.to_owned()];
        if cbor {
            caps.push(CAP_CBOR.to_owned());
        }
        Handshake {
            peer_id,
            caps,
            metadata: Map::new(),
        }
    }

    /// Parses a Control Handshake payload.
    pub fn parse(data: &[u8]) -> Result<Self, HandshakeError> {
        let text = std::str::from_utf8(data)
            .map_err(|_| HandshakeError::Decode("payload is not valid UTF-8".to_owned()))?;
        // serde would also read a struct from a JSON array, positionally.
        if !text.trim_start().starts_with('{') {
            return Err(HandshakeError::Decode("not a JSON object".to_owned()));
        }
        let raw: RawHandshake<'_> =
            serde_json::from_str(text).map_err(|e| HandshakeError::Decode(e.to_string()))?;
        let protocol = required_string(raw.protocol, "protocol")?;
        let version = required_string(raw.version, "version")?;
        let peer_id = required_string(raw.peer_id, "peerId")?;
        if protocol != "sideband" {
            return Err(HandshakeError::UnsupportedProtocol(protocol));
        }
        if version != "1" {
            return Err(HandshakeError::UnsupportedVersion(version));
        }
        // `caps` and `metadata` are optional and acted on by no reference
        // code; a wrongly typed value is treated as absent rather than
        // failing a negotiation the reference would accept.
        let caps = raw
            .caps
            .and_then(|c| serde_json::from_str::<Vec<Value>>(c.get()).ok())
            .map(|caps| {
                caps.into_iter()
                    .filter_map(|c| match c {
                        Value::String(s) => Some(s),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let metadata = raw
            .metadata
            .and_then(|m| serde_json::from_str::<Map<String, Value>>(m.get()).ok())
            .unwrap_or_default();
        Ok(Handshake {
            peer_id,
            caps,
            metadata,
        })
    }

    /// The compact JSON payload, keys in the reference order.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = String::from(r#"{"protocol":"sideband","version":"1","peerId":"#);
        out.push_str(&Value::from(self.peer_id.as_str()).to_string());
        out.push_str(r#","caps":"#);
        out.push_str(&Value::from(self.caps.clone()).to_string());
        out.push_str(r#","metadata":"#);
        out.push_str(&Value::Object(self.metadata.clone()).to_string());
        out.push('}');
        out.into_bytes()
    }

    /// True when this side lists `encoding/cbor` or `encoding:cbor`.
    pub fn offers_cbor(&self) -> bool {
        self.caps.iter().any(|c| c == CAP_CBOR || c == CAP_CBOR_ALT)
    }
}

// === impl HandshakeError ===

impl HandshakeError {
    /// The SBP code of the ErrorFrame to send: 1001 for a protocol or
    /// version mismatch, 1002 for an undecodable payload.
    pub fn code(&self) -> u16 {
        match self {
            HandshakeError::Decode(_) => 1002,
            HandshakeError::UnsupportedProtocol(_) | HandshakeError::UnsupportedVersion(_) => 1001,
        }
    }

    /// Always false: a handshake failure ends negotiation.
    pub fn can_continue(&self) -> bool {
        false
    }
}

/// A fresh peer id: 32 lowercase hex characters from the CSPRNG.
pub fn random_peer_id() -> String {
    super::hex::encode(&rand::random::<[u8; 16]>())
}

fn required_string(raw: Option<&RawValue>, name: &str) -> Result<String, HandshakeError> {
    let raw = raw.ok_or_else(|| HandshakeError::Decode(format!("missing {name}")))?;
    serde_json::from_str::<String>(raw.get())
        .map_err(|_| HandshakeError::Decode(format!("{name} must be a string")))
}
