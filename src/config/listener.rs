//! Validation of one `[listeners.<name>]` table: address or socket,
//! limits, TLS files and protection keys.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::problems::{check_name, dialect, socket_path, Problems};
use super::raw::RawListener;
use super::{ListenAddr, ListenerConfig, RouteTable, TlsFiles};
use crate::dialect::Dialect;

pub(super) fn listener(
    name: &str,
    raw: &RawListener,
    routes: RouteTable,
    p: &mut Problems,
) -> Option<ListenerConfig> {
    let key = format!("listeners.{name}");
    check_name(&key, name, p);
    let dialect = dialect(&key, raw.dialect.as_deref(), p);
    let addr = dialect.and_then(|d| match d.on_tcp() {
        true => ws_listen(&key, d, raw, p),
        false => unix_listen(&key, raw, p),
    });
    let tls = dialect.and_then(|d| tls_files(&key, d, raw, p));
    if raw.echo && dialect.is_some_and(|d| d != Dialect::JsonRpc) {
        p.at(&key, "echo", "is only for jsonrpc (WebSocket) listeners");
    }
    p.nonzero(&key, "max_message_bytes", raw.max_message_bytes);
    p.nonzero(&key, "max_batch_items", raw.max_batch_items);
    p.nonzero(&key, "max_in_flight", raw.max_in_flight);
    p.nonzero(&key, "outbox_capacity", raw.outbox_capacity);
    outbox_max_bytes(&key, raw, p);
    let ping_interval = p.millis(&key, "ping_interval_ms", raw.ping_interval_ms);
    let pong_timeout = p.millis(&key, "pong_timeout_ms", raw.pong_timeout_ms);
    let request_timeout = p.millis(&key, "request_timeout_ms", raw.request_timeout_ms);
    Some(ListenerConfig {
        name: name.to_owned(),
        dialect: dialect?,
        addr: addr?,
        max_message_bytes: raw.max_message_bytes,
        max_batch_items: raw.max_batch_items,
        max_in_flight: raw.max_in_flight,
        outbox_capacity: raw.outbox_capacity,
        outbox_max_bytes: raw.outbox_max_bytes,
        ping_interval,
        pong_timeout,
        request_timeout,
        answer_ping_notification: raw.answer_ping_notification,
        max_unanswered_pushes: p
            .nonzero(&key, "max_unanswered_pushes", raw.max_unanswered_pushes)
            .map_or(1, |n| n.get()),
        sideband_cbor: raw.sideband_cbor,
        sideband_legacy_subjects: raw.sideband_legacy_subjects,
        sideband_reject_app: match raw.sideband_app_subjects.as_str() {
            "reject" => true,
            "drop" => false,
            other => {
                p.at(
                    &key,
                    "sideband_app_subjects",
                    format!("must be \"drop\" or \"reject\" (got {other:?})"),
                );
                false
            }
        },
        echo: raw.echo,
        protection: super::protection::protection(&key, raw, p),
        routes,
        tls,
    })
}

/// `outbox_max_bytes`: above zero, and at least `max_message_bytes`, so
/// that a reply as large as the largest request (an echo) fits beside
/// others rather than only alone in an empty queue.
fn outbox_max_bytes(key: &str, raw: &RawListener, p: &mut Problems) {
    if p.nonzero(key, "outbox_max_bytes", raw.outbox_max_bytes)
        .is_some()
        && raw.outbox_max_bytes < raw.max_message_bytes
    {
        p.at(
            key,
            "outbox_max_bytes",
            format!(
                "must be at least max_message_bytes ({}) (got {})",
                raw.max_message_bytes, raw.outbox_max_bytes
            ),
        );
    }
}

fn ws_listen(key: &str, d: Dialect, raw: &RawListener, p: &mut Problems) -> Option<ListenAddr> {
    p.not_allowed(key, "socket", raw.socket.is_some(), d);
    p.not_allowed(key, "socket_mode", raw.socket_mode.is_some(), d);
    let path = raw.path.clone().unwrap_or_else(|| "/".to_owned());
    if !path.starts_with('/') {
        p.at(key, "path", format!("must start with \"/\" (got {path:?})"));
    }
    match raw.address.as_deref().map(|a| (a, a.parse::<SocketAddr>())) {
        None => p.at(key, "address", format!("required for dialect {d}")),
        Some((_, Ok(addr))) => {
            super::protection::check_exposed(key, addr, raw, p);
            return Some(ListenAddr::Ws { addr, path });
        }
        Some((text, Err(e))) => p.at(key, "address", format!("invalid IP:port {text:?}: {e}")),
    }
    None
}

/// `tls_cert` and `tls_key`: both or neither, WebSocket dialects only. The
/// files are read when the listener is bound.
fn tls_files(key: &str, d: Dialect, raw: &RawListener, p: &mut Problems) -> Option<TlsFiles> {
    if !d.on_tcp() {
        p.not_allowed(key, "tls_cert", raw.tls_cert.is_some(), d);
        p.not_allowed(key, "tls_key", raw.tls_key.is_some(), d);
        return None;
    }
    match (raw.tls_cert.as_deref(), raw.tls_key.as_deref()) {
        (None, None) => None,
        (Some(cert), Some(key_path)) => {
            for (field, v) in [("tls_cert", cert), ("tls_key", key_path)] {
                if v.is_empty() {
                    p.at(key, field, "must not be empty");
                }
            }
            Some(TlsFiles {
                cert: PathBuf::from(cert),
                key: PathBuf::from(key_path),
            })
        }
        (Some(_), None) => {
            p.at(key, "tls_key", "required when tls_cert is set");
            None
        }
        (None, Some(_)) => {
            p.at(key, "tls_cert", "required when tls_key is set");
            None
        }
    }
}

fn unix_listen(key: &str, raw: &RawListener, p: &mut Problems) -> Option<ListenAddr> {
    p.not_allowed(key, "address", raw.address.is_some(), Dialect::Ndjson);
    p.not_allowed(key, "path", raw.path.is_some(), Dialect::Ndjson);
    let mode_text = raw.socket_mode.as_deref().unwrap_or("0600");
    let digits = mode_text.strip_prefix("0o").unwrap_or(mode_text);
    let mode = match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 => Some(mode),
        _ => {
            let msg = format!("expected an octal mode such as \"0600\" (got {mode_text:?})");
            p.at(key, "socket_mode", msg);
            None
        }
    };
    let path = socket_path(key, raw.socket.as_deref(), p);
    Some(ListenAddr::Unix {
        path: path?,
        mode: mode?,
    })
}
