//! The persist scenario: the reference daemon's feed at 1,000
//! events/s of about 256 B into ONE persistent topic, with
//! [`SUBSCRIBERS`] persistent subscribers on switchyard's JSON-RPC
//! WebSocket listener, each acknowledging every message; once per store
//! backend (`memory`, `embedded`, `nats` on a `nats-server` of its own).
//!
//! Measured in the window: events the daemon published per second (from
//! its `seq`), events stored per second (from the `sequence_id`s
//! delivered), deliveries per second over all subscribers, and the
//! publish → delivery latency (receipt time minus the daemon's
//! `timestamp`, which includes the store write). Events the daemon
//! published that never got a `sequence_id` (the store fell behind and the
//! recorder's queue overflowed) are counted as `not stored`.
//!
//! Then the resume time: one more subscription was created at the start
//! and detached at once; when [`BACKLOG`] messages have been stored after
//! it, it is resumed and the time until it has received (and acknowledged)
//! all of them is taken.
//!
//! Acknowledgements are pipelined (sent as each delivery is read, replies
//! counted as they come): the window of unacknowledged messages per
//! subscription (1,024 by default) is what bounds a subscriber.
//!
//! The persistent-subscription calls themselves (open, acknowledge, probe,
//! resume) are in `calls`; the feed's configuration and event reading in
//! `feed`.

mod calls;

use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use tokio::time::{timeout_at, Instant};

use self::calls::{ack, open, resume, BACKLOG_ID};
use super::conn::{Endpoint, Rx, Tx};
use super::cpu::{self, CpuUse};
use super::drive::{self, new_histogram, Timing};
use super::feed::{self, number, TOPIC};
use super::wire::Out;

/// Persistent subscribers acknowledging every message.
pub(crate) const SUBSCRIBERS: usize = 10;
/// Messages stored behind the detached subscription before it resumes.
const BACKLOG: u64 = 10_000;
/// The backlog with `--smoke`: a correctness check, not a measure (a debug
/// build's embedded store stores a few dozen events/s under this load).
const SMOKE_BACKLOG: u64 = 20;
/// The shortest window with `--smoke`: the embedded store of a debug build
/// is slow to deliver its first events.
const SMOKE_WINDOW: Duration = Duration::from_secs(1);

/// The store behind the persistent topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) enum Backend {
    /// `backend = "memory"`.
    Memory,
    /// `backend = "embedded"`, in the run's temp dir.
    Embedded,
    /// `backend = "nats"`, on a `nats-server -js` the target starts in
    /// the run's temp dir.
    Nats,
}

/// What a persist run measured.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Persist {
    /// Subscribers whose `rpc.subscribe.persistent` was answered.
    pub(crate) subscribed: usize,
    /// The measured window, seconds.
    pub(crate) window_secs: f64,
    /// Events the daemon published per second in the window.
    pub(crate) published_per_s: f64,
    /// Events stored per second in the window (`sequence_id` range).
    pub(crate) stored_per_s: f64,
    /// Deliveries in the window, over every subscriber.
    pub(crate) delivered: u64,
    /// `delivered` per second.
    pub(crate) delivered_per_s: f64,
    /// Publish → delivery latency, µs: p50, p90, p99, p99.9, max.
    pub(crate) latency_us: [f64; 5],
    /// `{"acknowledged":true}` replies read.
    pub(crate) acked: u64,
    /// Daemon events that got no `sequence_id` (gaps in its `seq`).
    pub(crate) not_stored: u64,
    /// Stored messages a subscriber never received (gaps in its
    /// `sequence_id`s).
    pub(crate) lost: u64,
    /// Repeated or earlier `sequence_id`s, per subscriber.
    pub(crate) out_of_order: u64,
    /// Error replies, unreadable frames, failed connections.
    pub(crate) errors: u64,
    /// Messages the resumed subscription had to catch up on.
    pub(crate) backlog: u64,
    /// From its `rpc.subscribe.persistent` to the last backlog message, ms.
    pub(crate) resume_ms: f64,
}

/// One subscriber's observations.
struct Sub {
    hist: Histogram<u32>,
    last_seq: Option<u64>,
    last_daemon: Option<u64>,
    window: Option<((u64, u64), (u64, u64))>,
    in_window: u64,
    acked: u64,
    not_stored: u64,
    lost: u64,
    out_of_order: u64,
    errors: u64,
}

/// The feed and persistence tables of a persist target.
/// `nats_url` is the server the `nats` backend uses.
pub(crate) fn persistence_toml(
    backend: Backend,
    dir: &std::path::Path,
    nats_url: Option<&str>,
) -> String {
    let store = match backend {
        Backend::Memory => String::from("backend = \"memory\"\n"),
        Backend::Embedded => format!(
            "backend = \"embedded\"\npath = \"{}\"\n",
            dir.join("store").display()
        ),
        Backend::Nats => format!(
            "backend = \"nats\"\nnats_url = \"{}\"\n",
            nats_url.unwrap_or("nats://127.0.0.1:4222")
        ),
    };
    format!(
        "{}\n[persistence]\n{store}\n[[persistent_topics]]\ntopic = \"{TOPIC}\"\n",
        feed::feed_toml()
    )
}

/// Runs the subscribers at `endpoint` for `duration` after a warm-up,
/// then the resume of a backlog; reads the CPU of `pids` in the window.
pub(crate) async fn run(
    endpoint: &Endpoint,
    duration: Duration,
    smoke: bool,
    pids: [Option<u32>; 2],
) -> anyhow::Result<(Persist, CpuUse)> {
    let duration = if smoke {
        duration.max(SMOKE_WINDOW)
    } else {
        duration
    };
    let mut out = Persist::default();
    // Created now, so that everything stored from here on is its backlog.
    let (_, backlog_from) = open(endpoint, BACKLOG_ID).await?;
    let mut conns = Vec::with_capacity(SUBSCRIBERS);
    for i in 0..SUBSCRIBERS {
        let id = format!("bench-{i}");
        conns.push((open(endpoint, &id).await?.0, id));
        out.subscribed += 1;
    }
    let timing = cpu::timing(duration);
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|(conn, id)| tokio::spawn(subscriber(conn, id, timing)))
        .collect();
    let sampler = tokio::spawn(cpu::sample_cpu(pids, timing));
    tokio::time::sleep_until(timing.end).await;
    let cpu = sampler.await.unwrap_or_default();
    let mut hist = new_histogram();
    let (mut stored, mut published) = (None::<(u64, u64)>, None::<(u64, u64)>);
    for task in tasks {
        let Ok(sub) = task.await else {
            out.errors += 1;
            continue;
        };
        let _ = hist.add(&sub.hist);
        out.delivered += sub.in_window;
        out.acked += sub.acked;
        out.not_stored = out.not_stored.max(sub.not_stored);
        out.lost += sub.lost;
        out.out_of_order += sub.out_of_order;
        out.errors += sub.errors;
        if let Some((seqs, daemon)) = sub.window {
            stored = feed::widen(stored, seqs);
            published = feed::widen(published, daemon);
        }
    }
    let window = (timing.end - timing.start).as_secs_f64();
    out.window_secs = window;
    let rate = |r: Option<(u64, u64)>| r.map_or(0.0, |(lo, hi)| (hi - lo + 1) as f64 / window);
    out.stored_per_s = rate(stored);
    out.published_per_s = rate(published);
    out.delivered_per_s = out.delivered as f64 / window;
    out.latency_us = drive::latency_us(&hist);
    let want = if smoke { SMOKE_BACKLOG } else { BACKLOG };
    let (backlog, resume) = resume(endpoint, backlog_from, want).await?;
    out.backlog = backlog;
    out.resume_ms = resume.as_secs_f64() * 1000.0;
    Ok((out, cpu))
}

/// One subscriber: acknowledges every delivery, until the grace period
/// after the window ends.
async fn subscriber((mut tx, mut rx): (Tx, Rx), id: String, t: Timing) -> Sub {
    let mut sub = Sub {
        hist: new_histogram(),
        last_seq: None,
        last_daemon: None,
        window: None,
        in_window: 0,
        acked: 0,
        not_stored: 0,
        lost: 0,
        out_of_order: 0,
        errors: 0,
    };
    loop {
        let msg = match timeout_at(t.end, rx.recv()).await {
            Ok(Some(Ok(msg))) => msg,
            Err(_) => break,
            Ok(_) => {
                sub.errors += 1;
                break;
            }
        };
        let now = (Instant::now(), SystemTime::now());
        let text = msg.text().unwrap_or_default();
        if text.contains(r#""result":{"acknowledged":true}"#) {
            sub.acked += 1;
            continue;
        }
        let delivery = text
            .contains(r#""method":"rpc.notification.persistent""#)
            .then(|| number(text, r#""sequence_id":"#))
            .flatten();
        let Some(seq) = delivery else {
            sub.errors += 1;
            continue;
        };
        sub.record(seq, text, now, &t);
        let ack = ack(&id, seq);
        if tx.feed(Out::Text(ack)).await.is_err() || tx.flush().await.is_err() {
            sub.errors += 1;
            break;
        }
    }
    sub
}

// === impl Sub ===

impl Sub {
    fn record(&mut self, seq: u64, text: &str, (now, wall): (Instant, SystemTime), t: &Timing) {
        match self.last_seq {
            Some(last) if seq <= last => {
                self.out_of_order += 1;
                return;
            }
            Some(last) => self.lost += seq - last - 1,
            None => {}
        }
        self.last_seq = Some(seq);
        let daemon = number(text, r#""seq":"#);
        if let (Some(d), Some(last)) = (daemon, self.last_daemon) {
            self.not_stored += d.saturating_sub(last + 1);
        }
        self.last_daemon = daemon.or(self.last_daemon);
        if !(now >= t.start && now < t.end) {
            return;
        }
        self.in_window += 1;
        let d = daemon.unwrap_or(0);
        self.window = Some(match self.window {
            None => ((seq, seq), (d, d)),
            Some(((lo, hi), (dlo, dhi))) => ((lo.min(seq), hi.max(seq)), (dlo.min(d), dhi.max(d))),
        });
        if !feed::record_latency(&mut self.hist, text, wall) {
            self.errors += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_target_stores_under_its_dir() {
        let toml = persistence_toml(Backend::Embedded, std::path::Path::new("/tmp/x"), None);
        assert!(toml.contains("path = \"/tmp/x/store\""), "{toml}");
        assert!(toml.contains("[[persistent_topics]]"), "{toml}");
    }
}
