//! The status page's operator figures: latency and rates over the last
//! minute (from `admin/window.rs`), since when an upstream is down with its
//! last connect error, and the configuration generation.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{esc, uptime};
use crate::admin::window::{Series, WINDOW};
use crate::admin::AdminState;
use crate::upstream::HealthSnapshot;

/// Configuration generation shown on the page. The configuration is read
/// once at start (there is no reload yet), so it is always 1, loaded when
/// the gateway started.
pub(super) const CONFIG_GENERATION: u64 = 1;

/// The "Last minute" section: one row per listener and upstream.
pub(super) fn last_minute(state: &AdminState, out: &mut String) {
    let gw = state.gateway();
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

/// The configuration line of the page header.
pub(super) fn generation(started: SystemTime) -> String {
    format!(
        "config generation {CONFIG_GENERATION}, loaded {}",
        utc(started)
    )
}

/// `2026-11-25 13:40:02 UTC`.
pub(super) fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let (y, m, d) = civil_from_days(days);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_613_063);
        assert_eq!(utc(t), "2026-11-25 13:24:23 UTC");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(utc(leap), "2000-02-29 00:00:00 UTC");
    }

    #[test]
    fn latencies_read_well() {
        assert_eq!(latency(None), "–");
        assert_eq!(latency(Some(0.00042)), "0.42 ms");
        assert_eq!(latency(Some(0.0123)), "12.3 ms");
        assert_eq!(latency(Some(1.2)), "1.20 s");
    }
}
