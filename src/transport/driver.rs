//! One connection driver for every listener: the reader loop over a
//! `Stream` of [`Incoming`] frames and the writer loop over a [`FrameSink`],
//! whatever the transport (WebSocket or NDJSON over a Unix socket; tests
//! drive it with in-memory channels).
//!
//! Each concern lives here once: idle timeout and connection lifetime, the
//! WebSocket ping and the Sideband handshake deadline, oversize messages
//! (answered in the dialect, then closed 1009), frames of the wrong kind
//! (1003), the slow-consumer close (1008), a lost dedicated upstream link
//! (1001), shutdown, and the writer's timeout when closing; and the
//! diagnostic echo listener (`echo = true`), which answers each message
//! with itself here instead of handing it to the session. The transports
//! only turn their bytes into [`Incoming`] and write [`Outgoing`] frames.

use std::future::Future;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::time::Instant;

use super::session::{Session, Verdict};
use super::{Listener, ListenerCell, Serve};
use crate::close::CloseCode;
use crate::envelope::Text;
use crate::outbox::{OutboxReader, Outgoing};
use crate::telemetry::metrics::{FrameCounter, Limit, ProtocolError};

/// How long a Sideband client has to send its handshake.
const SIDEBAND_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a closing connection's writer has to send what is queued.
pub(crate) const WRITER_TIMEOUT: Duration = Duration::from_secs(2);

/// One thing read from a client, whatever the transport.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A text frame or an NDJSON line (UTF-8), in the bytes it was read
    /// into: what is decoded from it is sliced out of them, not copied.
    Text(Text),
    /// A binary frame.
    Binary(bytes::Bytes),
    /// An NDJSON line that is not UTF-8.
    NotUtf8,
    /// A WebSocket ping or pong: activity only.
    Control,
    /// The peer's close frame, with its code (1005 when it gave none).
    Close(u16),
    /// A message above even the transport's own limit.
    TooLarge,
    /// A frame that breaks the WebSocket protocol: fail the connection
    /// with this close code (RFC 6455 §7.1.7).
    Broken(CloseCode, &'static str),
    /// The input ended cleanly (an NDJSON half-close): answer what is
    /// pending, then close.
    Eof,
    /// The peer vanished or the read failed.
    Gone,
}

/// How the reader loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The client vanished: stop without answering.
    Gone,
    /// The input ended: answer what is pending, then close.
    Eof,
    /// switchyard closes the connection (the close frame is queued).
    Closing,
    /// Graceful shutdown.
    Shutdown,
    /// A dedicated upstream link dropped: finish what is pending (it fails
    /// with `unavailable` at once), then close 1001.
    UpstreamLost,
}

/// A connection's settings fixed when it opens (a reload applies them to
/// new connections): its message limit and its timers.
#[derive(Debug, Clone)]
pub(crate) struct Fixed {
    max_message_bytes: usize,
    idle_timeout: Option<Duration>,
    max_connection_lifetime: Option<Duration>,
    /// WebSocket: ping after this much silence, drop the peer if nothing
    /// comes back within the second.
    ping: Option<(Duration, Duration)>,
    /// The diagnostic echo listener: messages come back unchanged.
    echo: bool,
}

impl Fixed {
    /// The settings of `listener`, with `ping` for WebSocket connections.
    pub(crate) fn of(listener: &Listener, ping: Option<(Duration, Duration)>) -> Self {
        let cfg = listener.cfg();
        Fixed {
            max_message_bytes: cfg.max_message_bytes,
            idle_timeout: cfg.protection.idle_timeout,
            max_connection_lifetime: cfg.protection.max_connection_lifetime,
            ping,
            echo: cfg.echo,
        }
    }
}

/// Where the writer loop puts frames.
pub(crate) trait FrameSink: Send {
    /// Buffers one frame (written when the buffer is full or flushed).
    fn feed(&mut self, out: Outgoing) -> impl Future<Output = Result<(), ()>> + Send;
    /// Writes what is buffered.
    fn flush(&mut self) -> impl Future<Output = Result<(), ()>> + Send;
    /// Sends the close (`Outgoing::Close`) and what is buffered; the last
    /// call.
    fn close(&mut self, out: Outgoing) -> impl Future<Output = ()> + Send;
}

/// Reads the client until the connection must end; see [`End`].
///
/// The listener is read from `cell` only where it is needed, never held (a
/// reload may replace it); what is fixed for the connection is in `cfg`.
///
/// Its future is most of what an idle connection holds, so what waits on
/// the outbox here (a close, an oversize answer, the echo listener's
/// echo) is boxed when it happens, and a request's slow path is boxed by
/// the session: the loop's own state is what every frame needs.
pub(crate) async fn read_loop<S>(
    mut frames: S,
    session: &Session,
    cell: &ListenerCell,
    ctx: &Serve,
    cfg: &Fixed,
) -> End
where
    S: Stream<Item = Incoming> + Unpin,
{
    let outbox = session.outbox();
    let mut clock = Clock::new(cfg);
    let (lost, slow) = (session.upstream_lost(), session.slow_consumer());
    // Made once, not per frame: each `cancelled()` registers a waiter.
    let (lost, slow, shutdown) = (lost.cancelled(), slow.cancelled(), ctx.shutdown.cancelled());
    tokio::pin!(lost, slow, shutdown);
    loop {
        // Frames first: the other branches are polled only when no frame
        // is ready (the runtime's budget makes that happen often).
        let frame = tokio::select! {
            biased;
            frame = frames.next() => frame.unwrap_or(Incoming::Gone),
            () = &mut lost => return End::UpstreamLost,
            () = &mut slow => {
                let listener = cell.load();
                listener.count_protocol_error(ProtocolError::SlowConsumer);
                listener.count_limit(Limit::SlowConsumer);
                listener.log_closed(CloseCode::PolicyViolation, "slow consumer", session.peer());
                // The outbox is full: the close frame may not fit; the socket goes anyway.
                outbox.try_close(CloseCode::PolicyViolation, "slow consumer");
                return End::Gone;
            }
            _ = clock.tick.tick() => {
                // A connection quiet since the last tick lets go of its
                // outbox's frame buffer.
                outbox.tidy();
                match clock.check(session, cfg) {
                    Check::Fine => {}
                    Check::Ping => outbox.try_ping(),
                    Check::Drop => return End::Gone,
                    Check::Close(code, reason) => {
                        Box::pin(outbox.close(code, reason)).await;
                        return End::Closing;
                    }
                }
                continue;
            }
            () = &mut shutdown => return End::Shutdown,
        };
        clock.seen = true;
        let verdict = match frame {
            Incoming::Text(text) if cfg.echo && text.len() <= cfg.max_message_bytes => {
                Box::pin(outbox.send_frame(Outgoing::Text(text.to_string().into()))).await;
                Verdict::Continue
            }
            Incoming::Binary(bytes) if cfg.echo && bytes.len() <= cfg.max_message_bytes => {
                Box::pin(outbox.send_frame(Outgoing::Binary(bytes))).await;
                Verdict::Continue
            }
            Incoming::Text(_) if session.binary() => {
                cell.load().count_protocol_error(ProtocolError::TextFrame);
                Box::pin(outbox.close(CloseCode::Unsupported, "Text frames not supported")).await;
                return End::Closing;
            }
            Incoming::Binary(_) if !session.binary() => {
                cell.load().count_protocol_error(ProtocolError::BinaryFrame);
                let close = outbox.close(CloseCode::Unsupported, "binary frames are not supported");
                Box::pin(close).await;
                return End::Closing;
            }
            Incoming::Text(text) if text.len() > cfg.max_message_bytes => {
                Box::pin(session.too_large(cfg.max_message_bytes)).await;
                return End::Closing;
            }
            Incoming::Binary(bytes) if bytes.len() > cfg.max_message_bytes => {
                Box::pin(session.too_large(cfg.max_message_bytes)).await;
                return End::Closing;
            }
            Incoming::Broken(code, reason) => {
                cell.load().count_protocol_error(ProtocolError::BrokenFrame);
                // The library may have queued its own close already; the
                // writer then flushes that one.
                outbox.try_close(code, reason);
                return End::Closing;
            }
            Incoming::TooLarge => {
                // The transport stopped at the frame header: answer like any
                // oversize message, and let the writer send it all.
                Box::pin(session.too_large(cfg.max_message_bytes)).await;
                return End::Closing;
            }
            Incoming::Text(text) => session.on_text(&text).await,
            Incoming::Binary(bytes) => session.on_binary(&bytes).await,
            Incoming::NotUtf8 => Box::pin(session.not_utf8()).await,
            Incoming::Control => Verdict::Continue,
            Incoming::Close(code) => {
                session.count_close(code);
                // Complete the closing handshake: the library has queued
                // the echo of the client's close; the writer flushes it. A
                // full outbox (a client that closes without reading) is
                // not waited for.
                return if outbox.try_close(CloseCode::Normal, "") {
                    End::Closing
                } else {
                    End::Gone
                };
            }
            Incoming::Eof => return End::Eof,
            Incoming::Gone => return End::Gone,
        };
        if let Verdict::Close(..) = verdict {
            return End::Closing;
        }
    }
}

/// Ends the session as `end` says, then lets the writer send what is
/// queued (the close frame last) within [`WRITER_TIMEOUT`]; a client that
/// does not read is cut off then.
///
/// The transports box its future when the read loop ends, so that a
/// connection's task does not carry room for it while it reads.
pub(crate) async fn finish(end: End, session: Session, mut writer: tokio::task::JoinHandle<()>) {
    let outbox = session.outbox().clone();
    match end {
        End::Gone | End::Closing => session.abort().await,
        End::Eof => {
            session.drain().await;
            outbox.close(CloseCode::Normal, "").await;
        }
        End::Shutdown => {
            session.drain().await;
            if let Some(goodbye) = session.goodbye() {
                outbox.send_frame(goodbye).await;
            }
            outbox.close(CloseCode::GoingAway, "going away").await;
        }
        End::UpstreamLost => {
            session.drain().await;
            outbox
                .close(CloseCode::GoingAway, "upstream connection lost")
                .await;
        }
    }
    let name = session.listener_name();
    drop(session);
    drop(outbox);
    if end == End::Gone {
        writer.abort();
    } else if tokio::time::timeout(WRITER_TIMEOUT, &mut writer)
        .await
        .is_err()
    {
        writer.abort();
        tracing::debug!(listener = %name, "writer did not finish closing in time");
    }
}

/// Drains the outbox into `sink`, flushing whenever the outbox runs empty,
/// until a close is sent, a write fails or every outbox handle is dropped.
pub(crate) async fn write_loop<K: FrameSink>(
    mut sink: K,
    mut rx: OutboxReader,
    sent: FrameCounter,
) {
    // Frames are counted here and published when the outbox runs empty,
    // before the flush, and when the loop ends (the tally's drop).
    let mut sent = sent.tally();
    while let Some(out) = rx.recv().await {
        let result = match out {
            Outgoing::Close(..) => {
                sent.publish();
                // Boxed: the writer's task keeps no room for the close.
                Box::pin(sink.close(out)).await;
                return;
            }
            Outgoing::Text(ref text) => {
                sent.count(text.len());
                sink.feed(out).await
            }
            Outgoing::Rendered(ref bytes) => {
                sent.count(bytes.len());
                sink.feed(out).await
            }
            Outgoing::Binary(ref bytes) => {
                sent.count(bytes.len());
                sink.feed(out).await
            }
            Outgoing::Ping => sink.feed(out).await,
        };
        if result.is_err() {
            return;
        }
        if rx.is_empty() {
            sent.publish();
            if sink.flush().await.is_err() {
                return;
            }
        }
    }
    sent.publish();
    // Every handle is gone without a close: best effort.
    let _ = sink.flush().await;
}

/// The longest period of a connection's tick: a connection that has been
/// quiet for a tick lets go of its outbox's frame buffer (16 KiB), so an
/// idle one holds none for longer than two ticks.
const TIDY_EVERY: Duration = Duration::from_secs(5);

/// The reader's clock: a coarse tick instead of a clock read per frame.
struct Clock {
    tick: tokio::time::Interval,
    opened: Instant,
    last_rx: Instant,
    ping_sent: Option<Instant>,
    /// Frames arrived since the last tick.
    seen: bool,
}

/// What the tick found.
enum Check {
    Fine,
    Ping,
    /// The peer missed its pong: drop it.
    Drop,
    Close(CloseCode, &'static str),
}

impl Clock {
    fn new(cfg: &Fixed) -> Self {
        let ping = cfg.ping.map(|(every, wait)| every.min(wait));
        let mut limits = [cfg.idle_timeout, cfg.max_connection_lifetime, ping]
            .into_iter()
            .flatten()
            .peekable();
        let period = match limits.peek() {
            None => TIDY_EVERY,
            Some(_) => (limits.fold(Duration::MAX, Duration::min) / 4).min(TIDY_EVERY),
        };
        let period = period.max(Duration::from_millis(10));
        let now = Instant::now();
        Clock {
            tick: tokio::time::interval_at(now + period, period),
            opened: now,
            last_rx: now,
            ping_sent: None,
            seen: false,
        }
    }

    fn check(&mut self, session: &Session, cfg: &Fixed) -> Check {
        // Frames since the last tick count as "now".
        if std::mem::take(&mut self.seen) {
            self.last_rx = Instant::now();
            self.ping_sent = None;
        }
        if cfg
            .idle_timeout
            .is_some_and(|t| self.last_rx.elapsed() >= t)
        {
            return Check::Close(CloseCode::GoingAway, "idle timeout");
        }
        if cfg
            .max_connection_lifetime
            .is_some_and(|t| self.opened.elapsed() >= t)
        {
            return Check::Close(CloseCode::GoingAway, "connection lifetime reached");
        }
        if session.negotiating() && self.opened.elapsed() >= SIDEBAND_HANDSHAKE_TIMEOUT {
            return Check::Close(CloseCode::Normal, "negotiation_failed");
        }
        let Some((every, wait)) = cfg.ping else {
            return Check::Fine;
        };
        if self.ping_sent.is_some_and(|t| t.elapsed() >= wait) {
            let name = session.listener_name();
            tracing::debug!(listener = %name, "peer missed its pong; dropping it");
            return Check::Drop;
        }
        if self.ping_sent.is_none() && self.last_rx.elapsed() >= every {
            self.ping_sent = Some(Instant::now());
            return Check::Ping;
        }
        Check::Fine
    }
}
