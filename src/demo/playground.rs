//! The playground: a static page (HTML, CSS, ES modules embedded in the
//! binary, no inline script, nothing fetched from elsewhere) served by the
//! demo's admin listener, plus the two JSON endpoints it reads.
//!
//! | Route | Answer |
//! |---|---|
//! | `GET /playground` | the page |
//! | `GET /playground/{app.js,counters.js,http.js,link.js,sideband.js,style.css}` | its assets |
//! | `GET /demo/endpoints` | the demo's [`Endpoints`] |
//! | `GET /demo/upstream?after=N` | the daemon's tapped lines with `seq > N` (at most [`TAP_LINES`](crate::daemon::tap::TAP_LINES)) |
//!
//! The browser speaks to the WebSocket listeners with its own `WebSocket`,
//! and to the `jsonrpc-http` listener with its own `fetch` and
//! `EventSource`, with its real Origin, which the demo's allow-list admits.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use super::Endpoints;
use crate::daemon::tap::Tap;

const INDEX: &str = include_str!("playground/index.html");
const APP_JS: &str = include_str!("playground/app.js");
const COUNTERS_JS: &str = include_str!("playground/counters.js");
const HTTP_JS: &str = include_str!("playground/http.js");
const LINK_JS: &str = include_str!("playground/link.js");
const SIDEBAND_JS: &str = include_str!("playground/sideband.js");
const STYLE: &str = include_str!("playground/style.css");

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// What the JSON endpoints read.
#[derive(Debug, Clone)]
struct Demo {
    endpoints: Arc<Endpoints>,
    tap: Arc<Tap>,
}

/// `?after=N` of `/demo/upstream`.
#[derive(Debug, Deserialize)]
struct After {
    #[serde(default)]
    after: u64,
}

/// The playground's routes, to add to the admin listener.
pub(super) fn router(endpoints: Endpoints, tap: Arc<Tap>) -> Router {
    let asset = |ctype: &'static str, body: &'static str| {
        get(move || async move { ([(header::CONTENT_TYPE, ctype)], body) })
    };
    Router::new()
        .route("/playground", asset(HTML, INDEX))
        .route("/playground/", asset(HTML, INDEX))
        .route("/playground/app.js", asset(JS, APP_JS))
        .route("/playground/counters.js", asset(JS, COUNTERS_JS))
        .route("/playground/http.js", asset(JS, HTTP_JS))
        .route("/playground/link.js", asset(JS, LINK_JS))
        .route("/playground/sideband.js", asset(JS, SIDEBAND_JS))
        .route("/playground/style.css", asset(CSS, STYLE))
        .route("/demo/endpoints", get(endpoints_json))
        .route("/demo/upstream", get(upstream_json))
        .with_state(Demo {
            endpoints: Arc::new(endpoints),
            tap,
        })
}

async fn endpoints_json(State(demo): State<Demo>) -> impl IntoResponse {
    Json(demo.endpoints.as_ref().clone())
}

async fn upstream_json(State(demo): State<Demo>, Query(q): Query<After>) -> impl IntoResponse {
    Json(serde_json::json!({ "lines": demo.tap.since(q.after) }))
}
