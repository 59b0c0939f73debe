//! jsonrpc-ws.md §7.2 method shapes, row by row, at the library level.

// In tests a panic is the failure report (STYLE §8.3 rule 5 exempts tests).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use prometheus::IntGauge;

use super::*;
use crate::dialect::sideband::transcode::json_to_cbor;
use crate::pubsub::{Broker, Delivery, Event, Subscriber};

#[derive(Debug)]
struct Sink;

impl Subscriber for Sink {
    fn deliver(&self, _: &Event<'_>) -> Delivery {
        Delivery::Delivered
    }
}

fn registration(max: usize) -> Registration {
    let gauge = IntGauge::new("subs", "test").unwrap();
    Arc::new(Broker::new(max)).register(Arc::new(Sink), gauge, None)
}

fn json(text: &str) -> Payload {
    Payload::json(text).unwrap()
}

/// Calls `method` with JSON `params`: the result text, or the error's
/// kind and detail.
fn call_json(
    reg: &Registration,
    method: &str,
    params: Option<&str>,
) -> Result<String, (ErrorKind, String)> {
    let params = params.map(json);
    match call(reg, method, params.as_ref()) {
        Some(Ok(Payload::Json(raw))) => Ok(raw.get().to_owned()),
        Some(Ok(other)) => panic!("result not JSON: {other:?}"),
        Some(Err(e)) => Err((e.kind, e.detail.unwrap_or_default())),
        None => panic!("{method} not served"),
    }
}

#[test]
fn exact_shapes() {
    let reg = registration(1000);
    let ok = |m, p| call_json(&reg, m, Some(p)).unwrap();
    assert_eq!(
        ok("rpc.subscribe", r#"{"topic":"chat.messages"}"#),
        r#"{"subscribed":true}"#
    );
    assert_eq!(
        ok("rpc.unsubscribe", r#"{"topic":"chat.messages"}"#),
        r#"{"unsubscribed":true}"#
    );
    assert_eq!(
        ok("rpc.subscribe.batch", r#"{"topics":["news","alerts"]}"#),
        r#"{"subscribed":["news","alerts"]}"#
    );
    assert_eq!(
        ok("rpc.unsubscribe.batch", r#"{"topics":["news"]}"#),
        r#"{"unsubscribed":["news"]}"#
    );
    assert_eq!(reg.len(), 1, "alerts is left");
}

#[test]
fn repeated_calls_give_the_same_result() {
    let reg = registration(1000);
    let sub = || call_json(&reg, "rpc.subscribe", Some(r#"{"topic":"a.*"}"#));
    assert_eq!(sub(), sub());
    assert_eq!(reg.len(), 1);
    let unsub = || call_json(&reg, "rpc.unsubscribe", Some(r#"{"topic":"a.*"}"#));
    assert_eq!(unsub().unwrap(), r#"{"unsubscribed":true}"#);
    assert_eq!(unsub().unwrap(), r#"{"unsubscribed":true}"#, "idempotent");
    assert_eq!(
        call_json(
            &reg,
            "rpc.unsubscribe.batch",
            Some(r#"{"topics":["never","x"]}"#)
        )
        .unwrap(),
        r#"{"unsubscribed":["never","x"]}"#
    );
}

#[test]
fn batch_results_keep_request_order_and_duplicates() {
    let reg = registration(1000);
    let got = call_json(
        &reg,
        "rpc.subscribe.batch",
        Some(r#"{"topics":["z","a.>","z","m"]}"#),
    );
    assert_eq!(got.unwrap(), r#"{"subscribed":["z","a.>","z","m"]}"#);
    assert_eq!(reg.len(), 3);
    let empty = call_json(&reg, "rpc.subscribe.batch", Some(r#"{"topics":[]}"#));
    assert_eq!(empty.unwrap(), r#"{"subscribed":[]}"#);
}

#[test]
fn malformed_params_are_invalid_params_with_detail() {
    let reg = registration(1000);
    let one = r#"params must be an object {"topic": "<pattern>"}"#;
    let many = r#"params must be an object {"topics": ["<pattern>", …]}"#;
    for (method, params, detail) in [
        ("rpc.subscribe", None, one),
        ("rpc.subscribe", Some(r#"["chat"]"#), one),
        ("rpc.subscribe", Some("{}"), one),
        ("rpc.subscribe", Some(r#"{"topic":7}"#), one),
        ("rpc.unsubscribe", Some(r#"{"topics":["a"]}"#), one),
        ("rpc.subscribe.batch", None, many),
        ("rpc.subscribe.batch", Some(r#"{"topic":"a"}"#), many),
        ("rpc.subscribe.batch", Some(r#"{"topics":"a"}"#), many),
        ("rpc.unsubscribe.batch", Some("null"), many),
        (
            "rpc.subscribe.batch",
            Some(r#"{"topics":["a",1]}"#),
            "topics[1] must be a string",
        ),
    ] {
        let got = call_json(&reg, method, params);
        assert_eq!(
            got,
            Err((ErrorKind::InvalidParams, detail.to_owned())),
            "{method} {params:?}"
        );
    }
    assert!(reg.is_empty());
}

#[test]
fn invalid_topics_are_invalid_params() {
    let reg = registration(1000);
    for topic in ["", "ord*", "a..b", "a.>.b", &"x".repeat(257)] {
        let params = serde_json::json!({ "topic": topic }).to_string();
        let (kind, detail) = call_json(&reg, "rpc.subscribe", Some(&params)).unwrap_err();
        assert_eq!(kind, ErrorKind::InvalidParams, "{topic}");
        assert!(detail.contains("topic") || detail.contains('>'), "{detail}");
    }
    let got = call_json(&reg, "rpc.subscribe", Some(r#"{"topic":"ord*"}"#));
    assert_eq!(
        got,
        Err((
            ErrorKind::InvalidParams,
            "topic token 1 mixes a wildcard with other characters ('*' and '>' must be whole tokens)".to_owned()
        ))
    );
}

#[test]
fn batch_with_one_invalid_topic_changes_nothing() {
    let reg = registration(1000);
    call_json(&reg, "rpc.subscribe", Some(r#"{"topic":"keep"}"#)).unwrap();
    let got = call_json(
        &reg,
        "rpc.subscribe.batch",
        Some(r#"{"topics":["news","a..b"]}"#),
    );
    assert_eq!(got.unwrap_err().0, ErrorKind::InvalidParams);
    assert_eq!(reg.len(), 1);
    let got = call_json(
        &reg,
        "rpc.unsubscribe.batch",
        Some(r#"{"topics":["keep","ord*"]}"#),
    );
    assert_eq!(got.unwrap_err().0, ErrorKind::InvalidParams);
    assert_eq!(reg.len(), 1, "keep was not removed");
}

#[test]
fn cap_is_resource_exhausted_and_batch_is_whole() {
    let reg = registration(2);
    call_json(&reg, "rpc.subscribe", Some(r#"{"topic":"a"}"#)).unwrap();
    let got = call_json(&reg, "rpc.subscribe.batch", Some(r#"{"topics":["b","c"]}"#));
    assert_eq!(
        got,
        Err((
            ErrorKind::ResourceExhausted,
            "at most 2 subscriptions per connection".to_owned()
        ))
    );
    assert_eq!(reg.len(), 1);
    call_json(&reg, "rpc.subscribe", Some(r#"{"topic":"b"}"#)).unwrap();
    let got = call_json(&reg, "rpc.subscribe", Some(r#"{"topic":"c"}"#));
    assert_eq!(got.unwrap_err().0, ErrorKind::ResourceExhausted);
}

#[test]
fn cbor_params_are_accepted() {
    let reg = registration(1000);
    let raw = crate::envelope::raw_from_string(r#"{"topics":["x.*","y"]}"#.to_owned());
    let cbor = Payload::Cbor(json_to_cbor(raw.to_raw()).unwrap().into());
    let got = call(&reg, "rpc.subscribe.batch", Some(&cbor))
        .unwrap()
        .unwrap();
    assert_eq!(got.as_json(), Some(r#"{"subscribed":["x.*","y"]}"#));
    assert_eq!(reg.len(), 2);
    let bad = Payload::Cbor(vec![0xff].into());
    let err = call(&reg, "rpc.subscribe", Some(&bad))
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
}

#[test]
fn other_methods_are_not_served() {
    let reg = registration(1000);
    for method in [
        "rpc.subscribe.persistent",
        "rpc.unsubscribe.persistent",
        "rpc.subscribe.persistent.batch",
        "rpc.acknowledge.persistent",
        "rpc.subscribe.other",
        "rpc.notification",
        "subscribe",
    ] {
        assert!(!is_pubsub(method), "{method}");
        assert!(
            call(&reg, method, Some(&json(r#"{"topic":"a"}"#))).is_none(),
            "{method}"
        );
    }
    for method in METHODS {
        assert!(is_pubsub(method));
    }
    assert!(reg.is_empty());
}
