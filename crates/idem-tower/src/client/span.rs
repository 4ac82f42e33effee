//! The span of one call through the client layer, and how its end is recorded on it.

use http::{Request, Response};
use idem_core::Code;

use crate::body::ReplayBody;
use crate::client::{CallFailed, CallReport};
use crate::{BoxError, Protocol};

/// The span of one call through the client layer (see [`RetryService`]).
pub(super) fn client_span<B>(req: &Request<B>) -> tracing::Span {
    tracing::debug_span!(
        target: "idem_tower",
        "idem_tower.client",
        protocol = match Protocol::of(req.headers()) {
            Protocol::Grpc => "grpc",
            Protocol::Http => "http",
        },
        method = %req.method(),
        path = req.uri().path(),
        attempts = tracing::field::Empty,
        outcome = tracing::field::Empty,
        code = tracing::field::Empty,
    )
}

/// Records how a call through the client layer ended on its span.
pub(super) fn record_end(span: &tracing::Span, result: &Result<Response<ReplayBody>, BoxError>) {
    match result {
        Ok(response) => {
            if let Some(report) = response.extensions().get::<CallReport>() {
                span.record("attempts", report.attempts);
            }
            span.record("outcome", "ok");
            span.record("code", Code::Ok.as_str());
        }
        Err(e) => match e.downcast_ref::<CallFailed>() {
            Some(failed) => {
                span.record("attempts", failed.attempts());
                span.record("outcome", failed.reason().as_str());
                span.record("code", failed.code().as_str());
            }
            None => {
                span.record("outcome", "error");
            }
        },
    }
}
