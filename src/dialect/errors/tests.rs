//! switchyard's own errors per dialect (§2), and the error-code mapping
//! tables of error-codes.md §3.2/§3.3 row by row, with the §3.4 examples.

use super::*;
use crate::dialect::sideband::testutil::{unhex, CID_HEX};
use crate::dialect::sideband::{encode_envelope, Encoding};
use crate::envelope::{Message, WireId};

const JSON_DIALECTS: [Dialect; 3] = [Dialect::JsonRpc, Dialect::Ndjson, Dialect::Holon];

fn json(text: &str) -> Payload {
    Payload::json(text).expect("valid JSON")
}

fn data_text(obj: &ErrorObject) -> Option<&str> {
    obj.data.as_ref().and_then(Payload::as_json)
}

fn to_json_dialect(code: i64, target: Dialect) -> ErrorObject {
    error_to_json_dialect(code, "msg", None, target)
}

#[test]
fn sideband_to_json_equivalences() {
    for target in JSON_DIALECTS {
        let holon = target == Dialect::Holon;
        let rows = [
            (1100, -32600),
            (1101, -32601),
            (1103, if holon { 4 } else { -32008 }),
            (2000, -32000),
            (2001, 2001),
            (40_000, 40_000),
            (i64::MAX, i64::MAX),
        ];
        for (sideband, expected) in rows {
            let obj = to_json_dialect(sideband, target);
            assert_eq!(
                (obj.code, obj.message.as_str()),
                (expected, "msg"),
                "{sideband} → {target}"
            );
            assert_eq!(obj.data, None, "{sideband} → {target}: no origin");
        }
    }
}

#[test]
fn sideband_to_json_lossy_rows_keep_the_origin() {
    for target in JSON_DIALECTS {
        for code in [
            1102,
            1104,
            1000,
            1002,
            1105,
            1200,
            1999,
            999,
            5,
            0,
            -1,
            -32600,
            i64::MIN,
        ] {
            let obj = to_json_dialect(code, target);
            assert_eq!(obj.code, -32603, "{code} → {target}");
            assert_eq!(obj.message, "msg");
            let origin =
                format!(r#"{{"origin":{{"dialect":"sideband","code":{code},"message":"msg"}}}}"#);
            assert_eq!(data_text(&obj), Some(origin.as_str()));
        }
    }
}

#[test]
fn section_3_4_examples() {
    // 1101 reaches a JSON-RPC client as -32601, message unchanged.
    let obj = error_to_json_dialect(1101, "Method not found: echo", None, Dialect::JsonRpc);
    assert_eq!(
        (obj.code, obj.message.as_str(), obj.data),
        (-32601, "Method not found: echo", None)
    );
    // 1102 reaches a holon-rpc client as -32603 with the origin.
    let obj = error_to_json_dialect(1102, "Correlation mismatch", None, Dialect::Holon);
    assert_eq!(obj.code, -32603);
    assert_eq!(
        data_text(&obj),
        Some(r#"{"origin":{"dialect":"sideband","code":1102,"message":"Correlation mismatch"}}"#)
    );
    // hld's -32603 reaches a Sideband client as 2000 with the origin.
    let hld = ErrorObject {
        code: -32603,
        message: "session_id is required".to_owned(),
        data: None,
    };
    let error = error_from_json_dialect(&hld, Dialect::Ndjson);
    let cid: [u8; 16] = unhex(CID_HEX).try_into().expect("16 bytes");
    let msg = Message::Error {
        id: Some(WireId::Cid(cid)),
        error,
    };
    let text = encode_envelope(&msg, Encoding::Json).map(String::from_utf8);
    let expected = format!(
        r#"{{"t":"E","cid":"{CID_HEX}","code":2000,"message":"session_id is required","data":{{"origin":{{"dialect":"ndjson","code":-32603,"message":"session_id is required"}}}}}}"#
    );
    assert_eq!(text, Ok(Ok(expected)));
}

#[test]
fn sideband_to_json_data_is_kept_or_transcoded() {
    let data = json(r#"{"k":[1, 2]}"#);
    let obj = error_to_json_dialect(2000, "m", Some(&data), Dialect::JsonRpc);
    assert_eq!(data_text(&obj), Some(r#"{"k":[1, 2]}"#));
    let obj = error_to_json_dialect(1104, "m", Some(&data), Dialect::Ndjson);
    assert_eq!(
        data_text(&obj),
        Some(r#"{"origin":{"dialect":"sideband","code":1104,"message":"m","data":{"k":[1, 2]}}}"#)
    );
    // CBOR data from a v2 link is transcoded for the JSON client.
    let cbor = Payload::Cbor(unhex("a1616b820102").into());
    let obj = error_to_json_dialect(2001, "m", Some(&cbor), Dialect::Holon);
    assert_eq!(data_text(&obj), Some(r#"{"k":[1,2]}"#));
    // Data that cannot be transcoded gives the caller `internal` (§7).
    let nan = Payload::Cbor(unhex("f97e00").into());
    let obj = error_to_json_dialect(1101, "m", Some(&nan), Dialect::JsonRpc);
    assert_eq!((obj.code, obj.message.as_str()), (-32603, "Internal error"));
    assert_eq!(
        error_to_json_dialect(1101, "m", Some(&nan), Dialect::Holon).code,
        13
    );
    // Towards Sideband nothing changes.
    let same = error_to_json_dialect(1102, "m", Some(&nan), Dialect::Sideband);
    assert_eq!((same.code, same.data), (1102, Some(nan)));
}

#[test]
fn json_to_sideband_equivalences() {
    for source in JSON_DIALECTS {
        let holon = source == Dialect::Holon;
        let mut rows = vec![
            (-32600, 1100),
            (-32601, 1101),
            (-32000, 2000),
            (2000, 2000),
            (2001, 2001),
            (i64::MAX, i64::MAX),
        ];
        if holon {
            rows.push((4, 1103));
        }
        for (code, expected) in rows {
            let src = ErrorObject {
                code,
                message: "msg".to_owned(),
                data: Some(json("[1]")),
            };
            let obj = error_from_json_dialect(&src, source);
            assert_eq!(
                obj,
                ErrorObject {
                    code: expected,
                    ..src
                },
                "{code} from {source}"
            );
        }
    }
}

#[test]
fn json_to_sideband_lossy_rows_keep_the_origin() {
    for source in JSON_DIALECTS {
        let holon = source == Dialect::Holon;
        let mut rows = vec![(-32700, 1100)];
        rows.push((12, if holon { 1101 } else { 2000 }));
        rows.push((4, if holon { 1103 } else { 2000 }));
        for code in [
            -32602, -32603, -32001, -32008, -32099, -32604, -1, 0, 1, 5, 13, 16, 1000, 1999,
        ] {
            rows.push((code, 2000));
        }
        for (code, expected) in rows {
            if holon && code == 4 {
                continue; // a declared equivalence, above
            }
            let src = ErrorObject {
                code,
                message: "msg".to_owned(),
                data: None,
            };
            let obj = error_from_json_dialect(&src, source);
            assert_eq!(
                (obj.code, obj.message.as_str()),
                (expected, "msg"),
                "{code} from {source}"
            );
            let origin = format!(
                r#"{{"origin":{{"dialect":"{}","code":{code},"message":"msg"}}}}"#,
                source.as_str()
            );
            assert_eq!(
                data_text(&obj),
                Some(origin.as_str()),
                "{code} from {source}"
            );
        }
    }
}

#[test]
fn json_to_sideband_origin_keeps_data_in_its_encoding() {
    let src = ErrorObject {
        code: -32602,
        message: "bad".to_owned(),
        data: Some(json(r#""why""#)),
    };
    let obj = error_from_json_dialect(&src, Dialect::JsonRpc);
    assert_eq!(
        data_text(&obj),
        Some(r#"{"origin":{"dialect":"jsonrpc-ws","code":-32602,"message":"bad","data":"why"}}"#)
    );
    let src = ErrorObject {
        code: 7,
        message: "m".to_owned(),
        data: Some(Payload::Cbor(unhex("f6").into())),
    };
    let obj = error_from_json_dialect(&src, Dialect::Holon);
    let Some(Payload::Cbor(bytes)) = obj.data else {
        panic!("CBOR origin")
    };
    let back = cbor_to_json(&bytes).expect("valid CBOR");
    assert_eq!(
        back.get(),
        r#"{"origin":{"dialect":"holon-rpc","code":7,"message":"m","data":null}}"#
    );
    // From Sideband nothing changes.
    assert_eq!(error_from_json_dialect(&src, Dialect::Sideband), src);
}

#[test]
fn error_frames_settle_calls_as_internal() {
    let origin =
        r#"{"origin":{"dialect":"sideband","code":1002,"message":"Invalid subject namespace"}}"#;
    for (target, code) in [
        (Dialect::JsonRpc, -32603),
        (Dialect::Ndjson, -32603),
        (Dialect::Holon, 13),
        (Dialect::Sideband, 2000),
    ] {
        let obj = error_frame_to_internal(1002, "Invalid subject namespace", target);
        assert_eq!(obj.code, code, "{target}");
        assert_eq!(data_text(&obj), Some(origin));
    }
}

#[test]
fn jsonrpc_rendering_uses_appendix_c_codes() {
    let e = GatewayError::with_detail(ErrorKind::Timeout, "no reply");
    let obj = render(&e, Dialect::JsonRpc);
    assert_eq!(obj.code, -32008);
    assert_eq!(obj.message, "Timeout");
    assert_eq!(
        obj.data
            .and_then(|d| d.as_json().map(str::to_owned))
            .as_deref(),
        Some("\"no reply\"")
    );
    assert_eq!(
        render(&GatewayError::new(ErrorKind::Unavailable), Dialect::Ndjson).code,
        -32009
    );
    let full = GatewayError::new(ErrorKind::ResourceExhausted);
    assert_eq!(render(&full, Dialect::JsonRpc).code, -32007);
}

#[test]
fn no_route_matched_says_so_in_data_in_every_dialect() {
    let data = |obj: &ErrorObject| {
        obj.data
            .as_ref()
            .and_then(|d| d.as_json().map(str::to_owned))
    };
    for dialect in [
        Dialect::JsonRpc,
        Dialect::Ndjson,
        Dialect::Holon,
        Dialect::Sideband,
    ] {
        let plain = render(&GatewayError::no_route("m.x"), dialect);
        let ours = no_route_matched("m.x", dialect);
        assert_eq!((ours.code, &ours.message), (plain.code, &plain.message));
        assert_eq!(data(&plain), None, "{dialect}");
        assert_eq!(
            data(&ours).as_deref(),
            Some("\"no route matched\""),
            "{dialect}"
        );
    }
}

#[test]
fn holon_and_sideband_rendering() {
    assert_eq!(
        render(&GatewayError::new(ErrorKind::Timeout), Dialect::Holon).code,
        4
    );
    assert_eq!(
        render(&GatewayError::new(ErrorKind::Unavailable), Dialect::Holon).code,
        14
    );
    let sb = render(
        &GatewayError::new(ErrorKind::Unavailable),
        Dialect::Sideband,
    );
    assert_eq!(sb.code, 2000);
    assert!(sb
        .data
        .and_then(|d| d.as_json().map(str::to_owned))
        .is_some_and(|d| d.contains("unavailable")));
}
