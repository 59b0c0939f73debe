//! Requests and notifications switchyard pushes to one client (`s1`, `s2`,
//! …): what a per-client upstream originates, and persistent deliveries
//! that wait for room. Pushes a client has not answered are bounded by
//! `max_unanswered_pushes`; each waits at most the request timeout.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus::IntCounterVec;
use tokio::sync::oneshot;

use crate::dialect::ClientCodec;
use crate::envelope::{Message, Payload, WireId};
use crate::error::{ErrorKind, GatewayError, Side};
use crate::outbox::{Offer, Outbox};
use crate::telemetry::metrics::{DropReason, EventDrop, Metrics, Quirk, Unmatched};
use crate::upstream::correlator::{Correlator, Resolution};
use crate::upstream::{Owner, PendingPush, ReplyResult};

/// Sends switchyard-originated requests and notifications to one client.
#[derive(Debug, Clone)]
pub struct Pusher {
    /// The client's outbox, which holds its codec (and so the ids of the
    /// pushes it has not answered, where its dialect needs a map).
    outbox: Outbox,
    /// One allocation per client for what its pushes share.
    shared: Arc<Shared>,
    max_unanswered: usize,
    timeout: Duration,
}

/// What a client's pushes share: made once per connection.
#[derive(Debug)]
struct Shared {
    pushes: Mutex<Correlator<Option<oneshot::Sender<ReplyResult>>>>,
    /// Woken when a push is answered or abandoned: room in the window for
    /// a delivery that waits for it ([`Pusher::push_waiting`]).
    room: tokio::sync::Notify,
    /// The three series a pusher counts into (`unmatched_responses`,
    /// `dropped_messages`, `peer_quirks`), not a copy of every one.
    unmatched: IntCounterVec,
    dropped: IntCounterVec,
    quirks: IntCounterVec,
}

/// Why a push could not be queued.
#[derive(Debug)]
enum Refused {
    /// `max_unanswered` pushes are unanswered already.
    Window,
    /// The client's outbox is full.
    Full,
    /// The client cannot take it (its dialect, its params).
    Other(GatewayError),
}

// === impl Refused ===

impl Refused {
    fn into_error(self) -> GatewayError {
        match self {
            Refused::Window => {
                GatewayError::with_detail(ErrorKind::ResourceExhausted, "client push window full")
            }
            Refused::Full => {
                GatewayError::with_detail(ErrorKind::ResourceExhausted, "client outbox full")
            }
            Refused::Other(e) => e,
        }
    }
}

// === impl Pusher ===

impl Owner for Pusher {
    fn push_request(
        &self,
        method: &str,
        params: Option<Payload>,
    ) -> Result<PendingPush, GatewayError> {
        let (gid, rx) = self.start(method, params).map_err(Refused::into_error)?;
        let this = self.clone();
        Ok(Box::pin(async move { this.wait(gid, rx).await }))
    }

    fn push_notification(&self, method: &str, params: Option<Payload>) {
        // Counted by the pusher when dropped.
        let _ = self.notification(method, params);
    }
}

impl Pusher {
    /// A pusher writing to a client's outbox.
    pub(crate) fn new(
        outbox: Outbox,
        max_unanswered: usize,
        timeout: Duration,
        metrics: &Metrics,
    ) -> Self {
        let shared = Shared {
            pushes: Mutex::new(Correlator::new(false)),
            room: tokio::sync::Notify::new(),
            unmatched: metrics.unmatched_responses.clone(),
            dropped: metrics.dropped_messages.clone(),
            quirks: metrics.peer_quirks.clone(),
        };
        Pusher {
            outbox,
            shared: Arc::new(shared),
            max_unanswered,
            timeout,
        }
    }

    /// Sends the client a request and waits for its reply.
    pub async fn request(&self, method: &str, params: Option<Payload>) -> ReplyResult {
        let (gid, rx) = self.start(method, params).map_err(Refused::into_error)?;
        self.wait(gid, rx).await
    }

    /// Sends the client a notification (a consumed `s<N>` request for
    /// holon-rpc clients). Never waits: a full outbox or push window drops
    /// it, counted, and says why.
    pub fn notification(&self, method: &str, params: Option<Payload>) -> Result<(), EventDrop> {
        if !self.codec().notifies_by_request() {
            let msg = Message::Notification {
                method: method.into(),
                params,
            };
            return match self.outbox.offer(&msg) {
                Offer::Queued | Offer::Closed => Ok(()),
                Offer::Full => {
                    self.count_dropped(DropReason::SlowConsumer);
                    Err(EventDrop::SlowConsumer)
                }
                Offer::Untranslatable => {
                    self.count_dropped(DropReason::Untranslatable);
                    Err(EventDrop::Untranslatable)
                }
            };
        }
        let params = self
            .codec()
            .push_notification_params(params)
            .unwrap_or_else(|wrapped| {
                self.count_quirk(Quirk::ParamsWrapped);
                wrapped
            });
        // A full window or outbox was counted by start().
        let (gid, rx) = self
            .start(method, params)
            .map_err(|refused| match refused {
                Refused::Window => EventDrop::PushWindow,
                Refused::Full => EventDrop::SlowConsumer,
                Refused::Other(_) => EventDrop::Untranslatable,
            })?;
        let this = self.clone();
        tokio::spawn(async move {
            if let Ok(Message::Error { .. }) = this.wait(gid, rx).await {
                this.count_dropped(DropReason::PushRejected);
            }
        });
        Ok(())
    }

    /// Sends the client a request whose reply is consumed (a persistent
    /// delivery to a holon-rpc client), waiting for room in the push
    /// window and then in the outbox rather than dropping it: `Queued`,
    /// `Untranslatable` (params the dialect cannot carry) or `Closed` (the
    /// client is gone).
    pub(crate) async fn push_waiting(&self, method: &str, params: Option<Payload>) -> Offer {
        let Ok(params) = self.codec().push_request_params(method, params) else {
            return Offer::Untranslatable;
        };
        loop {
            let room = self.shared.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            let claimed = {
                let mut table = self.shared.pushes.lock();
                if table.len() >= self.max_unanswered {
                    None
                } else {
                    let (tx, rx) = oneshot::channel();
                    table.insert(Some(tx)).ok().map(|gid| (gid, rx))
                }
            };
            let Some((gid, rx)) = claimed else {
                tokio::select! {
                    () = &mut room => continue,
                    () = self.outbox.closed() => return Offer::Closed,
                }
            };
            let msg = Message::Request {
                id: self.codec().push_id(gid),
                method: method.into(),
                params: params.clone(),
            };
            let offer = self.outbox.deliver(&msg).await;
            if offer != Offer::Queued {
                self.shared.pushes.lock().cancel(gid);
                self.shared.room.notify_waiters();
                return offer;
            }
            let this = self.clone();
            tokio::spawn(async move {
                if let Ok(Message::Error { .. }) = this.wait(gid, rx).await {
                    this.count_dropped(DropReason::PushRejected);
                }
            });
            return Offer::Queued;
        }
    }

    /// The client's codec.
    pub(crate) fn codec(&self) -> &ClientCodec {
        self.outbox.codec()
    }

    /// The client's outbox.
    pub(crate) fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// Queues a request to the client now: checks the push window, takes
    /// an `s<N>` id, and puts the frame in the outbox.
    fn start(
        &self,
        method: &str,
        params: Option<Payload>,
    ) -> Result<(u64, oneshot::Receiver<ReplyResult>), Refused> {
        let params = self
            .codec()
            .push_request_params(method, params)
            .map_err(Refused::Other)?;
        let (tx, rx) = oneshot::channel();
        let mut table = self.shared.pushes.lock();
        if table.len() >= self.max_unanswered {
            self.count_dropped(DropReason::PushWindow);
            return Err(Refused::Window);
        }
        let gid = table.insert(Some(tx)).map_err(|_| {
            Refused::Other(GatewayError::new(ErrorKind::Unavailable).on(Side::Client))
        })?;
        // A Sideband push's fresh random cid is also the request frame's id.
        let msg = Message::Request {
            id: self.codec().push_id(gid),
            method: method.into(),
            params,
        };
        if self.outbox.offer(&msg) != Offer::Queued {
            table.cancel(gid);
            self.codec().forget_push(gid);
            self.count_dropped(DropReason::SlowConsumer);
            return Err(Refused::Full);
        }
        Ok((gid, rx))
    }

    /// Waits for the reply to push `gid`; after the push timeout its id is
    /// abandoned (a late reply is then stale).
    async fn wait(&self, gid: u64, rx: oneshot::Receiver<ReplyResult>) -> ReplyResult {
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(GatewayError::new(ErrorKind::Unavailable).on(Side::Client)),
            Err(_) => {
                self.shared.pushes.lock().abandon(gid);
                self.shared.room.notify_waiters();
                self.codec().forget_push(gid);
                Err(GatewayError::new(ErrorKind::Timeout).on(Side::Client))
            }
        }
    }

    /// Settles a push with the client's reply. Returns false (and counts)
    /// when the id was not pending.
    pub fn settle(&self, id: &WireId, reply: ReplyResult) -> bool {
        let gid = self.codec().push_number(id);
        let resolution = gid.map_or(Resolution::Unknown, |gid| {
            self.shared.pushes.lock().resolve(gid)
        });
        let kind = match resolution {
            Resolution::Pending(waiter) => {
                self.shared.room.notify_waiters();
                if let Some(waiter) = waiter {
                    // The pushing task may have given up meanwhile.
                    let _ = waiter.send(reply);
                }
                return true;
            }
            Resolution::Stale => Unmatched::Stale,
            Resolution::Duplicate => Unmatched::Duplicate,
            Resolution::Unknown => Unmatched::Unknown,
        };
        self.shared
            .unmatched
            .with_label_values(&[
                self.codec().dialect().as_str(),
                Side::Client.as_str(),
                kind.as_str(),
            ])
            .inc();
        false
    }

    /// Counts a message to this client dropped for `reason`.
    pub(crate) fn count_dropped_client(&self, reason: DropReason) {
        self.count_dropped(reason);
    }

    /// As `Metrics::count_dropped`, for this client's side.
    fn count_dropped(&self, reason: DropReason) {
        let labels = [
            self.codec().dialect().as_str(),
            Side::Client.as_str(),
            reason.as_str(),
        ];
        self.shared.dropped.with_label_values(&labels).inc();
    }

    fn count_quirk(&self, quirk: Quirk) {
        self.shared
            .quirks
            .with_label_values(&[self.codec().dialect().as_str(), quirk.as_str()])
            .inc();
    }
}
