//! Validation of the gateway's own observability tables: `[log]`, `[admin]`
//! (the metrics, probe and reload listener, which never shares a client
//! port) and `[tracing]` (OTLP export).

use std::net::SocketAddr;

use super::problems::Problems;
use super::raw::{RawAdmin, RawLog, RawTracing};
use super::{
    AdminConfig, ListenAddr, ListenerConfig, LogConfig, LogFormat, OtlpProtocol, TracingConfig,
};

/// Accepted `log.format` values.
const FORMATS: [(&str, LogFormat); 2] = [("text", LogFormat::Text), ("json", LogFormat::Json)];

/// Accepted `tracing.protocol` values.
const PROTOCOLS: [(&str, OtlpProtocol); 1] = [("http/protobuf", OtlpProtocol::HttpProtobuf)];

pub(super) fn log_config(raw: &RawLog, p: &mut Problems) -> LogConfig {
    let format = p.choice("log", "format", &raw.format, &FORMATS);
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&raw.level) {
        let msg = format!("invalid filter directive {:?}: {e}", raw.level);
        p.at("log", "level", msg);
    }
    let level = raw.level.clone();
    LogConfig {
        format: format.unwrap_or(LogFormat::Text),
        level,
    }
}

/// `admin.address`: empty disables; otherwise an `IP:port` that is not a
/// client listener's (metrics and probes never share a client port).
pub(super) fn admin_config(
    raw: &RawAdmin,
    listeners: &[ListenerConfig],
    p: &mut Problems,
) -> AdminConfig {
    let reload_token = (!raw.reload_token.is_empty()).then(|| raw.reload_token.clone());
    let allowed_hosts = admin_hosts(&raw.allowed_hosts, p);
    if raw.address.is_empty() {
        return AdminConfig {
            addr: None,
            reload_token,
            allowed_hosts,
        };
    }
    let addr = match raw.address.parse::<SocketAddr>() {
        Ok(addr) => addr,
        Err(e) => {
            let msg = format!("invalid IP:port {:?}: {e}", raw.address);
            p.at("admin", "address", msg);
            return AdminConfig {
                addr: None,
                reload_token,
                allowed_hosts,
            };
        }
    };
    let overlaps = |l: &&ListenerConfig| match &l.addr {
        ListenAddr::Ws { addr: a, .. } => a.port() != 0 && same_socket(*a, addr),
        ListenAddr::Unix { .. } => false,
    };
    if let Some(l) = listeners.iter().find(overlaps) {
        let msg = format!(
            "same port as listeners.{}; the admin listener needs its own",
            l.name
        );
        p.at("admin", "address", msg);
    }
    AdminConfig {
        addr: Some(addr),
        reload_token,
        allowed_hosts,
    }
}

/// `admin.allowed_hosts`: bare host names (no scheme, port or path), kept
/// in lower case.
fn admin_hosts(raw: &[String], p: &mut Problems) -> Vec<String> {
    for name in raw {
        let bare = !name.is_empty() && !name.contains([':', '/', '@', ' ']);
        if !bare {
            let msg = format!("{name:?} is not a bare host name (no scheme, port or path)");
            p.at("admin", "allowed_hosts", msg);
        }
    }
    raw.iter().map(|h| h.to_ascii_lowercase()).collect()
}

/// Both addresses would bind the same port on a common interface.
fn same_socket(a: SocketAddr, b: SocketAddr) -> bool {
    let any = a.ip().is_unspecified() || b.ip().is_unspecified();
    a.port() == b.port() && (any || a.ip() == b.ip())
}

/// `[tracing]`: checked even when export is off, so turning it on later
/// cannot surface an old mistake.
pub(super) fn tracing_config(raw: &RawTracing, p: &mut Problems) -> TracingConfig {
    let protocol = p.choice("tracing", "protocol", &raw.protocol, &PROTOCOLS);
    let endpoint = crate::redact::url(&raw.endpoint);
    let problem = match raw.endpoint.parse::<axum::http::Uri>() {
        Ok(uri) if uri.scheme_str() == Some("http") && uri.host().is_some() => None,
        Ok(uri) if uri.scheme_str() == Some("https") => Some("https is not supported (this build has no TLS); use an http:// collector such as a local OpenTelemetry Collector".to_owned()),
        Ok(_) => Some(format!("expected an http:// URL with a host (got {endpoint:?})")),
        Err(e) => Some(format!("invalid URL {endpoint:?}: {e}")),
    };
    if let Some(msg) = problem {
        p.at("tracing", "endpoint", msg);
    }
    if !(0.0..=1.0).contains(&raw.sampling_ratio) {
        let msg = format!("must be between 0.0 and 1.0 (got {})", raw.sampling_ratio);
        p.at("tracing", "sampling_ratio", msg);
    }
    if raw.service_name.trim().is_empty() {
        p.at("tracing", "service_name", "must not be empty");
    }
    TracingConfig {
        enabled: raw.enabled,
        endpoint: raw.endpoint.clone(),
        protocol: protocol.unwrap_or(OtlpProtocol::HttpProtobuf),
        sampling_ratio: raw.sampling_ratio,
        record_ids: raw.record_ids,
        service_name: raw.service_name.clone(),
    }
}
