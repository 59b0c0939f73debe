//! The admin listener: metrics, probes and a status page, on its own
//! address (`[admin] address`), never on a client port.
//!
//! | Endpoint | Answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text format, from the gateway's explicit registry |
//! | `GET /livez` (alias `/live`) | `200` while the process runs |
//! | `GET /readyz` (alias `/ready`) | `200` when ready, `503` with the reasons otherwise (rules in `admin/health.rs`) |
//! | `GET /` | the HTML status page (no script, no external assets) and its stylesheet `GET /status.css` |
//! | `POST /reload` | reloads the configuration (needs `[admin] reload_token` as a bearer token; see `admin/reload.rs`) |
//!
//! The demo adds its playground routes ([`crate::app::Bound::add_admin_routes`]).
//! Every answer goes through the layers of `admin/http.rs`: request tracing,
//! a time limit, gzip when the client accepts it, and security headers
//! (a CSP without inline scripts or styles, `nosniff`, `no-referrer`).
//!
//! Everything here only *reads* the gateway, except `POST /reload`, which
//! asks the gateway to reload and waits for the outcome. The admin listener
//! is bound in `app::bind`, served next to the client listeners by `app`,
//! keeps answering while the gateway drains (so orchestrators see `/readyz`
//! turn `503`), and stops last. A reload gives it a new `Gateway` view
//! (`View::store`). Nothing user-controlled reaches a handler besides the
//! path and, for `/reload`, the `Authorization` header.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::telemetry::metrics::Metrics;
use crate::upstream::Upstream;

pub(crate) mod health;
mod http;
pub mod reload;
mod status;
mod window;

pub(crate) use health::Health;

/// Content type of the Prometheus text exposition format.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the admin endpoints read; cheap to clone (one `Arc`).
#[derive(Debug, Clone)]
pub(crate) struct AdminState {
    inner: View,
    /// Last-minute latency and rates for the status page.
    window: Arc<window::Window>,
    /// Whether the demo's playground is served here too: the status page
    /// links to it.
    playground: bool,
}

/// A read-only view of the running gateway.
#[derive(Debug)]
pub(crate) struct Gateway {
    /// The configuration it runs with (listener and upstream names, modes).
    pub(crate) cfg: Config,
    /// The registry `/metrics` renders and the page reads counters from.
    pub(crate) metrics: Metrics,
    /// Started upstreams, by name: live connection counts for readiness.
    pub(crate) upstreams: BTreeMap<String, Arc<Upstream>>,
    /// Bound addresses of the WebSocket listeners (the configured port may
    /// be 0), by name.
    pub(crate) addrs: BTreeMap<String, SocketAddr>,
    /// Draining flag and which listeners are serving.
    pub(crate) health: Arc<Health>,
    /// When the gateway started serving, for the page's uptime.
    pub(crate) started: Instant,
    /// Generation, last reload and last failure.
    pub(crate) record: Arc<reload::Record>,
    /// Where `POST /reload` sends its request (`None`: cannot reload).
    pub(crate) reloads: Option<reload::Requests>,
    /// The persistent-subscription store, for readiness.
    pub(crate) store: Option<Arc<crate::persist::Backend>>,
}

/// The gateway as the admin listener sees it now; a reload stores a new
/// view (same metrics, health and record; new config, upstreams, addresses).
#[derive(Debug, Clone)]
pub(crate) struct View(Arc<parking_lot::RwLock<Arc<Gateway>>>);

// === impl View ===

impl View {
    /// A view of `gateway`.
    pub(crate) fn new(gateway: Gateway) -> Self {
        View(Arc::new(parking_lot::RwLock::new(Arc::new(gateway))))
    }

    /// The gateway now.
    pub(crate) fn load(&self) -> Arc<Gateway> {
        self.0.read().clone()
    }

    /// Shows `gateway` from now on.
    pub(crate) fn store(&self, gateway: Gateway) {
        *self.0.write() = Arc::new(gateway);
    }
}

// === impl AdminState ===

impl AdminState {
    /// Wraps a view of the gateway.
    pub(crate) fn new(view: View) -> Self {
        Self {
            inner: view,
            window: Arc::default(),
            playground: false,
        }
    }

    fn gateway(&self) -> Arc<Gateway> {
        self.inner.load()
    }

    fn window(&self) -> &window::Window {
        &self.window
    }

    /// Snapshots the latency histograms every [`window::SAMPLE_EVERY`]
    /// until `stop`.
    async fn sample(self, stop: CancellationToken) {
        let mut every = tokio::time::interval(window::SAMPLE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = every.tick() => self.window.sample(&self.gateway().metrics),
            }
        }
    }
}

/// The admin routes over `state`, plus `extra` routes (the demo's
/// playground), inside the admin layers.
pub(crate) fn router(mut state: AdminState, extra: Option<Router>) -> Router {
    state.playground = extra.is_some();
    let routes = Router::new()
        .route("/", get(status::page))
        .route("/status.css", get(status::stylesheet))
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/live", get(livez))
        .route("/readyz", get(readyz))
        .route("/ready", get(readyz))
        .route("/reload", post(reload::reload))
        .with_state(state.clone());
    let routes = match extra {
        Some(extra) => routes.merge(extra),
        None => routes,
    };
    http::layers(routes, state.inner.clone())
}

/// Serves the admin routes on `listener` until `stop` is cancelled, then
/// finishes the requests in progress (the caller bounds how long).
pub(crate) async fn serve(
    listener: TcpListener,
    state: AdminState,
    extra: Option<Router>,
    stop: CancellationToken,
) {
    tokio::spawn(state.clone().sample(stop.clone()));
    let served = axum::serve(listener, router(state, extra))
        .with_graceful_shutdown(stop.cancelled_owned())
        .await;
    if let Err(e) = served {
        tracing::error!(error = %e, "admin listener failed");
    }
}

/// `GET /metrics`: every family of the registry, in the text format.
async fn metrics(State(state): State<AdminState>) -> Response {
    let gw = state.gateway();
    // Refresh the readiness gauge so a scrape sees the current state.
    health::check(&gw);
    let families = gw.metrics.registry().gather();
    match prometheus::TextEncoder::new().encode_to_string(&families) {
        Ok(text) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            let body = "cannot encode metrics\n";
            (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
        }
    }
}

/// `GET /livez`: the process is up and its runtime answers.
async fn livez() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: `200 ready` or `503` listing every reason.
async fn readyz(State(state): State<AdminState>) -> Response {
    let problems = health::check(&state.gateway());
    if problems.is_empty() {
        return (StatusCode::OK, "ready\n").into_response();
    }
    let mut body = String::from("not ready:\n");
    for p in &problems {
        body.push_str("- ");
        body.push_str(p);
        body.push('\n');
    }
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}
