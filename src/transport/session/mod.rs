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
//!
//! ## Dispatch
//!
//! Dispatching what a client sent, and its admission under the rate
//! limits (a request over a limit is answered, a notification dropped, an
//! abuser closed; each logged, throttled per listener and reason).
//!
//! A single request is rate-checked and admitted under an in-flight
//! permit, then handed to its pooled upstream from the reader (written
//! now, or parked there until there is room: no task either way), or run
//! in a task of its own (per-client and streaming upstreams,
//! notifications, the methods switchyard serves itself). A batch is
//! rate-checked item by item (each request takes a permit) and runs in one
//! task that answers it as one reply. At the connection's in-flight cap the
//! reader waits for a slot: the client is no longer read (TCP back-pressure)
//! instead of being refused.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use arc_swap::Guard;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::close::CloseCode;
use crate::dialect::sideband::client::Options as SidebandOptions;
use crate::dialect::{ClientCodec, Dialect, Inbound, Item, Oversize};
use crate::envelope::{Message, Text, WireId};
use crate::error::{ErrorKind, GatewayError, Side};
use crate::limits::cap::{Cap, Taken};
use crate::limits::rate::{ConnectionRate, Limited, Verdict as RateVerdict};
use crate::outbox::{Gauges, OutCodec, Outbox, OutboxReader, Outgoing};
use crate::router::in_place::{InPlace, NotPlaced};
use crate::router::{ClientLinks, Pusher, Router, Starts};
use crate::telemetry::metrics::{
    Direction, DropReason, FrameCounter, Limit, MessageCounter, ProtocolError,
};
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
    in_flight: Arc<Cap>,
    tasks: TaskTracker,
    /// Cancelled when the shutdown grace period is over.
    grace_over: CancellationToken,
    /// Dedicated upstream links and pushes of this client; its token
    /// ([`ClientLinks::on_gone`]) is cancelled when the client is gone,
    /// and the session's tasks stop then too, without replying.
    client: Arc<ClientLinks>,
    /// The connection's span (it may carry a `traceparent` from the
    /// upgrade request): the parent of every request span.
    parent: tracing::Span,
    /// This connection's rate limits (`None` until first used), rebuilt
    /// when a reload changes the listener's rates; boxed, so that a
    /// connection whose listener has no rate limits holds no room for
    /// them.
    rate: Mutex<Option<Box<ConnectionRate>>>,
    /// Requests settled in place (the fast path) and where they reply.
    in_place: Arc<InPlace>,
    /// What the client sends, counted per frame and per message
    /// (resolved once: the dialect is the connection's).
    counted_in: (FrameCounter, MessageCounter),
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
            OutCodec::new(codec, metrics),
            cfg.protection.slow_consumer_timeout,
            gauges,
        );
        let pusher = Pusher::new(
            outbox.clone(),
            cfg.max_unanswered_pushes,
            cfg.request_timeout,
            metrics,
        );
        let counted_in = (
            metrics.frame_counter(cfg.dialect, Side::Client, Direction::In),
            metrics.message_counter(cfg.dialect, Side::Client, Direction::In),
        );
        let session = Session {
            counted_in,
            in_flight: Arc::new(Cap::new(cfg.max_in_flight)),
            max_in_flight: cfg.max_in_flight,
            peer,
            in_place: InPlace::new(outbox.clone(), grace_over.clone()),
            cell,
            outbox,
            tasks: TaskTracker::new(),
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
    ///
    /// What the fast path ([`Self::now`]) leaves is done in a boxed future
    /// ([`Self::later`]): the reader's own future, which a connection keeps
    /// for its whole life, then has no room for the slow paths' state.
    pub async fn on_text(&self, text: &Text) -> Verdict {
        // One read of the listener for the decode's limit, the counts and
        // a request settled in place (not held across the awaits below).
        let later = {
            let listener = self.listener();
            let inbound = self
                .codec()
                .decode_text(text, listener.cfg().max_batch_items);
            self.count_in(&listener, text.len(), &inbound);
            match self.now(&listener, inbound) {
                Ok(verdict) => return verdict,
                Err(later) => later,
            }
        };
        Box::pin(self.later(later)).await
    }

    /// Handles one inbound binary frame (Sideband); what it carries is
    /// decoded as slices of it.
    pub async fn on_binary(&self, bytes: &bytes::Bytes) -> Verdict {
        let later = {
            let listener = self.listener();
            let inbound = self.codec().decode_binary(bytes);
            self.count_in(&listener, bytes.len(), &inbound);
            match self.now(&listener, inbound) {
                Ok(verdict) => return verdict,
                Err(later) => later,
            }
        };
        Box::pin(self.later(later)).await
    }

    /// The fast path of a request: within the rate limits, with a free
    /// in-flight slot, settled in place (or handed to a task), all under
    /// one read of the listener and without an await. Gives back what is
    /// left to do otherwise.
    fn now(&self, listener: &Listener, inbound: Inbound) -> Result<Verdict, Later> {
        let item = match inbound {
            Inbound::Single(item @ Item::Valid(Message::Request { .. })) => item,
            inbound => return self.quiet(listener, inbound).map_err(Later::Inbound),
        };
        if let Item::Valid(msg) = &item {
            // holon-rpc's heartbeat (see `single`).
            if let Some(reply) = self.codec().local_reply(msg, false) {
                return Err(Later::Send(reply));
            }
        }
        match self.rate_check(listener, &item) {
            Ok(Checked::Pass) => {}
            Ok(Checked::Limited(reply)) => return Err(Later::Send(reply)),
            Ok(Checked::Dropped) => return Ok(Verdict::Continue),
            Err(verdict) => return Ok(verdict),
        }
        match self.in_flight.try_hold(1) {
            Some(permit) => Ok(self.admit(listener, item, permit)),
            None => Err(Later::Admitted(item)),
        }
    }

    /// Does what the fast path ([`Self::now`]) left.
    async fn later(&self, later: Later) -> Verdict {
        match later {
            Later::Inbound(Inbound::Single(item)) => self.single(item).await,
            Later::Inbound(inbound) => self.on_inbound(inbound).await,
            Later::Admitted(item) => self.admitted(item).await,
            Later::Send(reply) => {
                // Answered at once, in order with what follows.
                self.send(&reply).await;
                Verdict::Continue
            }
        }
    }

    /// What an inbound frame that sends nothing asks (a Sideband frame
    /// that needs no answer, a dropped one, the client's error frame),
    /// done at once; any other frame is given back.
    fn quiet(&self, listener: &Listener, inbound: Inbound) -> Result<Verdict, Inbound> {
        match inbound {
            Inbound::Nothing => {}
            Inbound::Dropped(reason) => listener.count_dropped(DropReason::Sideband(reason)),
            Inbound::PeerError { code, message } => {
                tracing::debug!(listener = %listener.name(), code, message, "ErrorFrame from client");
                listener.count_protocol_error(ProtocolError::PeerErrorFrame);
            }
            inbound => return Err(inbound),
        }
        Ok(Verdict::Continue)
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
            Inbound::Answer(frame) => {
                self.outbox.send_frame(Outgoing::Binary(frame.into())).await;
            }
            inbound @ (Inbound::Nothing | Inbound::Dropped(_) | Inbound::PeerError { .. }) => {
                // Not reached from the reader (its fast path does these),
                // but handled the same way if it were.
                let _ = self.quiet(&self.listener(), inbound);
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
        let (frames, messages) = &self.counted_in;
        frames.count(bytes);
        let count = |item: &Item| {
            if let Item::Valid(msg) = item {
                messages.count(msg.kind());
            }
        };
        match inbound {
            Inbound::Single(item) => count(item),
            Inbound::Batch(items) => {
                listener
                    .metrics()
                    .observe_batch(listener.name(), items.len());
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
        self.client.on_gone().cancel();
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
            taken = self.in_flight.take_many(all) => {
                if taken.is_ok() {
                    self.in_flight.give_back(all as usize);
                }
            }
            () = self.grace_over.cancelled() => self.in_place.fail_all(),
        }
        self.tasks.wait().await;
        self.client.close().await;
    }

    /// Requests in flight right now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.held()
    }
}

// === Dispatch ===

/// What the fast path of an inbound frame ([`Session::now`]) left to do.
enum Later {
    /// The frame, as decoded.
    Inbound(Inbound),
    /// A request within the rate limits that waits for an in-flight slot.
    Admitted(Item),
    /// A reply to queue (a request over a rate limit, holon-rpc's
    /// heartbeat).
    Send(Message),
}

/// An item after the rate limits.
enum Checked {
    /// Within the limits.
    Pass,
    /// A request over a limit: answer it with this error.
    Limited(Message),
    /// A notification over a limit: dropped (counted).
    Dropped,
}

// === impl Session ===

impl Session {
    /// One message (not a batch): a request, a notification, a reply to a
    /// call switchyard made, or an item already answered with an error.
    async fn single(&self, item: Item) -> Verdict {
        if let Item::Valid(msg @ Message::Request { .. }) = &item {
            // holon-rpc's heartbeat is answered at once: never routed, never
            // queued, and never counted against the rate limits
            // (holon-rpc.md §10). (A `ping` notification is answered by the
            // router, after the rate limits.)
            if let Some(reply) = self.codec().local_reply(msg, false) {
                self.send(&reply).await;
                return Verdict::Continue;
            }
        }
        // The item is looked at, not moved (a move copies the whole
        // message); the listener's read ends before any await.
        let checked = self.rate_check(&self.listener(), &item);
        match checked {
            Ok(Checked::Pass) => {}
            Ok(Checked::Limited(reply)) => {
                // Answered at once, in order with what follows.
                self.send(&reply).await;
                return Verdict::Continue;
            }
            Ok(Checked::Dropped) => return Verdict::Continue,
            Err(verdict) => return verdict,
        }
        self.admitted(item).await
    }

    /// An item within the rate limits: a request once it has an in-flight
    /// slot, anything else in a task.
    async fn admitted(&self, item: Item) -> Verdict {
        let Item::Valid(Message::Request { id, .. }) = &item else {
            return self.spawn(item, None);
        };
        let permit = match self.permits(1).await {
            Ok(permit) => permit,
            Err(NoSlot::ShuttingDown) => {
                let reply = self.router().error_reply(id.clone(), &shutting_down());
                self.send(&reply).await;
                return Verdict::Continue;
            }
            // Being closed: nobody reads the answer.
            Err(NoSlot::Slow) => return Verdict::Continue,
        };
        self.admit(&self.listener(), item, permit)
    }

    /// A request with its in-flight slot: settled in place, else in a task.
    fn admit(&self, listener: &Listener, item: Item, permit: Taken) -> Verdict {
        let (id, method, params) = match item {
            Item::Valid(Message::Request { id, method, params }) => (id, method, params),
            item => return self.spawn(item, Some(permit)),
        };
        let req = NotPlaced {
            id,
            method,
            params,
            permit,
        };
        match self.in_place.place(listener.router(), &self.parent, req) {
            Ok(()) => Verdict::Continue,
            Err(req) => self.spawn(
                Item::Valid(Message::Request {
                    id: req.id,
                    method: req.method,
                    params: req.params,
                }),
                Some(req.permit),
            ),
        }
    }

    /// Runs one item in a task of its own (the task path).
    fn spawn(&self, item: Item, permit: Option<Taken>) -> Verdict {
        let (router, client, outbox) = (self.router(), self.client.clone(), self.outbox.clone());
        let grace_over = self.grace_over.clone();
        let task = async move {
            let starts = Starts::default();
            let gone = client.on_gone();
            let Some(reply) = settle(&router, item, &client, &starts, gone, &grace_over).await
            else {
                return;
            };
            // The in-flight slot is freed once the reply is queued, and the
            // persistent subscriptions it opened start delivering.
            outbox.send(&reply).await;
            starts.release();
            drop(permit);
        };
        self.tasks.spawn(task.instrument(self.parent.clone()));
        Verdict::Continue
    }

    /// A client batch, answered as one batch reply (nothing when it held
    /// only notifications).
    async fn batch(&self, items: Vec<Item>) -> Verdict {
        let mut checked = Vec::with_capacity(items.len());
        for item in items {
            // Every batch item counts against the rate limits.
            let rated = self.rate_check(&self.listener(), &item);
            match rated {
                Ok(Checked::Pass) => checked.push(item),
                Ok(Checked::Limited(reply)) => checked.push(Item::Invalid(reply)),
                Ok(Checked::Dropped) => {}
                Err(verdict) => return verdict,
            }
        }
        let request_ids: Vec<_> = checked
            .iter()
            .filter_map(|item| match item {
                Item::Valid(Message::Request { id, .. }) => Some(id.clone()),
                _ => None,
            })
            .collect();
        let items = checked;
        // One slot per request, at most the whole cap (a batch larger than
        // the cap runs under all of it).
        let wanted = request_ids.len().min(self.max_in_flight);
        let permits = if wanted == 0 {
            None
        } else {
            match self.permits(wanted).await {
                Ok(p) => Some(p),
                Err(NoSlot::Slow) => return Verdict::Continue,
                Err(NoSlot::ShuttingDown) => {
                    let err = shutting_down();
                    let replies: Vec<Message> = request_ids
                        .into_iter()
                        .map(|id| self.router().error_reply(id, &err))
                        .collect();
                    self.outbox.send_batch(&replies).await;
                    return Verdict::Continue;
                }
            }
        };
        let (router, client, outbox) = (self.router(), self.client.clone(), self.outbox.clone());
        let grace_over = self.grace_over.clone();
        let span = tracing::debug_span!(target: crate::telemetry::trace::RPC_TARGET, parent: &self.parent, "rpc.batch", otel.kind = "server", rpc.batch.size = request_ids.len());
        let task = async move {
            let starts = Starts::default();
            let replies = tokio::select! {
                replies = router.handle_batch(items, &client, &starts) => replies,
                () = client.on_gone().cancelled() => return,
                () = grace_over.cancelled() => {
                    let err = shutting_down();
                    request_ids.into_iter().map(|id| router.error_reply(id, &err)).collect()
                }
            };
            if !replies.is_empty() {
                outbox.send_batch(&replies).await;
            }
            // The in-flight slots are freed once the reply is queued, and
            // the persistent subscriptions it opened start delivering.
            starts.release();
            drop(permits);
        };
        self.tasks.spawn(task.instrument(span));
        Verdict::Continue
    }

    /// `n` in-flight slots. At the connection's cap the reader waits here,
    /// so the client is no longer read (TCP back-pressure) until a reply
    /// frees a slot.
    async fn permits(&self, n: usize) -> Result<Taken, NoSlot> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(taken) = self.in_flight.try_hold(n) {
            return Ok(taken);
        }
        self.listener().count_limit(Limit::MaxInFlight);
        tokio::select! {
            got = self.in_flight.hold(n) => got.map_err(|_| NoSlot::ShuttingDown),
            () = self.grace_over.cancelled() => Err(NoSlot::ShuttingDown),
            () = self.outbox.slow().cancelled() => Err(NoSlot::Slow),
        }
    }

    /// Charges a request or notification against the rate limits. Over a
    /// limit, a request becomes its `rate_limited` error reply and a
    /// notification is dropped (`Ok(None)`), counted; past the abuse
    /// threshold the connection is closed (1008).
    fn rate_check(&self, listener: &Listener, item: &Item) -> Result<Checked, Verdict> {
        let (Item::Valid(Message::Request { method, .. })
        | Item::Valid(Message::Notification { method, .. })) = item
        else {
            return Ok(Checked::Pass);
        };
        if listener.rate().is_off() {
            return Ok(Checked::Pass);
        }
        let verdict = {
            let mut rate = self.rate.lock();
            // First use, or the listener's rates changed in a reload: this
            // connection's own bucket starts over under the new ones.
            let rate = match &mut *rate {
                Some(r) if r.follows(listener.rate()) => r,
                slot => slot.insert(Box::new(listener.rate().connection_of(
                    self.peer.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                    self.client.client_name(),
                ))),
            };
            rate.check(method)
        };
        let limited = match verdict {
            RateVerdict::Allow => return Ok(Checked::Pass),
            RateVerdict::Limit(l) | RateVerdict::Abuse(l) => l,
        };
        listener.count_limit(limit_label(limited));
        if let RateVerdict::Abuse(_) = verdict {
            let reason = "rate limit exceeded";
            listener.log_closed(CloseCode::PolicyViolation, reason, self.peer());
            // Closing anyway: a client that is not reading is cut off
            // without the close frame.
            self.outbox.try_close(CloseCode::PolicyViolation, reason);
            return Err(Verdict::Close(CloseCode::PolicyViolation));
        }
        listener.log_refused_request(refusal_reason(limited), self.peer());
        match item {
            Item::Valid(Message::Request { id, .. }) => {
                let err = GatewayError::with_detail(ErrorKind::RateLimited, limited.as_str());
                Ok(Checked::Limited(
                    listener.router().error_reply(id.clone(), &err),
                ))
            }
            _ => {
                listener.count_dropped(DropReason::RateLimited);
                Ok(Checked::Dropped)
            }
        }
    }
}

/// Runs one item to its reply, unless the client leaves; after the grace
/// period a request still in flight is answered `unavailable`.
async fn settle(
    router: &Router,
    item: Item,
    client: &ClientLinks,
    starts: &Starts,
    gone: &CancellationToken,
    grace_over: &CancellationToken,
) -> Option<Message> {
    let id = match &item {
        Item::Valid(Message::Request { id, .. }) => Some(id.clone()),
        _ => None,
    };
    tokio::select! {
        reply = router.handle(item, client, starts) => reply,
        () = gone.cancelled() => None,
        () = grace_over.cancelled() => {
            id.map(|id| router.error_reply(id, &shutting_down()))
        }
    }
}

/// Why a request got no in-flight slot.
enum NoSlot {
    /// The shutdown grace period is over.
    ShuttingDown,
    /// The client stopped reading and is being closed.
    Slow,
}

fn shutting_down() -> GatewayError {
    GatewayError::with_detail(ErrorKind::Unavailable, "switchyard is shutting down")
        .on(crate::error::Side::Internal)
}

/// The reason a log line gives for a request or notification over a
/// rate limit.
fn refusal_reason(limited: Limited) -> &'static str {
    match limited {
        Limited::Connection => "rate limited: connection",
        Limited::Client => "rate limited: client",
        Limited::Ip => "rate limited: ip",
        Limited::Global => "rate limited: global",
    }
}

fn limit_label(limited: Limited) -> Limit {
    match limited {
        Limited::Connection => Limit::RatePerSecond,
        Limited::Client => Limit::ClientRatePerSecond,
        Limited::Ip => Limit::IpRatePerSecond,
        Limited::Global => Limit::GlobalRatePerSecond,
    }
}
