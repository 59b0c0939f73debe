//! The upstream codec, dialect by dialect: what it names of its wire,
//! the ids it writes, and what an inbound text means.

#![allow(clippy::unwrap_used)]

use bytestring::ByteString;

use super::UpstreamCodec;
use crate::dialect::link::{Event, Framing, Liveness, Options};
use crate::dialect::Dialect;
use crate::envelope::{Message, WireId};

fn codec(d: Dialect) -> UpstreamCodec {
    let opts = Options {
        offer_subprotocol: true,
        fill_empty_params: false,
    };
    UpstreamCodec::new(d, opts)
}

/// Every event one inbound text means, in order.
fn events(c: &UpstreamCodec, text: &str) -> Vec<Event> {
    let mut out = Vec::new();
    c.on_text(&ByteString::from(text.to_owned()), |e| {
        out.push(e);
        true
    });
    out
}

#[test]
fn each_dialect_names_its_framing_subprotocol_and_liveness() {
    for d in Dialect::ALL {
        let expected = match d {
            Dialect::JsonRpc => (Framing::Text, Some("jsonrpc"), Liveness::Ping),
            Dialect::Ndjson => (Framing::Line, None, Liveness::Ping),
            Dialect::Holon => (Framing::Text, Some("holon-rpc"), Liveness::Heartbeat),
            Dialect::Sideband => (Framing::Binary, None, Liveness::Ping),
            // No upstream link speaks it: the configuration refuses a
            // `jsonrpc-http` upstream.
            Dialect::JsonRpcHttp => continue,
        };
        let c = codec(d);
        assert_eq!(c.dialect(), d);
        let named = (c.framing(), c.subprotocol(), c.liveness());
        assert_eq!(named, expected, "{d}");
    }
}

/// holon-rpc ids are decimal strings; `"h<n>"` is our heartbeat, whose
/// reply proves the link alive and settles no call.
#[test]
fn a_holon_reply_is_matched_by_its_string_id_and_a_heartbeat_reply_settles_no_call() {
    let c = codec(Dialect::Holon);
    assert!(c.wire_id(7) == WireId::number_string(7));
    let got = events(&c, r#"{"jsonrpc":"2.0","id":"7","result":1}"#);
    assert!(
        matches!(got[..], [Event::Reply { gid: Some(7), .. }]),
        "{got:?}"
    );

    let beat = c.heartbeat(1).unwrap();
    assert!(beat.contains(r#""id":"h1""#), "{beat}");
    assert!(c.heartbeat(2).is_none(), "one heartbeat in flight at most");
    let got = events(&c, r#"{"jsonrpc":"2.0","id":"h1","result":{}}"#);
    assert!(matches!(got[..], [Event::Alive(_)]), "{got:?}");
    assert!(
        c.heartbeat(2).is_some(),
        "acknowledged: the next one may go"
    );
}

/// JSON-RPC ids are numbers (a float spelling too); a batch reply means
/// one event per item; an upstream's `rpc.heartbeat` is answered here.
#[test]
fn json_replies_batches_and_heartbeat_requests() {
    let c = codec(Dialect::Ndjson);
    let got = events(
        &c,
        r#"[{"jsonrpc":"2.0","id":3,"result":1},{"jsonrpc":"2.0","id":4.0,"result":2}]"#,
    );
    assert!(
        matches!(
            got[..],
            [
                Event::Reply { gid: Some(3), .. },
                Event::Reply { gid: Some(4), .. }
            ]
        ),
        "{got:?}"
    );
    let got = events(&c, r#"{"jsonrpc":"2.0","id":"x","method":"rpc.heartbeat"}"#);
    let [Event::Answer(Message::Response { id, .. })] = &got[..] else {
        panic!("answered here: {got:?}");
    };
    assert_eq!(id.as_json(), Some("\"x\""));
    let got = events(&c, "not json");
    assert!(matches!(got[..], [Event::Fault { .. }]), "{got:?}");
}
