//! One link driver for every upstream transport: the reader loop over a
//! `Stream` of [`Incoming`] frames and the writer loop over a [`FrameSink`],
//! whatever the transport (NDJSON lines over a Unix socket, WebSocket text
//! or binary frames) and the dialect (the link's codec).
//!
//! Each concern lives here once: reading and the frame kind the dialect
//! expects (a binary frame on a text link closes it 1003, and a text frame
//! on a binary one), the upstream's close and a refused handshake, the
//! store's back-pressure between reads, liveness (WebSocket pings, holon
//! heartbeats), the goodbye, and failing every call in flight when the
//! link ends. Correlating replies, abandoning and expiring calls are the
//! [`Link`]'s; reconnecting is the pool's (`pool`). The transports only
//! dial, turn their bytes into [`Incoming`] and write [`Outgoing`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytestring::ByteString;
use futures_util::{Stream, StreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::LinkError;
use super::link::Link;
use super::outlet::{Segments, Wire};
use crate::close::CloseCode;
use crate::dialect::link::{Farewell, Framing, Liveness};
use crate::telemetry::metrics::ProtocolError;

/// One thing read from an upstream, whatever the transport.
#[derive(Debug)]
pub(super) enum Incoming {
    /// A text frame or an NDJSON line (UTF-8), in the bytes it was read
    /// into.
    Text(ByteString),
    /// A binary frame.
    Binary(bytes::Bytes),
    /// An NDJSON line that is not UTF-8 (dropped and counted; the framing
    /// is intact).
    NotUtf8,
    /// A WebSocket ping or pong: activity only.
    Control,
    /// The upstream's close frame: its code (1005 when it gave none) and
    /// reason.
    Close(u16, String),
    /// Reading failed (too long, broken, reset).
    Failed(LinkError),
}

/// One thing the writer hands its transport.
#[derive(Debug)]
pub(super) enum Outgoing<'a> {
    /// A queued frame (WebSocket links).
    Frame(Wire),
    /// Queued lines (NDJSON links), each ending in `\n`.
    Lines(&'a Segments),
    /// A liveness probe: a WebSocket ping.
    Ping,
    /// A heartbeat request (holon-rpc).
    Heartbeat(String),
}

/// Where a link's writer writes: the transport's half that sends.
pub(super) trait FrameSink: Send {
    /// Writes one thing (buffered: see [`Self::flush`]).
    fn write(&mut self, out: Outgoing<'_>) -> impl Future<Output = Result<(), ()>> + Send;
    /// Flushes what was written.
    fn flush(&mut self) -> impl Future<Output = Result<(), ()>> + Send;
    /// Says goodbye (WebSocket: a last frame, then the close frame) and
    /// closes the connection; errors change nothing (we are closing).
    fn close(self, farewell: Option<Farewell>) -> impl Future<Output = ()> + Send;
}

/// What the writer takes from: the link's queue, in the transport's form.
pub(super) enum Source {
    /// WebSocket links: one frame per message.
    Frames(tokio::sync::mpsc::Receiver<Wire>),
    /// NDJSON links: lines in segments.
    Lines(Arc<super::outlet::LineQueue>),
}

/// Starts the reader and writer of a new link.
pub(super) fn spawn<S, K>(
    link: &Arc<Link>,
    incoming: S,
    sink: K,
    source: Source,
    shutdown: CancellationToken,
) where
    S: Stream<Item = Incoming> + Send + Unpin + 'static,
    K: FrameSink + 'static,
{
    let writer = write(link.clone(), sink, source);
    match link.codec().framing() {
        // Tracked, so that shutdown waits for every WebSocket goodbye.
        Framing::Text | Framing::Binary => drop(link.shared.writers.spawn(writer)),
        // An NDJSON link says no goodbye.
        Framing::Line => drop(tokio::spawn(writer)),
    }
    tokio::spawn(read(link.clone(), incoming, shutdown));
}

/// Reads until the upstream ends, the link is closed or switchyard stops,
/// then fails every call still in flight. Events of persistent topics
/// that found the store's queue full are handed off before the next read
/// (and after the last one): a store that falls behind stops the reading,
/// it never loses them.
async fn read<S>(link: Arc<Link>, mut incoming: S, shutdown: CancellationToken)
where
    S: Stream<Item = Incoming> + Unpin,
{
    let framing = link.codec().framing();
    let closed = link.closed().clone();
    let (closed, shutdown) = (closed.cancelled(), shutdown.cancelled());
    tokio::pin!(closed, shutdown);
    loop {
        let next = tokio::select! {
            biased;
            next = incoming.next() => next,
            () = &mut closed => break,
            () = &mut shutdown => break,
        };
        let Some(next) = next else {
            tracing::debug!(upstream = %link.shared.cfg.name, "upstream closed the connection");
            break;
        };
        if framing != Framing::Line {
            // Only WebSocket links watch for silence (pings).
            link.heard();
        }
        let more = match next {
            Incoming::Text(text) => match framing {
                Framing::Line | Framing::Text => link.on_text(&text),
                Framing::Binary => {
                    link.shared.count_protocol_error(ProtocolError::TextFrame);
                    false
                }
            },
            Incoming::Binary(bytes) => match framing {
                Framing::Binary => link.on_binary(&bytes),
                Framing::Line | Framing::Text => {
                    link.shared.count_protocol_error(ProtocolError::BinaryFrame);
                    link.read_failed(&LinkError::BinaryFrame);
                    false
                }
            },
            Incoming::NotUtf8 => {
                tracing::debug!(upstream = %link.shared.cfg.name, "line from upstream is not UTF-8; dropped");
                link.shared
                    .count_protocol_error(ProtocolError::InvalidMessage);
                true
            }
            Incoming::Control => true,
            Incoming::Close(code, reason) => {
                if link.codec().refuses(code, &reason) {
                    link.codec().mark_refused();
                }
                link.shared.count_close(code);
                link.read_failed(&LinkError::Closed { code });
                false
            }
            Incoming::Failed(e) => {
                link.read_failed(&e);
                false
            }
        };
        if !more {
            break;
        }
        if !link.backlog().is_empty() {
            tokio::select! {
                biased;
                () = link.shared.hand_off(link.backlog()) => {}
                () = &mut closed => break,
                () = &mut shutdown => break,
            }
        }
    }
    link.fail_all(&LinkError::Lost);
    // What the link read is still stored (this waits for the store, or
    // for it to stop, not for the link).
    link.shared.hand_off(link.backlog()).await;
}

/// What woke the writer.
enum Step {
    /// Something to write, or the queue's senders are gone (`None`).
    Next(Option<Option<Wire>>),
    /// Time to look at liveness.
    Tick,
    /// The link closed.
    Closed,
}

/// Liveness of a WebSocket link: its probe interval and timeout.
struct Alive {
    liveness: Liveness,
    interval: Duration,
    timeout: Duration,
    next_beat: Instant,
    beats: u64,
}

/// Writes what is queued, every message queued so far before a flush;
/// probes liveness on WebSocket links; says goodbye when the link closes.
async fn write<K: FrameSink>(link: Arc<Link>, mut sink: K, mut source: Source) {
    let mut alive = match link.codec().framing() {
        Framing::Line => None,
        Framing::Text | Framing::Binary => Some(Alive::new(&link)),
    };
    let mut tick = alive.as_ref().map(|a| {
        tokio::time::interval((a.interval.min(a.timeout) / 4).max(Duration::from_millis(10)))
    });
    let mut batch = Segments::new();
    // Made once: it stays registered with the token between wake-ups.
    let closed = link.closed().cancelled();
    tokio::pin!(closed);
    let farewell = loop {
        let ticked = async {
            match &mut tick {
                Some(tick) => {
                    tick.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        // The close first, so that a busy queue never hides it; then what
        // is queued; the tick last.
        let step = tokio::select! {
            biased;
            () = &mut closed => Step::Closed,
            more = next(&mut source, &mut batch) => Step::Next(more),
            () = ticked => Step::Tick,
        };
        match step {
            Step::Closed => break Some(link.farewell()),
            Step::Next(None) => break None,
            Step::Next(Some(frame)) => {
                let written = match frame {
                    Some(frame) => sink.write(Outgoing::Frame(frame)).await,
                    None => sink.write(Outgoing::Lines(&batch)).await,
                };
                if written.is_err() {
                    break None;
                }
                if let Source::Lines(queue) = &source {
                    while let Some(segment) = batch.pop_front() {
                        queue.recycle(segment);
                    }
                }
                if source.is_empty() && sink.flush().await.is_err() {
                    break None;
                }
            }
            Step::Tick => {
                link.outlet().tidy();
                let Some(alive) = &mut alive else { continue };
                if let Some(bye) = alive.overdue(&link) {
                    break Some(bye);
                }
                if let Some(probe) = alive.probe(&link) {
                    if sink.write(probe).await.is_err() || sink.flush().await.is_err() {
                        break None;
                    }
                }
            }
        }
    };
    if let Source::Lines(queue) = &source {
        // Nothing queued from now on would be written: refused instead.
        queue.close();
    }
    let why = match &farewell {
        Some(bye) => {
            if !bye.code.is_orderly() {
                tracing::warn!(upstream = %link.shared.cfg.name, code = bye.code.as_u16(), reason = %bye.reason, "closing upstream link");
            }
            LinkError::Farewell {
                reason: bye.reason.clone(),
            }
        }
        None => LinkError::WriteFailed,
    };
    // An NDJSON link says no goodbye: its write half is shut down.
    let farewell = alive.is_some().then_some(farewell).flatten();
    sink.close(farewell).await;
    link.fail_all(&why);
}

/// The next frame to write (`Some(Some)`), or lines moved into `batch`
/// (`Some(None)`); `None` once the queue's senders are gone.
async fn next(source: &mut Source, batch: &mut Segments) -> Option<Option<Wire>> {
    match source {
        Source::Frames(rx) => rx.recv().await.map(Some),
        Source::Lines(queue) => {
            queue.take(batch).await;
            Some(None)
        }
    }
}

// === impl Source ===

impl Source {
    /// True when nothing more waits (time to flush).
    fn is_empty(&self) -> bool {
        match self {
            Source::Frames(rx) => rx.is_empty(),
            // Lines are written by one vectored write each: no buffer.
            Source::Lines(_) => true,
        }
    }
}

// === impl Alive ===

impl Alive {
    fn new(link: &Link) -> Self {
        let cfg = &link.shared.cfg;
        let liveness = link.codec().liveness();
        let (interval, timeout) = match liveness {
            Liveness::Heartbeat => (cfg.heartbeat_interval, cfg.heartbeat_timeout),
            Liveness::Ping => (cfg.ping_interval, cfg.pong_timeout),
        };
        Alive {
            liveness,
            interval,
            timeout,
            next_beat: Instant::now() + interval,
            beats: 0,
        }
    }

    /// The goodbye of a link whose upstream stopped answering, if it did.
    fn overdue(&self, link: &Link) -> Option<Farewell> {
        match self.liveness {
            Liveness::Heartbeat => link
                .codec()
                .heartbeat_overdue(self.timeout)
                .then(|| Farewell::plain(CloseCode::HeartbeatTimeout, "heartbeat timeout")),
            Liveness::Ping => (link.silent_for() > self.interval + self.timeout)
                .then(|| Farewell::plain(CloseCode::GoingAway, "pong timeout")),
        }
    }

    /// The probe to send now, if one is due.
    fn probe(&mut self, link: &Link) -> Option<Outgoing<'static>> {
        if Instant::now() < self.next_beat {
            return None;
        }
        self.next_beat = Instant::now() + self.interval;
        match self.liveness {
            Liveness::Heartbeat => {
                self.beats += 1;
                link.codec().heartbeat(self.beats).map(Outgoing::Heartbeat)
            }
            Liveness::Ping => Some(Outgoing::Ping),
        }
    }
}
