//! The Sideband client side: SBP handshake, request frames and reply
//! checks, all through the crate's own codec
//! (`switchyard::dialect::sideband`), like the test clients in
//! `tests/common/clients.rs`.
//!
//! The cid of request `id` with `nonce` is `id` as 8 big-endian bytes, then
//! `nonce` as 8 little-endian bytes. It is also the request's frame id, as
//! Sideband clients do (the random nonce keeps frame ids unique on the
//! connection). A reply's cid gives the id back, and the nonce in its cid
//! must equal the nonce in its result: a reply carrying one request's cid
//! and another's result is a [`Reply::Mismatch`]. The two byte orders keep
//! the nonce's hex in the params from appearing inside the cid's hex, so
//! that [`Template`] finds each field exactly where the codec put it.

use std::io;
use std::time::Duration;

use anyhow::{bail, Context};
use futures_util::{SinkExt, StreamExt};
use switchyard::dialect::sideband::{
    cbor_to_json_into, decode, decode_envelope, encode, encode_envelope, random_id, random_peer_id,
    Body, Channel, Cid, Control, Encoding, Frame, Handshake, Subject,
};
use switchyard::envelope::{Message, Outcome, Payload, WireId};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::WebSocketStream;

use super::{nonce_of, params, Nonce, Reply};

/// How long the server's handshake may take to arrive.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The id and nonce the template is encoded with: their bytes (all ≥ 0x80)
/// cannot occur in the JSON text around them, nor their hex in the pad.
const PLACEHOLDER_ID: u64 = 0xf1f2_f3f4_f5f6_f7f8;
const PLACEHOLDER_NONCE: u64 = 0xe1e2_e3e4_e5e6_e7e8;

/// One request frame, encoded once with placeholders, and where the cid
/// and the nonce sit in it.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    bytes: Vec<u8>,
    /// The raw cid: the frame id, and the envelope's `cid` in CBOR.
    raw_cid: Vec<usize>,
    /// The cid as 32 lowercase hex digits: the envelope's `cid` in JSON.
    hex_cid: Vec<usize>,
    /// The nonce's 16 hex digits in the params.
    nonce: usize,
}

// === impl Template ===

impl Template {
    /// Encodes the placeholder request and locates its fields.
    pub(crate) fn new(enc: Encoding, pad: &str) -> anyhow::Result<Self> {
        let bytes = encode_request(enc, PLACEHOLDER_ID, PLACEHOLDER_NONCE, pad)?;
        let cid = cid(PLACEHOLDER_ID, PLACEHOLDER_NONCE);
        let raw_cid = find_all(&bytes, &cid);
        let hex_cid = find_all(&bytes, &hex(&cid));
        let nonces = find_all(&bytes, format!("{PLACEHOLDER_NONCE:016x}").as_bytes());
        let expected = match enc {
            Encoding::Json => (1, 1),
            Encoding::Cbor => (2, 0),
        };
        let [nonce] = nonces[..] else {
            bail!("the {enc:?} request template has {} nonces", nonces.len());
        };
        if (raw_cid.len(), hex_cid.len()) != expected {
            bail!(
                "the {enc:?} request template has the cid {} times raw and {} times in hex",
                raw_cid.len(),
                hex_cid.len()
            );
        }
        Ok(Template {
            bytes,
            raw_cid,
            hex_cid,
            nonce,
        })
    }

    /// The frame of request `id` with `nonce`.
    pub(crate) fn make(&self, id: u64, nonce: u64) -> Vec<u8> {
        let mut out = self.bytes.clone();
        let cid = cid(id, nonce);
        let cid_hex = hex(&cid);
        let nonce_hex = format!("{nonce:016x}");
        let patches = self
            .raw_cid
            .iter()
            .map(|&at| (at, &cid[..]))
            .chain(self.hex_cid.iter().map(|&at| (at, &cid_hex[..])))
            .chain([(self.nonce, nonce_hex.as_bytes())]);
        for (at, field) in patches {
            // The offsets were found in these very bytes.
            if let Some(slot) = out.get_mut(at..at + field.len()) {
                slot.copy_from_slice(field);
            }
        }
        out
    }
}

/// Request `id` with `nonce`, encoded by the codec from scratch.
fn encode_request(enc: Encoding, id: u64, nonce: u64, pad: &str) -> anyhow::Result<Vec<u8>> {
    let cid = cid(id, nonce);
    let msg = Message::Request {
        id: WireId::Cid(cid),
        method: "echo".into(),
        params: Some(Payload::json(&params(nonce, pad)).context("echo params")?),
    };
    let data = encode_envelope(&msg, enc).context("encoding the request envelope")?;
    Ok(encode(&Frame::message(cid, Subject::Rpc, data)))
}

/// The cid (and frame id) of request `id` with `nonce`.
fn cid(id: u64, nonce: u64) -> Cid {
    let mut cid = [0; 16];
    cid[..8].copy_from_slice(&id.to_be_bytes());
    cid[8..].copy_from_slice(&nonce.to_le_bytes());
    cid
}

/// The id and nonce a cid carries.
fn split(cid: &Cid) -> (u64, u64) {
    let (id, nonce) = cid.split_at(8);
    let word = |b: &[u8]| <[u8; 8]>::try_from(b).unwrap_or_default();
    (
        u64::from_be_bytes(word(id)),
        u64::from_le_bytes(word(nonce)),
    )
}

/// Lowercase hex digits.
fn hex(bytes: &[u8]) -> Vec<u8> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]])
        .collect()
}

/// Every offset where `needle` starts in `haystack`.
fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(at, _)| at)
        .collect()
}

// === replies ===

/// Classifies one binary frame from the gateway.
pub(crate) fn parse(enc: Encoding, bytes: &[u8]) -> Reply {
    let Ok(frame) = decode(bytes) else {
        return Reply::Malformed;
    };
    match frame.body {
        Body::Message { subject, data } => {
            // Replies come on `rpc`, in the negotiated encoding.
            if subject.channel() != Channel::Rpc || Encoding::detect(&data) != enc {
                return Reply::Malformed;
            }
            match decode_envelope(&data, enc) {
                Ok(Message::Response {
                    id: WireId::Cid(cid),
                    result: Outcome::Value(result),
                }) => {
                    let (id, cid_nonce) = split(&cid);
                    match result_nonce(&result) {
                        Some(nonce) if nonce == cid_nonce => Reply::Echo { id, nonce },
                        Some(_) => Reply::Mismatch,
                        None => Reply::Malformed,
                    }
                }
                Ok(Message::Error { id, .. }) => Reply::Error(match id {
                    Some(WireId::Cid(cid)) => Some(split(&cid).0),
                    _ => None,
                }),
                _ => Reply::Malformed,
            }
        }
        // The gateway uses WebSocket pings, not SBP ones; a Control Close
        // is followed by the WebSocket close, which ends the connection.
        Body::Control(Control::Ping | Control::Pong | Control::Close(_)) | Body::Ack { .. } => {
            Reply::Ignore
        }
        Body::Control(Control::Handshake(_)) => Reply::Malformed,
        Body::Error { .. } => Reply::Error(None),
    }
}

/// The nonce of an echo result, JSON or CBOR.
/// The whole result is read (CBOR transcoded), as strictly as before, but
/// without copies of its own: the load generator shares the gateway's
/// cores, so what it spends per reply is taken from the measured row.
fn result_nonce(result: &Payload) -> Option<u64> {
    let mut transcoded = String::new();
    let json = match result {
        Payload::Json(raw) => raw.get(),
        Payload::Cbor(bytes) => {
            cbor_to_json_into(bytes, &mut transcoded).ok()?;
            &transcoded
        }
    };
    serde_json::from_str::<Nonce<'_>>(json)
        .ok()
        .as_ref()
        .and_then(nonce_of)
}

// === handshake ===

/// Sends our handshake (offering CBOR for [`Encoding::Cbor`] only), reads
/// the server's, and checks that `enc` is what the two negotiate.
pub(crate) async fn handshake(
    ws: &mut WebSocketStream<TcpStream>,
    enc: Encoding,
) -> io::Result<()> {
    let local = Handshake::local(random_peer_id(), enc == Encoding::Cbor);
    let hello = Frame::control(random_id(), Control::Handshake(local.to_bytes()));
    ws.send(WsMessage::Binary(encode(&hello).into()))
        .await
        .map_err(io::Error::other)?;
    let first = tokio::time::timeout(HANDSHAKE_TIMEOUT, first_binary(ws))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no Sideband handshake in time"))??;
    let frame = decode(&first).map_err(|e| other(format!("invalid first frame: {e}")))?;
    let Body::Control(Control::Handshake(data)) = &frame.body else {
        return Err(other(format!(
            "the first frame is not a handshake: {frame:?}"
        )));
    };
    let remote = Handshake::parse(data).map_err(io::Error::other)?;
    let got = Encoding::negotiate(&local, &remote);
    if got != enc {
        return Err(other(format!(
            "negotiated {} envelopes instead of {}",
            got.as_str(),
            enc.as_str()
        )));
    }
    Ok(())
}

/// The first binary message (WebSocket pings and pongs skipped).
async fn first_binary(ws: &mut WebSocketStream<TcpStream>) -> io::Result<Vec<u8>> {
    loop {
        match ws.next().await {
            Some(Ok(WsMessage::Binary(b))) => return Ok(b.to_vec()),
            Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_))) => {}
            Some(Ok(WsMessage::Text(_))) => return Err(other("a text frame before the handshake")),
            Some(Ok(WsMessage::Close(_))) | None => {
                return Err(other("closed before the handshake"))
            }
            Some(Err(e)) => return Err(io::Error::other(e)),
        }
    }
}

fn other(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENCODINGS: [Encoding; 2] = [Encoding::Json, Encoding::Cbor];

    #[test]
    fn patched_frames_equal_freshly_encoded_ones() {
        for enc in ENCODINGS {
            for pad in ["", "xxxxxxxx"] {
                let t = Template::new(enc, pad).expect("template");
                for (id, nonce) in [(1, 0), (7, 0xabc), (u64::MAX, u64::MAX), (42, 0x0123)] {
                    let fresh = encode_request(enc, id, nonce, pad).expect("encode");
                    assert_eq!(t.make(id, nonce), fresh, "{enc:?} id {id} nonce {nonce:x}");
                }
            }
        }
    }

    /// The gateway's reply to request `id`, with `nonce` in its result.
    fn reply(enc: Encoding, cid: Cid, nonce: u64) -> Vec<u8> {
        let result = Payload::json(&params(nonce, "xx")).expect("json");
        let msg = Message::Response {
            id: WireId::Cid(cid),
            result: Outcome::Value(result),
        };
        let data = encode_envelope(&msg, enc).expect("encode");
        encode(&Frame::message(random_id(), Subject::Rpc, data))
    }

    #[test]
    fn replies_are_checked_by_cid_and_result() {
        for enc in ENCODINGS {
            let echo = Reply::Echo {
                id: 7,
                nonce: 0xabc,
            };
            assert_eq!(parse(enc, &reply(enc, cid(7, 0xabc), 0xabc)), echo);
            // Another request's result under this cid.
            assert_eq!(
                parse(enc, &reply(enc, cid(7, 0xabc), 0xdef)),
                Reply::Mismatch
            );
            let other = match enc {
                Encoding::Json => Encoding::Cbor,
                Encoding::Cbor => Encoding::Json,
            };
            assert_eq!(
                parse(enc, &reply(other, cid(7, 0xabc), 0xabc)),
                Reply::Malformed
            );
            let err = Message::Error {
                id: Some(WireId::Cid(cid(7, 1))),
                error: switchyard::envelope::ErrorObject {
                    code: 2000,
                    message: "x".to_owned(),
                    data: None,
                },
            };
            let data = encode_envelope(&err, enc).expect("encode");
            let frame = encode(&Frame::message(random_id(), Subject::Rpc, data));
            assert_eq!(parse(enc, &frame), Reply::Error(Some(7)));
            let pong = encode(&Frame::control(random_id(), Control::Pong));
            assert_eq!(parse(enc, &pong), Reply::Ignore);
            assert_eq!(parse(enc, b"\x01\x00short"), Reply::Malformed);
        }
    }
}
