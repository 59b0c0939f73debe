//! The §3 handshake rules.

use super::*;

const P1: &str =
    r#"{"protocol":"sideband","version":"1","peerId":"peer-a","caps":[],"metadata":{}}"#;

#[test]
fn handshake_parse_and_emit() {
    let hs = Handshake::parse(P1.as_bytes()).expect("P1 parses");
    assert_eq!(
        (hs.peer_id.as_str(), hs.caps.len(), hs.metadata.len()),
        ("peer-a", 0, 0)
    );
    assert!(!hs.offers_cbor());
    let ours = Handshake::local("0123456789abcdef0123456789abcdef".to_owned(), true);
    let bytes = ours.to_bytes();
    assert_eq!(
        String::from_utf8(bytes.clone()).expect("utf-8"),
        r#"{"protocol":"sideband","version":"1","peerId":"0123456789abcdef0123456789abcdef","caps":["rpc","encoding/cbor"],"metadata":{}}"#
    );
    assert_eq!(Handshake::parse(&bytes), Ok(ours.clone()));
    assert!(ours.offers_cbor() && !Handshake::local("p".to_owned(), false).offers_cbor());
    // Unknown keys ignored; wrongly typed optional members treated as absent.
    let loose = r#"{"version":"1","peerId":"p","protocol":"sideband","x":1,"caps":["encoding:cbor",3],"metadata":[]}"#;
    let hs = Handshake::parse(loose.as_bytes()).expect("parses");
    assert_eq!(hs.caps, vec!["encoding:cbor".to_owned()]);
    assert!(hs.offers_cbor());
    let hs =
        Handshake::parse(br#"{"protocol":"sideband","version":"1","peerId":"p","caps":"rpc"}"#);
    assert_eq!(hs.map(|h| h.caps), Ok(vec![]));
    let id = random_peer_id();
    assert!(
        id.len() == 32
            && id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert_ne!(id, random_peer_id());
}

#[test]
fn handshake_failures() {
    let decode = [
        &b"{"[..],
        b"\xff",
        b"[\"sideband\",\"1\",\"p\"]",
        br#"{"version":"1","peerId":"p"}"#,
        br#"{"protocol":1,"version":"1","peerId":"p"}"#,
        br#"{"protocol":"sideband","peerId":"p"}"#,
        br#"{"protocol":"sideband","version":1,"peerId":"p"}"#,
        br#"{"protocol":"sideband","version":"1"}"#,
        br#"{"protocol":"sideband","version":"1","peerId":null}"#,
    ];
    for data in decode {
        let e = Handshake::parse(data).expect_err("refused");
        assert!(matches!(e, HandshakeError::Decode(_)), "{e:?}");
        assert!(e.to_string().starts_with("Failed to decode handshake: "));
        assert_eq!(e.code(), 1002);
        assert!(!e.can_continue());
    }
    let e = Handshake::parse(br#"{"protocol":"other","version":"1","peerId":"p"}"#)
        .expect_err("refused");
    assert_eq!(
        (e.to_string().as_str(), e.code()),
        ("Unsupported protocol: other", 1001)
    );
    let e = Handshake::parse(br#"{"protocol":"sideband","version":"2","peerId":"p"}"#)
        .expect_err("refused");
    assert_eq!(
        (e.to_string().as_str(), e.code()),
        ("Unsupported protocol version: 2", 1001)
    );
}
