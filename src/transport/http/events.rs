//! `GET <path>/events?topic=<pattern>`: pub/sub topics as Server-Sent
//! Events, for browsers' `EventSource`.
//!
//! A stream is a session of its own, subscribed with one
//! `rpc.subscribe.batch` of the query's topics (so the method policy, the
//! rate limits and the per-connection subscription bounds apply as to any
//! subscriber; a refusal is the subscribe's JSON-RPC error in a `400`, or
//! `429`). Events go through the session's outbox like every
//! subscriber's: one that does not fit is dropped and counted, and a
//! stream whose outbox stays full for `slow_consumer_timeout_ms` is a slow
//! consumer: counted, and its connection closed. An idle stream gets a
//! keep-alive comment every [`sse::KEEP_ALIVE_SECS`]. The stream ends at
//! shutdown; the subscription ends with the stream.
//!
//! A named client's stream is one of its connections (its
//! `max_connections`, the status page's count). A stream whose credential
//! ends (a JWT's `exp` plus the leeway; a reload removing or changing the
//! client's token) ends with one last event, `event: error` with the
//! `unauthorized` error object ([`sse::error_event`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::IpAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::super::accept::Place;
use super::super::paths::Entry;
use super::super::session::Session;
use super::super::Outgoing;
use super::super::{ListenerCell, OpenClientConnection};
use crate::close::CloseCode;
use crate::dialect::jsonrpc_http::{self as wire, sse};
use crate::envelope::Text;
use crate::error::ErrorKind;
use crate::limits::identity::{ClientPermit, Identity};
use crate::outbox::OutboxReader;
use crate::telemetry::metrics::{Limit, ProtocolError, RejectReason};
use crate::telemetry::Peer;

/// Serves one event stream for `topics` (Host, Origin and token already
/// checked).
pub(super) async fn stream(
    entry: Entry,
    topics: Vec<String>,
    (peer, who): (IpAddr, Identity),
    place: Option<Place>,
) -> Response {
    let Entry { cell, ctx } = entry;
    let listener = cell.load();
    let Ok(permit) = listener.admit_client(&who) else {
        // A named client at its own `max_connections`.
        listener.count_rejected(RejectReason::Limit);
        listener.log_closed(
            CloseCode::PolicyViolation,
            "max connections exceeded",
            Peer(Some(peer)),
        );
        return (StatusCode::TOO_MANY_REQUESTS, "max connections exceeded").into_response();
    };
    let open = who.client().map(|name| {
        let gauge = listener
            .metrics()
            .client_connections_open
            .with_label_values(&[listener.name(), name]);
        gauge.inc();
        OpenClientConnection(gauge)
    });
    drop(listener);
    let ends = Ends {
        expires: who.expires().map(|at| {
            let left = at
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            tokio::time::Instant::now() + left
        }),
        revoked: permit.as_ref().map(|p| p.revoked().clone()),
        _held: (permit, open),
    };
    let (session, mut rx) = Session::new(cell.clone(), ctx.grace_over.clone(), Some(peer));
    // The named client's topic policy applies to the stream's topics.
    session.identify(who);
    let subscribe = serde_json::json!({
        "jsonrpc": "2.0",
        "method": "rpc.subscribe.batch",
        "params": {"topics": topics},
        "id": 0,
    });
    session
        .on_text(&Text::Line(subscribe.to_string().into()))
        .await;
    let wait = cell.load().cfg().request_timeout;
    // The stream opens with a comment: the head and a first chunk go out
    // at once, so the client knows it is subscribed before any event.
    let mut early = VecDeque::from([sse::OPENED.to_owned()]);
    let reply = loop {
        match tokio::time::timeout(wait, rx.recv())
            .await
            .map(|f| f.map(Outgoing::checked))
        {
            Ok(Some(Outgoing::Text(text))) => match sse::frame(&text) {
                sse::Frame::Reply => break Some(text),
                sse::Frame::Event(e) => early.push_back(e),
                sse::Frame::Other => {}
            },
            Ok(Some(Outgoing::Rendered(_) | Outgoing::Binary(_) | Outgoing::Ping)) => {}
            Ok(Some(Outgoing::Close(..)) | None) | Err(_) => break None,
        }
    };
    if reply.as_ref().is_none_or(|r| wire::is_error(r)) {
        session.abort().await;
        return refused(reply.map(|r| r.to_string()));
    }
    let gone = CancellationToken::new();
    watch_slow(&session, cell.load().clone(), place, gone.clone());
    let feed = Feed {
        rx,
        session: Some(session),
        early,
        tick: keep_alive(),
        shutdown: ctx.shutdown.clone(),
        gone,
        ends,
        cell,
        peer,
        ended: false,
    };
    let body = Body::from_stream(futures_util::stream::unfold(feed, Feed::next));
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The subscribe's error as the answer (`429` for the rate limit, `400`
/// otherwise), or `503` when no answer came.
fn refused(reply: Option<String>) -> Response {
    let Some(reply) = reply else {
        return (StatusCode::SERVICE_UNAVAILABLE, "subscription not answered").into_response();
    };
    let status = match wire::reply_status(&reply) {
        429 => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::BAD_REQUEST,
    };
    let mut r = (status, reply).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if status == StatusCode::TOO_MANY_REQUESTS {
        r.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(wire::RETRY_AFTER_SECS),
        );
    }
    r
}

/// Closes the stream's connection when its outbox stays full for the
/// slow-consumer timeout (a client that stopped reading is not polling
/// the body, so the stream itself cannot notice); counted as on a
/// WebSocket.
fn watch_slow(
    session: &Session,
    listener: std::sync::Arc<super::super::Listener>,
    place: Option<Place>,
    gone: CancellationToken,
) {
    let slow = session.slow_consumer();
    let peer = session.peer();
    tokio::spawn(async move {
        tokio::select! {
            () = slow.cancelled() => {
                listener.count_protocol_error(ProtocolError::SlowConsumer);
                listener.count_limit(Limit::SlowConsumer);
                listener.log_closed(CloseCode::PolicyViolation, "slow consumer", peer);
                if let Some(place) = place {
                    place.kill();
                }
            }
            () = gone.cancelled() => {}
        }
    });
}

fn keep_alive() -> tokio::time::Interval {
    let every = Duration::from_secs(sse::KEEP_ALIVE_SECS);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// When a stream's credential ends, and what the stream holds while it
/// lives (its named client's place and open-connection count).
struct Ends {
    /// A JWT's expiry (`exp` plus the leeway).
    expires: Option<tokio::time::Instant>,
    /// Cancelled when a reload removes or changes the client's token.
    revoked: Option<CancellationToken>,
    _held: (Option<ClientPermit>, Option<OpenClientConnection>),
}

impl Ends {
    /// Why the credential ended, once it has; pending while it holds.
    async fn reached(&self) -> &'static str {
        let expired = async {
            match self.expires {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let revoked = async {
            match &self.revoked {
                Some(r) => r.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = expired => "credential expired",
            () = revoked => "credential revoked",
        }
    }
}

/// The state of one stream's body.
struct Feed {
    rx: OutboxReader,
    /// Aborted (its subscriptions dropped) when the stream ends or the
    /// client goes.
    session: Option<Session>,
    /// Events that came before the subscribe's reply.
    early: VecDeque<String>,
    tick: tokio::time::Interval,
    shutdown: CancellationToken,
    /// Cancelled when the stream ends: stops the slow-consumer watch.
    gone: CancellationToken,
    /// When the credential ends the stream.
    ends: Ends,
    /// For the log line of a stream ended by its credential.
    cell: std::sync::Arc<ListenerCell>,
    peer: IpAddr,
    /// The error event that ends the stream was sent: nothing follows.
    ended: bool,
}

impl Feed {
    /// The next chunk of the body: an event or a keep-alive comment, or
    /// the error event when the credential ends; `None` after that, at
    /// shutdown or when the session's outbox closes.
    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, Feed)> {
        if self.ended {
            return None;
        }
        if let Some(e) = self.early.pop_front() {
            return Some((Ok(Bytes::from(e)), self));
        }
        loop {
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return None,
                reason = self.ends.reached() => {
                    self.ended = true;
                    self.cell.load().log_closed(
                        CloseCode::PolicyViolation,
                        reason,
                        Peer(Some(self.peer)),
                    );
                    let last = sse::error_event(ErrorKind::Unauthorized, reason);
                    return Some((Ok(Bytes::from(last)), self));
                }
                frame = self.rx.recv() => match frame.map(Outgoing::checked) {
                    Some(Outgoing::Text(text)) => {
                        if let sse::Frame::Event(e) = sse::frame(&text) {
                            return Some((Ok(Bytes::from(e)), self));
                        }
                    }
                    Some(Outgoing::Rendered(_) | Outgoing::Binary(_) | Outgoing::Ping) => {}
                    Some(Outgoing::Close(..)) | None => return None,
                },
                _ = self.tick.tick() => {
                    return Some((Ok(Bytes::from_static(sse::KEEP_ALIVE.as_bytes())), self));
                }
            }
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.gone.cancel();
        let Some(session) = self.session.take() else {
            return;
        };
        // Dropped by hyper inside the runtime; without one (a test tearing
        // down) the subscriptions go with the session anyway.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { session.abort().await });
        }
    }
}
