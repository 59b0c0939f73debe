//! A request's outcome: its duration and result counted, and the client's
//! reply built from the upstream's answer (upstream errors translated to the
//! client's dialect, switchyard's own rendered in it), with the client's id.

use std::sync::Arc;
use std::time::Instant;

use super::Router;
use crate::dialect::errors;
use crate::envelope::{Message, Outcome, Payload, WireId};
use crate::error::{ErrorKind, GatewayError};
use crate::telemetry::metrics::RequestOutcome;
use crate::upstream::Upstream;

// === impl Router ===

impl Router {
    /// The reply to a method switchyard serves itself (the pub/sub and
    /// persistent families), counted under `label`; `None` from the
    /// method table is an unknown `rpc.*` method.
    pub(super) fn own_reply(
        &self,
        id: &WireId,
        label: &'static str,
        outcome: Option<Result<Payload, GatewayError>>,
    ) -> Message {
        match outcome {
            Some(Ok(result)) => {
                self.count_request(label, RequestOutcome::Ok);
                Message::Response {
                    id: id.clone(),
                    result: Outcome::Value(result),
                }
            }
            Some(Err(e)) => {
                self.count_request(label, RequestOutcome::Error(e.kind));
                self.error_reply(id.clone(), &e)
            }
            None => self.error_reply(id.clone(), &GatewayError::new(ErrorKind::MethodNotFound)),
        }
    }

    /// Records a request's duration and outcome and returns the client's
    /// reply, with the client's id.
    pub(crate) fn finish(
        &self,
        id: WireId,
        upstream: &Upstream,
        started: Instant,
        result: Result<Message, GatewayError>,
    ) -> Message {
        let series = self
            .series
            .iter()
            .find(|(u, _)| std::ptr::eq(Arc::as_ptr(u), upstream))
            .map(|(_, s)| s);
        let elapsed = started.elapsed();
        match series {
            Some(s) => s.duration.observe_duration(elapsed),
            None => {
                let labels = [self.cfg.name.as_str(), upstream.name()];
                self.metrics
                    .request_duration
                    .with_label_values(&labels)
                    .observe_duration(elapsed);
            }
        }
        match (series, result) {
            (Some(s), Ok(Message::Response { result, .. })) => {
                s.ok.inc();
                Message::Response { id, result }
            }
            (_, result) => self.reply_for(id, upstream, result),
        }
    }

    /// The client's reply for an upstream outcome, with the client's id.
    pub(super) fn reply_for(
        &self,
        id: WireId,
        up: &Upstream,
        result: Result<Message, GatewayError>,
    ) -> Message {
        let upstream = up.name();
        match result {
            Ok(Message::Response { result, .. }) => {
                self.count_request(upstream, RequestOutcome::Ok);
                Message::Response { id, result }
            }
            Ok(Message::Error { error, .. }) => {
                self.count_request(upstream, RequestOutcome::UpstreamError);
                let error = errors::translate(&error, up.config().dialect, self.cfg.dialect);
                Message::Error {
                    id: Some(id),
                    error,
                }
            }
            Ok(_) => {
                self.count_request(upstream, RequestOutcome::Error(ErrorKind::Internal));
                self.error_reply(id, &GatewayError::new(ErrorKind::Internal))
            }
            Err(mut err) => {
                self.count_request(upstream, RequestOutcome::Error(err.kind));
                self.log_failure(upstream, &err);
                if err.kind == ErrorKind::Timeout {
                    let ms = self.cfg.request_timeout.as_millis();
                    err.detail = Some(format!("no reply from upstream within {ms} ms"));
                }
                self.error_reply(id, &err)
            }
        }
    }
}
