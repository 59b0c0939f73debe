//! Server-Sent Events framing of pub/sub events for `GET <path>/events`:
//! each `rpc.notification` becomes one `event: rpc.notification` whose
//! data is the notification's params, `{"topic":…,"data":…}`, the same
//! object a WebSocket subscriber gets.

use serde::Deserialize;
use serde_json::value::RawValue;

/// The SSE event name of a pub/sub event.
pub const EVENT: &str = "rpc.notification";

/// The SSE event name of the last event of a stream switchyard ends
/// because the client's credential ended (see [`error_event`]).
pub const ERROR_EVENT: &str = "error";

/// The comment that opens a stream, once its topics are subscribed.
pub const OPENED: &str = ": subscribed\n\n";

/// The comment line that keeps an idle stream alive (through proxies
/// that close quiet connections), sent every [`KEEP_ALIVE_SECS`].
pub const KEEP_ALIVE: &str = ": keep-alive\n\n";

/// Seconds between keep-alive comments on an idle stream.
pub const KEEP_ALIVE_SECS: u64 = 15;

/// The query parameter that names a topic pattern (repeatable).
pub const TOPIC_PARAM: &str = "topic";

/// What a text frame from a stream's outbox is.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A pub/sub event, framed for the stream.
    Event(String),
    /// A reply (it has an id): the subscribe's answer.
    Reply,
    /// Anything else (not for the stream).
    Other,
}

#[derive(Deserialize)]
struct Members<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// Sorts a JSON-RPC frame rendered for the stream's session, framing an
/// `rpc.notification` as an SSE event.
pub fn frame(text: &str) -> Frame {
    let Ok(m) = serde_json::from_str::<Members<'_>>(text) else {
        return Frame::Other;
    };
    match (m.id, m.method, m.params) {
        (Some(_), _, _) => Frame::Reply,
        (None, Some(EVENT), Some(params)) => Frame::Event(event(params.get())),
        _ => Frame::Other,
    }
}

/// One SSE event carrying `data` (JSON text): a `data:` line per line of
/// it (JSON from an upstream may hold line breaks between tokens; a
/// client joins the lines with `\n`, which JSON reads as whitespace).
pub fn event(data: &str) -> String {
    let mut out = String::with_capacity(data.len() + 40);
    out.push_str("event: ");
    out.push_str(EVENT);
    out.push('\n');
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line.strip_suffix('\r').unwrap_or(line));
        out.push('\n');
    }
    out.push('\n');
    out
}

/// The last event of a stream that switchyard ends itself: `event: error`
/// whose data is the JSON-RPC error object of `kind` with `detail` as its
/// `data` (`{"code":-32001,"message":"Unauthorized","data":"credential
/// expired"}`), the object a `POST` would get.
pub fn error_event(kind: crate::error::ErrorKind, detail: &str) -> String {
    let (code, message) = super::super::errors::jsonrpc_code(kind);
    let object = serde_json::json!({"code": code, "message": message, "data": detail});
    format!("event: {ERROR_EVENT}\ndata: {object}\n\n")
}

/// The topic patterns of a query string (`topic=a.*&topic=b`), decoded.
pub fn topics(query: Option<&str>) -> Vec<String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == TOPIC_PARAM)
        .map(|(_, v)| v.into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_becomes_an_event_with_its_params_as_data() {
        let text = r#"{"jsonrpc":"2.0","method":"rpc.notification","params":{"topic":"a.b","data":{"n": 1.0}}}"#;
        assert_eq!(
            frame(text),
            Frame::Event(
                "event: rpc.notification\ndata: {\"topic\":\"a.b\",\"data\":{\"n\": 1.0}}\n\n"
                    .to_owned()
            )
        );
    }

    #[test]
    fn the_error_event_carries_the_json_rpc_error_object() {
        let e = error_event(crate::error::ErrorKind::Unauthorized, "credential expired");
        let data = e
            .strip_prefix("event: error\ndata: ")
            .and_then(|d| d.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("{e:?}"));
        let object: serde_json::Value = serde_json::from_str(data).expect("JSON");
        assert_eq!(
            object,
            serde_json::json!({"code": -32001, "message": "Unauthorized", "data": "credential expired"})
        );
    }

    #[test]
    fn line_breaks_in_data_become_data_lines() {
        assert_eq!(
            event("{\"a\":\r\n1}"),
            "event: rpc.notification\ndata: {\"a\":\ndata: 1}\n\n"
        );
    }

    #[test]
    fn replies_and_other_frames_are_told_apart() {
        assert_eq!(
            frame(r#"{"jsonrpc":"2.0","id":0,"result":{"subscribed":["a"]}}"#),
            Frame::Reply
        );
        assert_eq!(frame(r#"{"jsonrpc":"2.0","method":"pong"}"#), Frame::Other);
        assert_eq!(frame("not json"), Frame::Other);
    }

    #[test]
    fn topics_are_read_from_a_repeated_parameter() {
        assert_eq!(
            topics(Some("topic=a.*&x=1&topic=b%2Ec&token=t")),
            ["a.*", "b.c"]
        );
        assert!(topics(None).is_empty());
    }
}
