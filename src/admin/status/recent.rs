//! The status page's operator figures: latency and rates over the last
//! minute (from `admin/window.rs`), since when an upstream is down with its
//! last connect error, the configuration generation and the last rejected
//! reload.

use std::time::{Duration, SystemTime};

use super::{esc, uptime};
use crate::admin::reload::Snapshot;
use crate::admin::window::{Series, WINDOW};
use crate::admin::AdminState;
use crate::upstream::HealthSnapshot;

/// The "Last minute" section: one row per listener and upstream.
pub(super) fn last_minute(state: &AdminState, out: &mut String) {
    let gw = &*state.gateway();
    let (span, figures) = state.window().figures(&gw.metrics);
    let secs = span.as_secs().min(WINDOW.as_secs());
    out.push_str(&format!(
        "<section id=\"recent\"><h2>Last minute <span class=\"sub\">over the last {secs} s; \
         listeners: as clients see it, upstreams: the upstream's own time</span></h2>\
         <table><tr><th>Kind</th><th>Name</th><th class=\"num\">Requests/s</th>\
         <th class=\"num\">p50</th><th class=\"num\">p99</th><th class=\"num\">Requests</th></tr>",
    ));
    let names = gw
        .cfg
        .listeners
        .iter()
        .map(|l| Series::Listener(l.name.clone()))
        .chain(
            gw.cfg
                .upstreams
                .iter()
                .map(|u| Series::Upstream(u.name.clone())),
        );
    for series in names {
        let (kind, name) = match &series {
            Series::Listener(n) => ("listener", n),
            Series::Upstream(n) => ("upstream", n),
        };
        let f = figures.get(&series);
        let rate = f.map_or(0.0, |f| f.rate);
        let calls = f.map_or(0, |f| f.calls);
        out.push_str(&format!(
            "<tr data-series=\"{kind}-{}\"><td>{kind}</td><td><b>{}</b></td>\
             <td class=\"num\">{rate:.2}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{calls}</td></tr>",
            esc(name),
            esc(name),
            latency(f.and_then(|f| f.p50)),
            latency(f.and_then(|f| f.p99)),
        ));
    }
    out.push_str("</table></section>");
}

/// `0.42 ms`, `12.3 ms`, `1.20 s`; `–` without calls.
fn latency(secs: Option<f64>) -> String {
    match secs {
        None => "–".to_owned(),
        Some(s) if s < 0.01 => format!("{:.2} ms", s * 1000.0),
        Some(s) if s < 1.0 => format!("{:.1} ms", s * 1000.0),
        Some(s) => format!("{s:.2} s"),
    }
}

/// A row under a shared upstream's row: since when it is down and its last
/// connect error; empty when it is up and never failed to connect.
pub(super) fn health_row(name: &str, health: &HealthSnapshot, now: SystemTime) -> String {
    let mut cell = String::new();
    if let Some(since) = health.down_since {
        let down_for = now.duration_since(since).unwrap_or(Duration::ZERO);
        cell.push_str(&format!(
            "<span class=\"down\">down since {} ({})</span>",
            utc(since),
            uptime(down_for)
        ));
    }
    if let Some((at, error)) = &health.last_error {
        if !cell.is_empty() {
            cell.push_str(" · ");
        }
        cell.push_str(&format!(
            "<span class=\"err\">last connect error {}: {}</span>",
            utc(*at),
            esc(error)
        ));
    }
    if cell.is_empty() {
        return cell;
    }
    format!(
        "<tr class=\"health\" data-upstream-health=\"{}\"><td></td><td colspan=\"8\">{cell}</td></tr>",
        esc(name)
    )
}

/// The configuration line of the page header: the generation serving and
/// when it was loaded (at start, or by the last reload).
pub(super) fn generation(record: &Snapshot) -> String {
    format!(
        "config generation {}, loaded {}",
        record.generation,
        utc(record.loaded)
    )
}

/// The last rejected reload, when and its first problem (the log and the
/// reload's answer list them all).
pub(super) fn last_failure(record: &Snapshot) -> Option<String> {
    let (at, problem) = record.last_failure.as_ref()?;
    Some(format!(
        "<section id=\"reload\"><h2>Last rejected reload</h2><p class=\"err\">{}: {}</p></section>",
        utc(*at),
        esc(problem)
    ))
}

/// `2026-11-25T13:40:02Z` (RFC 3339, UTC).
pub(super) fn utc(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_613_063);
        assert_eq!(utc(t), "2026-11-25T13:24:23Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(utc(leap), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn latencies_read_well() {
        assert_eq!(latency(None), "–");
        assert_eq!(latency(Some(0.00042)), "0.42 ms");
        assert_eq!(latency(Some(0.0123)), "12.3 ms");
        assert_eq!(latency(Some(1.2)), "1.20 s");
    }
}
