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

use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;

use super::link::Owner;
use super::UpstreamShared;
use crate::config::UpstreamTarget;
use crate::dialect::jsonrpc::decode_upstream;
use crate::dialect::render::{render, Style};
use crate::envelope::{raw_from_string, Message, Outcome, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};

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
    let UpstreamTarget::Unix(path) = &shared.cfg.target else {
        return Err(GatewayError::no_route(method));
    };
    let unavailable = |e: std::io::Error| {
        GatewayError::with_detail(
            ErrorKind::Unavailable,
            format!("stream connection failed: {e}"),
        )
    };
    let stream = tokio::time::timeout(shared.cfg.connect_timeout, UnixStream::connect(path))
        .await
        .map_err(|_| {
            GatewayError::with_detail(ErrorKind::Unavailable, "stream connection timed out")
        })?
        .map_err(unavailable)?;
    let (read, mut write) = stream.into_split();
    let request = Message::Request {
        id: WireId::number(1),
        method: method.to_owned(),
        params: params.cloned(),
    };
    let mut line =
        render(&request, Style::Line).map_err(|_| GatewayError::new(ErrorKind::InvalidParams))?;
    line.push('\n');
    write
        .write_all(line.as_bytes())
        .await
        .map_err(unavailable)?;
    let mut lines = FramedRead::new(
        read,
        LinesCodec::new_with_max_length(shared.cfg.max_response_bytes),
    );
    let first = match tokio::time::timeout(FIRST_LINE_TIMEOUT, lines.next()).await {
        Ok(Some(Ok(text))) => text,
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
        return Err(GatewayError::with_detail(
            ErrorKind::Internal,
            "invalid first line from the stream",
        ));
    };
    if let Message::Response { .. } = reply {
        let sub = StreamRelay {
            shared,
            method: method.to_owned(),
            client_id: client_id.clone(),
            owner,
        };
        // `write` moves into the relay: the connection stays open (never
        // half-closed) until the relay ends.
        tokio::spawn(async move {
            let reason = sub.relay(&mut lines, &gone).await;
            if let Some(reason) = reason {
                sub.end(reason);
            }
            drop(write);
        });
    }
    Ok(reply)
}

/// Relays one stream's events to its client.
struct StreamRelay {
    shared: Arc<UpstreamShared>,
    method: String,
    client_id: WireId,
    owner: Arc<dyn Owner>,
}

impl StreamRelay {
    /// Relays lines until the upstream ends (returns the reason) or the
    /// client leaves (returns `None`).
    async fn relay(
        &self,
        lines: &mut FramedRead<tokio::net::unix::OwnedReadHalf, LinesCodec>,
        gone: &CancellationToken,
    ) -> Option<String> {
        loop {
            let next = tokio::select! {
                next = lines.next() => next,
                () = gone.cancelled() => return None,
            };
            match next {
                Some(Ok(text)) => self.on_line(&text),
                Some(Err(e)) => return Some(format!("stream read failed: {e}")),
                None => return Some(String::from("upstream closed the stream")),
            }
        }
    }

    fn on_line(&self, text: &str) {
        let Ok(Message::Response {
            id,
            result: Outcome::Value(Payload::Json(raw)),
        }) = decode_upstream(text)
        else {
            self.shared.count_dropped("stream_line");
            return;
        };
        if id.as_json() != Some("null") {
            self.shared.count_dropped("stream_line");
            return;
        }
        if is_heartbeat(raw.get()) {
            return;
        }
        let params = format!(
            r#"{{"subscription":{},"result":{}}}"#,
            self.subscription(),
            raw.get()
        );
        let params = Payload::Json(raw_from_string(params));
        self.owner
            .push_notification(&format!("{}.event", self.method), Some(params));
    }

    fn end(&self, reason: String) {
        let reason = serde_json::to_string(&reason).unwrap_or_else(|_| String::from("\"\""));
        let params = format!(
            r#"{{"subscription":{},"reason":{reason}}}"#,
            self.subscription()
        );
        self.owner.push_notification(
            &format!("{}.end", self.method),
            Some(Payload::Json(raw_from_string(params))),
        );
    }

    /// The original request id: the raw token, or a `cid` as 32 hex chars.
    fn subscription(&self) -> String {
        match &self.client_id {
            WireId::Json(raw) => raw.get().to_owned(),
            WireId::Cid(cid) => format!(
                "\"{}\"",
                cid.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
        }
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
