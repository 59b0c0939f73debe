//! hld-style `Subscribe`: the connection becomes an event stream.
//!
//! After the confirmation line the daemon emits a synthetic `new_approval`
//! event every `interval_ms` and a heartbeat after `heartbeat_ms` without an
//! event (`ndjson-unix.md` §6). Three params hld does not have serve
//! benchmarks and tests: `pad_bytes` sizes the events, `catch_up` keeps
//! their rate exact, and `burst` sends a first run of events as fast as
//! the client reads them, none dropped. Whatever the client writes afterwards is read and discarded; EOF
//! or a half-close ends the stream. Events (but a burst's) and heartbeats
//! are dropped, not queued, when the client stops reading, as in hld.

use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::time::{self, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// `Subscribe` params; hld's filters (`event_types`, `session_id`, `run_id`)
/// and other members are accepted and ignored.
#[derive(Debug, Deserialize)]
#[serde(default)]
struct Params {
    /// Milliseconds between events.
    interval_ms: u64,
    /// Events to send before only heartbeats follow; unlimited if absent.
    count: Option<u64>,
    /// Milliseconds without an event before a heartbeat.
    heartbeat_ms: u64,
    /// Length of a `"pad":"xxx…"` string added to each event's `data`, so
    /// benchmarks can size events; 0 (the default) adds no `pad` member.
    pad_bytes: usize,
    /// Make up missed ticks at once (tokio's `Burst`), so that the long-run
    /// rate is exactly one event per `interval_ms` even when the timer fires
    /// late; by default (false) a late tick delays the following ones, as
    /// hld's ticker does. Benchmarks use it for a steady 1,000 events/s.
    catch_up: bool,
    /// Events sent at once, back to back, before the ticks start (counted
    /// in `count`): each waits for room in the outbox instead of being
    /// dropped, so the stream is exactly as fast as its reader reads and
    /// none is lost. Tests use it for a feed faster than a store.
    burst: u64,
}

/// The largest `pad_bytes` accepted (1 MiB), so one call cannot make the
/// daemon build arbitrarily large lines.
const MAX_PAD_BYTES: usize = 1024 * 1024;

const HEARTBEAT: &[u8] =
    b"{\"jsonrpc\":\"2.0\",\"result\":{\"message\":\"Connection alive\",\"type\":\"heartbeat\"},\"id\":null}\n";

/// Runs a subscription on a connection until the client goes, the outbox
/// closes or the daemon stops. `params` are the raw request params.
pub(super) async fn run<R: AsyncRead + Unpin>(
    rd: R,
    tx: mpsc::Sender<Vec<u8>>,
    params: Option<&RawValue>,
    cancel: &CancellationToken,
) {
    let params = match parse(params) {
        Ok(params) => params,
        Err(message) => {
            let line = format!(
                "{{\"jsonrpc\":\"2.0\",\"error\":{{\"code\":-32602,\"message\":{}}},\"id\":null}}\n",
                serde_json::Value::from(format!("invalid request: {message}"))
            );
            // The connection closes right after, delivered or not.
            let _ = tx.send(line.into_bytes()).await;
            return;
        }
    };
    let confirmation = format!(
        "{{\"jsonrpc\":\"2.0\",\"result\":{{\"subscription_id\":\"{}\",\"message\":\"Subscription established. Waiting for events...\"}},\"id\":null}}\n",
        subscription_id()
    );
    if tx.send(confirmation.into_bytes()).await.is_err() {
        return;
    }
    tokio::select! {
        biased;
        () = cancel.cancelled() => {}
        () = discard(rd) => {}
        () = emit(&tx, &params) => {}
    }
}

/// Absent or `null` params mean the defaults; anything but an object fails.
fn parse(raw: Option<&RawValue>) -> Result<Params, String> {
    let params = match raw {
        None => Params::default(),
        Some(raw) if raw.get() == "null" => Params::default(),
        // serde would also take a sequence of the fields in order; Go would not.
        Some(raw) if !raw.get().starts_with('{') => {
            let kind = match raw.get().as_bytes().first() {
                Some(b'[') => "array",
                Some(b'"') => "string",
                Some(b't' | b'f') => "bool",
                _ => "number",
            };
            return Err(format!(
                "json: cannot unmarshal {kind} into Go value of type rpc.SubscribeRequest"
            ));
        }
        Some(raw) => serde_json::from_str(raw.get()).map_err(|e| e.to_string())?,
    };
    if params.interval_ms == 0 || params.heartbeat_ms == 0 {
        return Err("interval_ms and heartbeat_ms must be at least 1".to_owned());
    }
    if params.pad_bytes > MAX_PAD_BYTES {
        return Err(format!("pad_bytes must be at most {MAX_PAD_BYTES}"));
    }
    Ok(params)
}

/// Reads and drops client bytes until EOF (including a half-close) or error.
async fn discard<R: AsyncRead + Unpin>(mut rd: R) {
    let mut scratch = [0u8; 4096];
    while let Ok(n) = rd.read(&mut scratch).await {
        if n == 0 {
            return;
        }
    }
}

/// Emits events and heartbeats; returns only when the outbox is closed.
async fn emit(tx: &mpsc::Sender<Vec<u8>>, params: &Params) {
    let pad = "x".repeat(params.pad_bytes);
    let mut seq: u64 = 0;
    let burst = params.count.map_or(params.burst, |c| c.min(params.burst));
    while seq < burst {
        seq += 1;
        if tx.send(event_line(seq, &pad)).await.is_err() {
            return;
        }
    }
    let interval = Duration::from_millis(params.interval_ms);
    let heartbeat = Duration::from_millis(params.heartbeat_ms);
    let mut ticks = time::interval_at(Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(if params.catch_up {
        MissedTickBehavior::Burst
    } else {
        MissedTickBehavior::Delay
    });
    let idle = time::sleep(heartbeat);
    tokio::pin!(idle);
    loop {
        let events_left = params.count.is_none_or(|count| seq < count);
        let line = tokio::select! {
            _ = ticks.tick(), if events_left => {
                seq += 1;
                event_line(seq, &pad)
            }
            () = &mut idle => HEARTBEAT.to_vec(),
        };
        // The heartbeat timer restarts after every line, events included.
        idle.as_mut().reset(Instant::now() + heartbeat);
        if let Err(TrySendError::Closed(_)) = tx.try_send(line) {
            return;
        }
    }
}

/// One event; `pad` (only `x`s, no escaping needed) is added to its `data`
/// when not empty.
fn event_line(seq: u64, pad: &str) -> Vec<u8> {
    let pad = if pad.is_empty() {
        String::new()
    } else {
        format!(",\"pad\":\"{pad}\"")
    };
    format!(
        "{{\"jsonrpc\":\"2.0\",\"result\":{{\"event\":{{\"type\":\"new_approval\",\"timestamp\":\"{}\",\"data\":{{\"seq\":{seq}{pad}}}}}}},\"id\":null}}\n",
        rfc3339(SystemTime::now())
    )
    .into_bytes()
}

/// `YYYYMMDDhhmmss-<16 hex>`, the shape of hld's subscription ids.
fn subscription_id() -> String {
    let compact: String = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    format!("{compact}-{:016x}", rand::random::<u64>())
}

/// RFC 3339 in UTC with nanoseconds: `2025-07-15T12:00:00.123456789Z`.
fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_nanos(at).to_string()
}

// === impl Params ===

impl Default for Params {
    fn default() -> Self {
        Params {
            interval_ms: 100,
            count: None,
            heartbeat_ms: 30_000,
            pad_bytes: 0,
            catch_up: false,
            burst: 0,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn civil_dates() {
        let at = UNIX_EPOCH + Duration::new(1_752_580_800, 123_456_789);
        assert_eq!(rfc3339(at), "2025-07-15T12:00:00.123456789Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000000000Z"
        );
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
    }

    #[test]
    fn params() {
        assert!(parse(None).is_ok());
        let raw = serde_json::from_str::<&RawValue>("[1]").unwrap();
        assert!(parse(Some(raw)).is_err());
        let raw = serde_json::from_str::<&RawValue>("{\"interval_ms\":0}").unwrap();
        assert!(parse(Some(raw)).is_err());
        let raw =
            serde_json::from_str::<&RawValue>("{\"interval_ms\":5,\"count\":2,\"event_types\":[]}")
                .unwrap();
        assert_eq!(
            parse(Some(raw))
                .map(|p| (p.interval_ms, p.count, p.pad_bytes))
                .ok(),
            Some((5, Some(2), 0))
        );
        let raw = serde_json::from_str::<&RawValue>("{\"pad_bytes\":3,\"catch_up\":true}").unwrap();
        assert_eq!(
            parse(Some(raw)).map(|p| (p.pad_bytes, p.catch_up)).ok(),
            Some((3, true))
        );
        assert_eq!(parse(None).map(|p| p.catch_up).ok(), Some(false));
        let raw = serde_json::from_str::<&RawValue>("{\"burst\":50000,\"count\":7}").unwrap();
        assert_eq!(
            parse(Some(raw)).map(|p| (p.burst, p.count)).ok(),
            Some((50_000, Some(7)))
        );
        let raw = serde_json::from_str::<&RawValue>("{\"pad_bytes\":1048577}").unwrap();
        assert!(parse(Some(raw)).is_err());
    }

    #[test]
    fn events_are_padded_only_when_asked() {
        let plain = String::from_utf8(event_line(7, "")).unwrap();
        assert!(
            plain.ends_with("\"data\":{\"seq\":7}}},\"id\":null}\n"),
            "{plain}"
        );
        let padded = String::from_utf8(event_line(7, "xxx")).unwrap();
        assert!(
            padded.ends_with("\"data\":{\"seq\":7,\"pad\":\"xxx\"}}},\"id\":null}\n"),
            "{padded}"
        );
        let value: serde_json::Value = serde_json::from_str(&padded).unwrap();
        assert_eq!(value["result"]["event"]["data"]["pad"], "xxx");
    }
}
