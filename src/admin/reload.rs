//! `POST /reload` and the record of reloads the status page shows.
//!
//! The endpoint is off unless `[admin] reload_token` is set; the request
//! must then carry it as `Authorization: Bearer <token>` (compared in
//! constant time). It asks the gateway to reload (the same path as SIGHUP)
//! and answers JSON: `200 {"result":"ok","generation":N}`, or
//! `422 {"result":"rejected","problems":[…]}` listing every problem, the
//! running configuration untouched.

use std::time::SystemTime;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use super::AdminState;
use crate::limits::origin::{bearer, same_token};

/// What a reload came to: the generation now serving, or every problem
/// that rejected it.
pub type Outcome = Result<u64, Vec<String>>;

/// Where reload requests go (the gateway applies them one at a time);
/// each carries where to send its outcome.
pub type Requests = mpsc::Sender<oneshot::Sender<Outcome>>;

/// Reload requests waiting for the one being applied; more are refused
/// (`503`) rather than queued.
pub const QUEUE: usize = 4;

/// Generation, time of the last reload and the last failure.
#[derive(Debug)]
pub struct Record(Mutex<Snapshot>);

/// A copy of the [`Record`].
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The configuration generation serving now (1 at start).
    pub generation: u64,
    /// When that generation was loaded.
    pub loaded: SystemTime,
    /// When the last rejected reload happened, and its first problem.
    pub last_failure: Option<(SystemTime, String)>,
}

// === impl Record ===

impl Record {
    /// Generation 1, loaded now.
    pub fn new() -> Self {
        Record(Mutex::new(Snapshot {
            generation: 1,
            loaded: SystemTime::now(),
            last_failure: None,
        }))
    }

    /// A reload applied: `generation` serves from now.
    pub fn applied(&self, generation: u64) {
        let mut s = self.0.lock();
        s.generation = generation;
        s.loaded = SystemTime::now();
    }

    /// A reload was rejected; `first` is its first problem.
    pub fn rejected(&self, first: &str) {
        self.0.lock().last_failure = Some((SystemTime::now(), first.to_owned()));
    }

    /// The record now.
    pub fn snapshot(&self) -> Snapshot {
        self.0.lock().clone()
    }
}

impl Default for Record {
    fn default() -> Self {
        Self::new()
    }
}

/// `POST /reload`.
pub(super) async fn reload(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    let gw = state.gateway();
    let Some(expected) = gw.cfg.admin.reload_token.as_deref() else {
        let why = "reload over HTTP is off: [admin] reload_token is not set";
        return answer(StatusCode::FORBIDDEN, serde_json::json!({ "error": why }));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer(v.as_bytes()));
    match given {
        None => {
            let body = serde_json::json!({ "error": "a bearer token is required" });
            let mut refused = answer(StatusCode::UNAUTHORIZED, body);
            refused.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return refused;
        }
        Some(token) if !same_token(token, expected) => {
            let body = serde_json::json!({ "error": "wrong token" });
            return answer(StatusCode::FORBIDDEN, body);
        }
        Some(_) => {}
    }
    let Some(requests) = gw.reloads.clone() else {
        let body = serde_json::json!({ "error": "this gateway cannot reload" });
        return answer(StatusCode::SERVICE_UNAVAILABLE, body);
    };
    drop(gw);
    let (tx, rx) = oneshot::channel();
    if let Err(e) = requests.try_send(tx) {
        let why = match e {
            mpsc::error::TrySendError::Full(_) => "too many reloads waiting; try again",
            mpsc::error::TrySendError::Closed(_) => "the gateway is shutting down",
        };
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({ "error": why }),
        );
    }
    match rx.await {
        Ok(Ok(generation)) => answer(
            StatusCode::OK,
            serde_json::json!({ "result": "ok", "generation": generation }),
        ),
        Ok(Err(problems)) => answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!({ "result": "rejected", "problems": problems }),
        ),
        Err(_) => {
            let body = serde_json::json!({ "error": "the gateway is shutting down" });
            answer(StatusCode::SERVICE_UNAVAILABLE, body)
        }
    }
}

/// A JSON answer.
fn answer(status: StatusCode, body: serde_json::Value) -> Response {
    (status, axum::Json(body)).into_response()
}
