//! `GET /`: the status page, one self-contained HTML document.
//!
//! No script, no external assets (its stylesheet is `/status.css` on the
//! same listener, so the CSP needs no inline styles), no build step: it
//! renders the same from a browser on the host, through `kubectl
//! port-forward`, or in headless Chromium. It shows readiness, the
//! listeners, the upstreams, the persistent-subscription store (when
//! configured) and whether it can serve, and the error and drop counters that are not
//! zero (totals since start; Prometheus has the rates). Every value comes
//! from the config, the upstream pools or the metrics registry, and is
//! HTML-escaped.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::response::Html;
use prometheus::proto::{MetricFamily, MetricType};

use super::{health, AdminState, Gateway};

mod recent;
use crate::config::{ListenAddr, ListenerConfig, UpstreamConfig, UpstreamMode, UpstreamTarget};

/// Counter families listed under "Errors and drops", with a caption each.
const PROBLEM_FAMILIES: [(&str, &str); 6] = [
    ("switchyard_protocol_errors_total", "malformed input"),
    ("switchyard_dropped_messages_total", "messages dropped"),
    (
        "switchyard_unmatched_responses_total",
        "replies for no pending id",
    ),
    ("switchyard_limit_rejections_total", "refused by a limit"),
    (
        "switchyard_connections_rejected_total",
        "connections refused",
    ),
    ("switchyard_ws_closes_total", "WebSocket closes"),
];

/// The page's stylesheet, served at `/status.css`.
const CSS: &str = include_str!("status/style.css");

/// `GET /status.css`: the page's stylesheet.
pub(super) async fn stylesheet() -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "text/css; charset=utf-8")],
        CSS,
    )
}

/// `GET /`: renders the page for the current state.
pub(super) async fn page(State(state): State<AdminState>) -> Html<String> {
    Html(render(&state))
}

/// The whole document.
fn render(state: &AdminState) -> String {
    let gw = &*state.gateway();
    let now = SystemTime::now();
    let problems = health::check(gw);
    let (class, label) = match (gw.health.is_draining(), problems.is_empty()) {
        (true, _) => ("warn", "draining"),
        (false, true) => ("ok", "ready"),
        (false, false) => ("bad", "not ready"),
    };
    let mut out = String::with_capacity(8 * 1024);
    out.push_str(&format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"10\">\
         <link rel=\"icon\" href=\"data:,\">\
         <title>switchyard status</title><link rel=\"stylesheet\" href=\"/status.css\"></head><body>\
         <header><h1>switchyard</h1><span class=\"badge {class}\" id=\"state\">{label}</span>\
         <span class=\"meta\">version {} · up {} · <span id=\"generation\">{}</span></span>\
         </header><main>",
        env!("CARGO_PKG_VERSION"),
        uptime(gw.started.elapsed()),
        recent::generation(&gw.record.snapshot()),
    ));
    if let Some(failure) = recent::last_failure(&gw.record.snapshot()) {
        out.push_str(&failure);
    }
    if !problems.is_empty() {
        out.push_str("<section><h2>Readiness</h2><ul class=\"reasons\">");
        for p in &problems {
            out.push_str(&format!("<li>{}</li>", esc(p)));
        }
        out.push_str("</ul></section>");
    }
    listeners(gw, &mut out);
    clients(gw, &mut out);
    upstreams(gw, now, &mut out);
    store(gw, &mut out);
    recent::last_minute(state, &mut out);
    requests(gw, &mut out);
    counters(gw, &mut out);
    out.push_str("</main><footer>Endpoints: ");
    if state.playground {
        out.push_str("<a href=\"/playground\" id=\"playground\">playground</a> · ");
    }
    out.push_str(
        "<a href=\"/metrics\">/metrics</a> · \
         <a href=\"/livez\">/livez</a> · <a href=\"/readyz\">/readyz</a>. \
         Counters are totals since start; this page refreshes every 10 s.</footer>\
         </body></html>\n",
    );
    out
}

/// The listeners table.
fn listeners(gw: &Gateway, out: &mut String) {
    out.push_str(
        "<section id=\"listeners\"><h2>Listeners</h2><table><tr><th>Name</th><th>Dialect</th>\
         <th>Address</th><th>State</th><th class=\"num\">Open</th>\
         <th class=\"num\">Accepted</th></tr>",
    );
    for l in &gw.cfg.listeners {
        let name = l.name.as_str();
        let open = gw.metrics.connections_open.with_label_values(&[name]).get();
        let accepted = gw.metrics.connections_accepted.with_label_values(&[name]);
        let state = badge(gw.health.is_serving(name), "serving", "stopped");
        out.push_str(&format!(
            "<tr><td><b>{}</b></td><td>{}</td><td><code>{}</code></td><td>{state}</td>\
             <td class=\"num\">{open}</td><td class=\"num\">{}</td></tr>",
            esc(name),
            l.dialect,
            esc(&listen_addr(gw, l)),
            accepted.get(),
        ));
    }
    out.push_str("</table></section>");
}

/// The named clients of every listener and their open connections (never
/// their tokens); nothing when no listener has clients.
fn clients(gw: &Gateway, out: &mut String) {
    let rows: Vec<(&str, &crate::config::clients::Client)> = gw
        .cfg
        .listeners
        .iter()
        .flat_map(|l| {
            l.protection
                .clients
                .iter()
                .map(move |c| (l.name.as_str(), c))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str(
        "<section id=\"clients\"><h2>Clients</h2><table><tr><th>Listener</th><th>Client</th>\
         <th class=\"num\">Open</th><th class=\"num\">Cap</th></tr>",
    );
    for (listener, c) in rows {
        let open = gw
            .metrics
            .client_connections_open
            .with_label_values(&[listener, &c.name])
            .get();
        let cap = match c.max_connections {
            0 => "—".to_owned(),
            n => n.to_string(),
        };
        out.push_str(&format!(
            "<tr><td>{}</td><td><b>{}</b></td><td class=\"num\">{open}</td><td class=\"num\">{cap}</td></tr>",
            esc(listener),
            esc(&c.name),
        ));
    }
    out.push_str("</table></section>");
}

/// The upstreams table.
fn upstreams(gw: &Gateway, now: SystemTime, out: &mut String) {
    out.push_str(
        "<section id=\"upstreams\"><h2>Upstreams</h2><table><tr><th>Name</th><th>Dialect</th>\
         <th>Mode</th><th>Target</th><th>Required</th><th>State</th>\
         <th class=\"num\">Connected</th><th class=\"num\">In flight</th>\
         <th class=\"num\">Reconnects</th></tr>",
    );
    for u in &gw.cfg.upstreams {
        let name = u.name.as_str();
        let connected = gw.upstreams.get(name).map_or(0, |up| up.connected());
        let (pool, state, health) = match (u.mode, gw.upstreams.get(name)) {
            (UpstreamMode::Shared, up) => (
                format!("{connected} / {}", u.pool_size),
                badge(connected > 0, "up", "down"),
                up.map_or_else(String::new, |up| {
                    recent::health_row(name, &up.health(), now)
                }),
            ),
            (UpstreamMode::PerClient, _) => ("per client".to_owned(), String::new(), String::new()),
        };
        let m = &gw.metrics;
        let in_flight = m.upstream_in_flight.with_label_values(&[name]).get();
        let reconnects = m.upstream_reconnects.with_label_values(&[name]).get();
        out.push_str(&format!(
            "<tr><td><b>{}</b></td><td>{}</td><td>{}</td><td><code>{}</code></td>\
             <td>{}</td><td>{state}</td><td class=\"num\">{pool}</td>\
             <td class=\"num\">{in_flight}</td><td class=\"num\">{reconnects}</td></tr>{health}",
            esc(name),
            u.dialect,
            esc(&mode(u)),
            esc(&target(u)),
            if u.required { "yes" } else { "no" },
        ));
    }
    out.push_str("</table></section>");
}

/// The persistent-subscription store: its backend and whether it can
/// serve (why not, if not: a failing disk, NATS unreachable).
fn store(gw: &Gateway, out: &mut String) {
    let Some(store) = gw.store.as_ref() else {
        return;
    };
    if gw.cfg.persistence.topics.is_empty() && store.ready().is_ok() {
        // No persistent topics: nothing to show unless it fails.
        return;
    }
    let (state, detail) = match store.ready() {
        Ok(()) => (badge(true, "serving", ""), String::new()),
        Err(why) => (badge(false, "", "failing"), why),
    };
    out.push_str(&format!(
        "<section id=\"store\"><h2>Persistent store</h2><table><tr><th>Backend</th>\
         <th>State</th><th>Detail</th></tr><tr><td>{}</td><td>{state}</td><td>{}</td></tr>\
         </table></section>",
        store.kind().as_str(),
        esc(&detail),
    ));
}

/// Requests settled per route: total, ok, the upstream's own errors, and
/// the errors switchyard answered.
fn requests(gw: &Gateway, out: &mut String) {
    out.push_str(
        "<section id=\"requests\"><h2>Requests</h2><table><tr><th>Listener</th>\
         <th>Upstream</th><th class=\"num\">Total</th><th class=\"num\">OK</th>\
         <th class=\"num\">Upstream errors</th><th class=\"num\">Gateway errors</th></tr>",
    );
    let families = gw.metrics.registry().gather();
    let mut routes: BTreeMap<(String, String), [u64; 3]> = BTreeMap::new();
    let family = families
        .iter()
        .find(|f| f.name() == "switchyard_requests_total");
    for (labels, count) in family.map(nonzero).unwrap_or_default() {
        let label = |name: &str| {
            let prefix = format!("{name}=");
            let found = labels.split(' ').find_map(|l| l.strip_prefix(&prefix));
            found.unwrap_or_default().to_owned()
        };
        let column = match label("outcome").as_str() {
            "ok" => 0,
            "upstream_error" => 1,
            _ => 2,
        };
        routes
            .entry((label("listener"), label("upstream")))
            .or_default()[column] += count;
    }
    for ((listener, upstream), [ok, upstream_errors, errors]) in &routes {
        out.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{ok}</td>\
             <td class=\"num\">{upstream_errors}</td><td class=\"num\">{errors}</td></tr>",
            esc(listener),
            esc(upstream),
            ok + upstream_errors + errors,
        ));
    }
    out.push_str("</table>");
    if routes.is_empty() {
        out.push_str("<p class=\"empty\">No requests yet.</p>");
    }
    out.push_str("</section>");
}

/// Non-zero error, drop and rejection counters, one row per label set.
fn counters(gw: &Gateway, out: &mut String) {
    out.push_str(
        "<section id=\"errors\"><h2>Errors and drops</h2><table><tr><th>Metric</th>\
         <th>What</th><th>Labels</th><th class=\"num\">Total</th></tr>",
    );
    let families = gw.metrics.registry().gather();
    let mut rows = 0;
    for (name, caption) in PROBLEM_FAMILIES {
        let Some(family) = families.iter().find(|f| f.name() == name) else {
            continue;
        };
        for (labels, value) in nonzero(family) {
            rows += 1;
            out.push_str(&format!(
                "<tr><td><code>{}</code></td><td>{caption}</td><td>{}</td>\
                 <td class=\"num\">{value}</td></tr>",
                esc(name),
                esc(&labels),
            ));
        }
    }
    out.push_str("</table>");
    if rows == 0 {
        out.push_str("<p class=\"empty\">No protocol errors, drops or rejections since start.</p>");
    }
    out.push_str("</section>");
}

/// `(label=value …, count)` of a counter family's non-zero members.
fn nonzero(family: &MetricFamily) -> Vec<(String, u64)> {
    if family.get_field_type() != MetricType::COUNTER {
        return Vec::new();
    }
    family
        .get_metric()
        .iter()
        .filter_map(|m| {
            let value = m.get_counter().get_value();
            let labels: Vec<String> = m
                .get_label()
                .iter()
                .map(|l| format!("{}={}", l.name(), l.value()))
                .collect();
            // Counters are integers below 2^53 for any realistic uptime.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let count = value as u64;
            (count > 0).then(|| (labels.join(" "), count))
        })
        .collect()
}

/// Where a listener accepts: the bound address for WebSocket listeners,
/// `wss://` when it serves TLS.
fn listen_addr(gw: &Gateway, l: &ListenerConfig) -> String {
    match &l.addr {
        ListenAddr::Ws { addr, path } => {
            let bound = gw.addrs.get(&l.name).copied().unwrap_or(*addr);
            let scheme = if l.tls.is_some() { "wss" } else { "ws" };
            format!("{scheme}://{bound}{path}")
        }
        ListenAddr::Unix { path, .. } => format!("unix://{}", path.display()),
    }
}

fn target(u: &UpstreamConfig) -> String {
    match &u.target {
        UpstreamTarget::Unix(path) => format!("unix://{}", path.display()),
        // Credentials in the URL are never shown.
        UpstreamTarget::Ws(url) => crate::redact::url(url).into_owned(),
        UpstreamTarget::Http(h) => crate::redact::url(&h.url).into_owned(),
        // The program only: arguments and environment may carry secrets.
        UpstreamTarget::Process(spec) => {
            format!("command:{}", spec.argv.first().map_or("", String::as_str))
        }
    }
}

/// `shared` / `per-client`, plus the per-stream methods if any.
fn mode(u: &UpstreamConfig) -> String {
    let mode = match u.mode {
        UpstreamMode::Shared => "shared",
        UpstreamMode::PerClient => "per-client",
    };
    if u.streaming_methods.is_empty() {
        mode.to_owned()
    } else {
        format!("{mode}; per-stream: {}", u.streaming_methods.join(", "))
    }
}

fn badge(good: bool, yes: &str, no: &str) -> String {
    let (class, text) = if good { ("ok", yes) } else { ("bad", no) };
    format!("<span class=\"badge {class}\">{text}</span>")
}

/// `3d 4h`, `2h 05m`, `4m 09s`, `12s`.
fn uptime(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60) {
        (0, 0, 0, sec) => format!("{sec}s"),
        (0, 0, min, sec) => format!("{min}m {sec:02}s"),
        (0, h, min, _) => format!("{h}h {min:02}m"),
        (days, h, _, _) => format!("{days}d {h}h"),
    }
}

/// HTML-escapes text for element content and double-quoted attributes.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
