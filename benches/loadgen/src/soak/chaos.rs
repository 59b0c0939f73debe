//! The hostile parts of the soak: garbage and oversize messages, and the
//! daemon killed and restarted on a fixed period; plus naming the errors
//! the gateway answers with.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use switchyard::dialect::sideband::{decode, decode_envelope, Body, Encoding};
use switchyard::envelope::Message;
use tokio::time::{sleep, sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::super::conn::Received;
use super::super::procs::ChildGuard;
use super::super::target::launch;
use super::super::target::StartOpts;
use super::super::wire::{Out, Wire};

/// A garbage client sends garbage instead of every this-many-th request.
pub(crate) const GARBAGE_EVERY: u64 = 10;
/// Size of an oversize message: above switchyard's default
/// `max_message_bytes` (1 MiB).
const OVERSIZE: usize = (1 << 20) + 64 * 1024;
/// Longest time the daemon stays down before it is restarted.
const MAX_DOWN_MS: u64 = 1000;

/// Garbage number `n` for `wire`: what it is, and the message. Ids in
/// garbage are strings starting with `g`, which no client uses, so an error
/// reply to garbage never settles a real request.
pub(crate) fn garbage(wire: Wire, n: u64) -> (&'static str, Out) {
    let text = |s: &str| Out::Text(s.to_owned());
    match wire {
        Wire::Sideband(_) => match n % 4 {
            0 => (
                "injected: random bytes (binary)",
                Out::Binary(random_bytes(64)),
            ),
            1 => ("injected: text frame on Sideband", text("not a frame")),
            2 => (
                "injected: truncated frame",
                Out::Binary(vec![0x01, 0x00, 0x10]),
            ),
            _ => (
                "injected: oversize binary frame",
                Out::Binary(vec![0xa5; OVERSIZE]),
            ),
        },
        Wire::JsonRpc | Wire::Holon | Wire::Http(_) => match n % 4 {
            0 => (
                "injected: truncated JSON",
                text(r#"{"jsonrpc":"2.0","method":"echo","params":"#),
            ),
            1 => ("injected: not JSON", text("this is not json")),
            2 => (
                "injected: invalid request",
                text(r#"{"jsonrpc":"2.0","id":"g-1","method":42}"#),
            ),
            _ => ("injected: oversize message", Out::Text(oversize_request())),
        },
    }
}

/// A well-formed request, too big for the default limits.
fn oversize_request() -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":"g-2","method":"echo","params":{{"pad":"{}"}}}}"#,
        "x".repeat(OVERSIZE)
    )
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut rng = rand::rng();
    (0..n).map(|_| rng.random()).collect()
}

/// The kind of an error reply: its code, as `error reply -32000`.
pub(crate) fn error_kind(wire: Wire, msg: &Received) -> String {
    error_code(wire, msg).map_or_else(
        || String::from("error reply"),
        |c| format!("error reply {c}"),
    )
}

/// The code of an error reply (or Sideband error frame), if `msg` is one.
pub(crate) fn error_code(wire: Wire, msg: &Received) -> Option<i64> {
    match (wire, msg) {
        (Wire::Sideband(_), Received::Binary(bytes)) => sideband_code(bytes),
        _ => msg.text().and_then(json_code),
    }
}

fn json_code(text: &str) -> Option<i64> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("error")?.get("code")?.as_i64()
}

fn sideband_code(bytes: &[u8]) -> Option<i64> {
    match decode(bytes).ok()?.body {
        Body::Error { code, .. } => Some(i64::from(code)),
        Body::Message { data, .. } => {
            match decode_envelope(&data, Encoding::detect(&data)).ok()? {
                Message::Error { error, .. } => Some(error.code),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Kills the daemon every `every` and restarts it on the same socket after
/// up to a second down, until `stop`. Returns the running daemon, or why a
/// restart failed.
pub(crate) async fn restart_daemon(
    mut daemon: ChildGuard,
    opts: &StartOpts,
    dir: &std::path::Path,
    every: Duration,
    restarts: &AtomicU64,
    stop: &CancellationToken,
) -> anyhow::Result<ChildGuard> {
    let mut next = Instant::now() + every;
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(daemon),
            () = sleep_until(next) => {}
        }
        daemon.check_alive()?;
        // Dropping the guard kills the process (SIGKILL) and reaps it.
        drop(daemon);
        let down = rand::rng().random_range(0..=MAX_DOWN_MS);
        sleep(Duration::from_millis(down)).await;
        daemon = launch::ndjson_daemon(opts, dir).await?.0;
        restarts.fetch_add(1, Ordering::Relaxed);
        next = Instant::now() + every;
    }
}
