//! Per-stream mode: NDJSON methods configured as streaming (hld
//! `Subscribe`) get a dedicated upstream connection per call.
//!
//! switchyard writes the request line once and then never writes to the
//! connection again, nor half-closes it (either would end hld's
//! subscription). The first line answers the call: an error becomes an error
//! reply, a result (the confirmation) a success reply, unchanged; nothing
//! within the first-line timeout fails the call with `timeout`. Every later
//! `id:null` result line becomes a notification `<method>.event` with
//! `{"subscription": <client id>, "result": <raw result>}`; heartbeat lines
//! are consumed; anything else is dropped and counted. When the upstream
//! ends the stream the client gets `<method>.end`; when the client leaves,
//! the connection is closed.

use std::sync::Arc;
use std::time::Duration;

use bytestring::ByteString;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;

use super::error::LinkError;
use super::owner::Owner;
use super::shared::UpstreamShared;
use crate::config::UpstreamTarget;
use crate::dialect::jsonrpc::decode_upstream;
use crate::dialect::jsonrpc::{render, Style};
use crate::envelope::{raw_from_string, Message, Outcome, Payload, WireId};
use crate::error::{ErrorKind, GatewayError, Side};
use crate::persist::recorder::Backlog;
use crate::telemetry::metrics::DropReason;

/// How long the first line (the call's answer) may take.
const FIRST_LINE_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a stream for `method`, returns the call's reply and keeps relaying
/// events to `owner` until either side goes away (`gone`).
pub(super) async fn open(
    shared: Arc<UpstreamShared>,
    method: &str,
    params: Option<&Payload>,
    client_id: &WireId,
    owner: Arc<dyn Owner>,
    gone: CancellationToken,
) -> Result<Message, GatewayError> {
    let (reply, stream) = connect(&shared, method, params).await?;
    if let Some(stream) = stream {
        let relay = StreamRelay {
            shared,
            events: Events::Client {
                method: method.into(),
                client_id: client_id.clone(),
                owner,
            },
            backlog: Backlog::default(),
        };
        tokio::spawn(async move {
            if let Some(reason) = stream.relay(&relay, &gone).await {
                relay.end(reason);
            }
        });
    }
    Ok(reply)
}

/// An open stream: its lines, and its write half, kept (never written
/// to, never half-closed) until the stream is dropped.
pub(super) struct Stream {
    lines: FramedRead<OwnedReadHalf, LinesCodec>,
    _write: OwnedWriteHalf,
}

/// Connects, writes the call and reads its answer: the reply, and the
/// stream of events when the answer is a success.
pub(super) async fn connect(
    shared: &UpstreamShared,
    method: &str,
    params: Option<&Payload>,
) -> Result<(Message, Option<Stream>), GatewayError> {
    let UpstreamTarget::Unix(path) = &shared.cfg.target else {
        return Err(GatewayError::no_route(method));
    };
    let stream = tokio::time::timeout(shared.cfg.connect_timeout, UnixStream::connect(path))
        .await
        .map_err(|_| LinkError::Timeout)
        .and_then(|r| r.map_err(LinkError::Connect))
        .map_err(unavailable)?;
    let (read, mut write) = stream.into_split();
    let request = Message::Request {
        id: WireId::number(1),
        method: method.into(),
        params: params.cloned(),
    };
    let mut line =
        render(&request, Style::Line).map_err(|_| GatewayError::new(ErrorKind::InvalidParams))?;
    line.push('\n');
    write
        .write_all(line.as_bytes())
        .await
        .map_err(|e| unavailable(LinkError::Write(e)))?;
    let mut lines = FramedRead::new(
        read,
        LinesCodec::new_with_max_length(shared.cfg.max_response_bytes),
    );
    let first = match tokio::time::timeout(FIRST_LINE_TIMEOUT, lines.next()).await {
        Ok(Some(Ok(text))) => ByteString::from(text),
        Ok(_) => {
            return Err(GatewayError::with_detail(
                ErrorKind::Unavailable,
                "stream closed before its first line",
            ))
        }
        Err(_) => {
            return Err(GatewayError::with_detail(
                ErrorKind::Timeout,
                "no answer from the stream",
            ))
        }
    };
    let Ok(reply @ (Message::Response { .. } | Message::Error { .. })) = decode_upstream(&first)
    else {
        let err =
            GatewayError::with_detail(ErrorKind::Internal, "invalid first line from the stream");
        return Err(err.on(Side::Upstream));
    };
    let stream = matches!(reply, Message::Response { .. }).then(|| Stream {
        lines,
        _write: write,
    });
    Ok((reply, stream))
}

/// A stream that could not be opened fails its call with `unavailable`.
fn unavailable(e: LinkError) -> GatewayError {
    let detail = match e {
        LinkError::Timeout => String::from("stream connection timed out"),
        e => format!("stream connection failed: {e}"),
    };
    GatewayError::with_detail(ErrorKind::Unavailable, detail)
}

/// Where one stream's events go.
pub(super) struct StreamRelay {
    pub(super) shared: Arc<UpstreamShared>,
    pub(super) events: Events,
    /// A feed's events of a persistent topic that the store's queue had no
    /// room for: handed off before the next line is read (at most one
    /// line's event).
    pub(super) backlog: Backlog,
}

/// The receiver of a stream's events.
pub(super) enum Events {
    /// One client (per-stream mode): `<method>.event` notifications.
    Client {
        method: String,
        client_id: WireId,
        owner: Arc<dyn Owner>,
    },
    /// A feed: each event's result published under `topic`.
    Feed { topic: String },
}

// === impl Stream ===

impl Stream {
    /// Relays lines until the upstream ends (returns the reason) or the
    /// receiver goes away (returns `None`). A line whose event the store's
    /// queue had no room for is handed off before the next is read: a
    /// store that falls behind slows the stream (back-pressure to the
    /// upstream through the socket) instead of losing events.
    pub(super) async fn relay(
        mut self,
        to: &StreamRelay,
        gone: &CancellationToken,
    ) -> Option<String> {
        loop {
            let next = tokio::select! {
                next = self.lines.next() => next,
                () = gone.cancelled() => return None,
            };
            match next {
                Some(Ok(text)) => {
                    to.on_line(&ByteString::from(text));
                    if !to.backlog.is_empty() {
                        tokio::select! {
                            biased;
                            () = to.shared.hand_off(&to.backlog) => {}
                            () = gone.cancelled() => return None,
                        }
                    }
                }
                Some(Err(e)) => return Some(format!("stream read failed: {e}")),
                None => return Some(String::from("upstream closed the stream")),
            }
        }
    }
}

// === impl StreamRelay ===

impl StreamRelay {
    fn on_line(&self, text: &ByteString) {
        let Ok(Message::Response {
            id,
            result: Outcome::Value(Payload::Json(raw)),
        }) = decode_upstream(text)
        else {
            self.shared.count_dropped(DropReason::StreamLine);
            return;
        };
        if id.as_json() != Some("null") {
            self.shared.count_dropped(DropReason::StreamLine);
            return;
        }
        if is_heartbeat(raw.get()) {
            return;
        }
        let (method, client_id, owner) = match &self.events {
            Events::Feed { topic } => {
                self.shared
                    .publish(topic, Some(Payload::Json(raw)), &self.backlog);
                return;
            }
            Events::Client {
                method,
                client_id,
                owner,
            } => (method, client_id, owner),
        };
        let params = format!(
            r#"{{"subscription":{},"result":{}}}"#,
            subscription(client_id),
            raw.get()
        );
        let params = Payload::Json(raw_from_string(params));
        owner.push_notification(&format!("{method}.event"), Some(params));
    }

    /// Tells the client its stream ended (a feed is reopened instead).
    fn end(&self, reason: String) {
        let Events::Client {
            method,
            client_id,
            owner,
        } = &self.events
        else {
            return;
        };
        let reason = serde_json::to_string(&reason).unwrap_or_else(|_| String::from("\"\""));
        let params = format!(
            r#"{{"subscription":{},"reason":{reason}}}"#,
            subscription(client_id)
        );
        owner.push_notification(
            &format!("{method}.end"),
            Some(Payload::Json(raw_from_string(params))),
        );
    }
}

/// The original request id: the raw token, or a `cid` as 32 hex chars.
fn subscription(client_id: &WireId) -> String {
    match client_id {
        WireId::Json(raw) => raw.get().to_owned(),
        WireId::Cid(cid) => format!(
            "\"{}\"",
            cid.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    }
}

/// hld's heartbeat shape: `result.type == "heartbeat"`.
fn is_heartbeat(result: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Shape<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<&'a str>,
    }
    serde_json::from_str::<Shape<'_>>(result).is_ok_and(|s| s.kind == Some("heartbeat"))
}
