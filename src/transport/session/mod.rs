//! One client connection's request handling, independent of the transport.
//!
//! The transport's reader hands every inbound text to [`Session::on_text`].
//! A request to a pooled upstream is handed to it at once, with no task
//! (`router::in_place`: written now, or parked in the upstream's queue
//! until there is room); every other request (or batch) runs in its own
//! task on the session's [`TaskTracker`]. Either way the reply goes
//! into the bounded outbox that the transport's writer drains. A full
//! outbox slows only this client. When the client goes away,
//! [`Session::abort`] cancels its tasks and its placed calls, which
//! abandons their gateway ids (late replies are then counted as stale,
//! never delivered). On shutdown, [`Session::drain`] lets requests finish
//! until the grace period ends; what is left is answered with
//! `unavailable`.

use std::net::IpAddr;
use std::sync::Arc;

use arc_swap::Guard;
use bytestring::ByteString;
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod dispatch;

use crate::close::CloseCode;
use crate::dialect::client::{ClientCodec, Oversize};
use crate::dialect::sideband::client::Options as SidebandOptions;
use crate::dialect::{Dialect, Inbound, Item};
use crate::envelope::{Message, WireId};
use crate::error::{ErrorKind, GatewayError, Side};
use crate::limits::rate::ConnectionRate;
use crate::outbox::{Gauges, OutCodec, Outbox, OutboxReader, Outgoing};
use crate::router::in_place::InPlace;
use crate::router::{ClientLinks, Pusher, Router};
use crate::telemetry::metrics::{Direction, DropReason, Limit, ProtocolError};
use crate::telemetry::Peer;
use crate::transport::{Listener, ListenerCell};

/// Request handling state of one client connection.
#[derive(Debug)]
pub struct Session {
    /// The listener as it serves now, read per request (a reload swaps it).
    cell: Arc<ListenerCell>,
    /// `max_in_flight` when the connection opened: the size of
    /// `in_flight`, fixed for the connection's life.
    max_in_flight: usize,
    /// The client's address (`None`: a Unix-socket client), for the
    /// per-IP rate limit and log lines.
    peer: Option<IpAddr>,
    /// The only way anything is written to the client.
    outbox: Outbox,
    /// Requests in flight for this client (`max_in_flight`).
    in_flight: Arc<Semaphore>,
    tasks: TaskTracker,
    /// Cancelled when the client is gone: tasks stop without replying.
    gone: CancellationToken,
    /// Cancelled when the shutdown grace period is over.
    grace_over: CancellationToken,
    /// Dedicated upstream links and pushes of this client.
    client: Arc<ClientLinks>,
    /// The connection's span (it may carry a `traceparent` from the
    /// upgrade request): the parent of every request span.
    parent: tracing::Span,
    /// This connection's rate limits (`None` until first used), rebuilt
    /// when a reload changes the listener's rates.
    rate: Mutex<Option<ConnectionRate>>,
    /// Requests settled in place (the fast path) and where they reply.
    in_place: Arc<InPlace>,
}

/// What the transport must do after an inbound text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Keep reading.
    Continue,
    /// Close the connection with this code (the close frame is queued).
    Close(CloseCode),
}

// === impl Session ===

impl Session {
    /// A session for one client of the listener in `cell`, connected from
    /// `peer` (`None`: a Unix socket), and the reader of its outbox (for
    /// the connection's writer). The per-IP rate limit and subscription
    /// bound are keyed on `peer`.
    pub fn new(
        cell: Arc<ListenerCell>,
        grace_over: CancellationToken,
        peer: Option<IpAddr>,
    ) -> (Self, OutboxReader) {
        let listener = cell.load();
        let cfg = listener.cfg();
        let codec = ClientCodec::new(
            cfg.dialect,
            SidebandOptions {
                cbor: cfg.sideband_cbor,
                legacy_subjects: cfg.sideband_legacy_subjects,
                reject_app: cfg.sideband_reject_app,
            },
        );
        let metrics = listener.metrics();
        let name = [cfg.name.as_str()];
        let gauges = Gauges {
            messages: metrics.outbox_high_water.with_label_values(&name),
            bytes: metrics.outbox_queued_bytes_max.with_label_values(&name),
        };
        let (outbox, reader) = Outbox::channel(
            cfg.outbox_capacity,
            cfg.outbox_max_bytes,
            OutCodec::new(codec, metrics.clone()),
            cfg.protection.slow_consumer_timeout,
            gauges,
        );
        let pusher = Pusher::new(
            outbox.clone(),
            cfg.max_unanswered_pushes,
            cfg.request_timeout,
            metrics.clone(),
        );
        let session = Session {
            in_flight: Arc::new(Semaphore::new(cfg.max_in_flight)),
            max_in_flight: cfg.max_in_flight,
            peer,
            in_place: InPlace::new(outbox.clone(), grace_over.clone()),
            cell,
            outbox,
            tasks: TaskTracker::new(),
            gone: CancellationToken::new(),
            grace_over,
            client: Arc::new(ClientLinks::new(pusher, peer)),
            parent: tracing::Span::current(),
            rate: Mutex::new(None),
        };
        (session, reader)
    }

    /// The listener as of now.
    fn listener(&self) -> Guard<Arc<Listener>> {
        self.cell.now()
    }

    /// The listener's router as of now.
    fn router(&self) -> Arc<Router> {
        self.cell.now().router().clone()
    }

    /// The client's dialect (fixed for the connection's life).
    fn dialect(&self) -> Dialect {
        self.codec().dialect()
    }

    /// The client's codec, with its dialect's state for the connection.
    fn codec(&self) -> &ClientCodec {
        self.outbox.codec()
    }

    /// Records who the client is (the identity its credential named at
    /// the upgrade): its method policy and the owner of its persistent
    /// subscriptions. Unix-socket clients are never identified: they are
    /// the listener's unnamed client.
    pub fn identify(&self, who: crate::limits::identity::Identity) {
        self.client.identify(who.clone());
        self.in_place.identify(who);
    }

    /// The client's outbox.
    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// The client's address, as log lines name it.
    pub fn peer(&self) -> Peer {
        Peer(self.peer)
    }

    /// Logs that switchyard closes this connection with `code` for
    /// `reason` (throttled per listener and reason).
    pub fn log_closed(&self, code: CloseCode, reason: &str) {
        self.listener().log_closed(code, reason, self.peer());
    }

    /// Handles one inbound text frame or line; what it carries is decoded
    /// as slices of it.
    pub async fn on_text(&self, text: &ByteString) -> Verdict {
        // One read of the listener for the decode's limit and the counts
        // (not held across the await below).
        let inbound = {
            let listener = self.listener();
            let inbound = self
                .codec()
                .decode_text(text, listener.cfg().max_batch_items);
            self.count_in(&listener, text.len(), &inbound);
            inbound
        };
        self.on_inbound(inbound).await
    }

    /// Handles one inbound binary frame (Sideband); what it carries is
    /// decoded as slices of it.
    pub async fn on_binary(&self, bytes: &bytes::Bytes) -> Verdict {
        let inbound = self.codec().decode_binary(bytes);
        self.count_in(&self.listener(), bytes.len(), &inbound);
        self.on_inbound(inbound).await
    }

    /// Does what one inbound frame asks, as the codec decoded it.
    async fn on_inbound(&self, inbound: Inbound) -> Verdict {
        // The listener is read per use, never held across an await (a
        // reload may replace it meanwhile).
        match inbound {
            Inbound::Single(item) => return self.single(item).await,
            Inbound::Batch(items) => return self.batch(items).await,
            Inbound::Rejected(reply) => {
                self.listener()
                    .count_protocol_error(ProtocolError::RejectedMessage);
                self.send(&reply).await;
            }
            Inbound::Nothing => {}
            Inbound::Answer(frame) => {
                self.outbox.send_frame(Outgoing::Binary(frame.into())).await;
            }
            Inbound::Dropped(reason) => self.listener().count_dropped(DropReason::Sideband(reason)),
            Inbound::PeerError { code, message } => {
                let listener = self.listener();
                tracing::debug!(listener = %listener.name(), code, message, "ErrorFrame from client");
                listener.count_protocol_error(ProtocolError::PeerErrorFrame);
            }
            Inbound::Close { last, code, reason } => {
                let fatal = if self.codec().reads_binary() {
                    ProtocolError::FatalFrame
                } else {
                    ProtocolError::FatalMessage
                };
                self.listener().count_protocol_error(fatal);
                if let Some(frame) = last {
                    self.outbox.send_frame(Outgoing::Binary(frame.into())).await;
                }
                self.outbox.close(code, reason).await;
                return Verdict::Close(code);
            }
        }
        Verdict::Continue
    }

    /// Counts an inbound frame and its messages (and a batch's size).
    fn count_in(&self, listener: &Listener, bytes: usize, inbound: &Inbound) {
        let (m, d) = (listener.metrics(), self.dialect());
        m.count_frame(d, Side::Client, Direction::In, bytes);
        let count = |item: &Item| {
            if let Item::Valid(msg) = item {
                m.count_message(d, Side::Client, Direction::In, msg.kind());
            }
        };
        match inbound {
            Inbound::Single(item) => count(item),
            Inbound::Batch(items) => {
                m.observe_batch(listener.name(), items.len());
                items.iter().for_each(count);
            }
            Inbound::Rejected(_)
            | Inbound::Nothing
            | Inbound::Answer(_)
            | Inbound::Dropped(_)
            | Inbound::PeerError { .. }
            | Inbound::Close { .. } => {}
        }
    }

    /// Queues a reply rendered by the session's codec.
    pub async fn send(&self, msg: &Message) {
        self.outbox.send(msg).await;
    }

    /// The frame to send when the connection opens (Sideband's handshake).
    pub fn greeting(&self) -> Option<Outgoing> {
        self.codec()
            .greeting()
            .map(|frame| Outgoing::Binary(frame.into()))
    }

    /// True while the client has not sent the handshake its dialect
    /// requires (Sideband).
    pub fn negotiating(&self) -> bool {
        self.codec().negotiating()
    }

    /// True when the dialect reads binary frames (Sideband), false for text.
    pub fn binary(&self) -> bool {
        self.codec().reads_binary()
    }

    /// The listener's name.
    pub fn listener_name(&self) -> String {
        self.listener().name().to_owned()
    }

    /// The dialect's answer to a message over `limit` bytes, then close
    /// 1009 (an NDJSON client gets its error line, then the connection
    /// closes): see [`ClientCodec::oversize`].
    pub async fn too_large(&self, limit: usize) {
        let listener = self.listener();
        listener.count_protocol_error(ProtocolError::MessageTooLarge);
        listener.count_limit(Limit::MaxMessageBytes);
        let Oversize { reply, reason } = self.codec().oversize(limit);
        listener.log_closed(CloseCode::TooBig, "message too large", self.peer());
        if let Some(reply) = reply {
            self.send(&reply).await;
        }
        self.outbox.close(CloseCode::TooBig, reason).await;
    }

    /// Counts the client's WebSocket close frame, by code.
    pub fn count_close(&self, code: u16) {
        self.listener()
            .metrics()
            .count_ws_close(self.dialect(), Side::Client, code);
    }

    /// An NDJSON line that is not UTF-8: a parse error; the connection
    /// stays open.
    pub async fn not_utf8(&self) -> Verdict {
        let err = GatewayError::new(ErrorKind::ParseError);
        self.send(&self.codec().error_reply(WireId::null(), &err))
            .await;
        Verdict::Continue
    }

    /// What to send before the shutdown close: a Sideband Control Close
    /// `shutdown`.
    pub fn goodbye(&self) -> Option<Outgoing> {
        self.codec()
            .goodbye()
            .map(|frame| Outgoing::Binary(frame.into()))
    }

    /// Fires when the client's outbox stayed full for the slow-consumer
    /// timeout: the transport closes it (1008).
    pub fn slow_consumer(&self) -> CancellationToken {
        self.outbox.slow().clone()
    }

    /// Fires when a dedicated upstream link dropped: close the client.
    pub fn upstream_lost(&self) -> CancellationToken {
        self.client.lost().clone()
    }

    /// The client is gone: stop every task without replying.
    pub async fn abort(&self) {
        self.gone.cancel();
        self.tasks.close();
        self.in_place.abandon_all();
        self.client.close().await;
    }

    /// Waits for the requests in flight; once the grace period is over,
    /// what is left is answered `unavailable`. Then closes dedicated links.
    pub async fn drain(&self) {
        self.tasks.close();
        // Every in-flight slot back means every request answered.
        let all = u32::try_from(self.max_in_flight).unwrap_or(u32::MAX);
        tokio::select! {
            _ = self.in_flight.acquire_many(all) => {}
            () = self.grace_over.cancelled() => self.in_place.fail_all(),
        }
        self.tasks.wait().await;
        self.client.close().await;
    }

    /// Requests in flight right now.
    pub fn in_flight(&self) -> usize {
        self.max_in_flight - self.in_flight.available_permits()
    }
}
