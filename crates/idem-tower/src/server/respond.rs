//! The answer to a write, marked: the stored or replayed response with `idempotent-replayed` and
//! `idempotent-expires-at`, the streamed response of a run too large to store, the inner
//! service's own failure, or a refusal; each with the [`Deduplicated`] extension.

use std::time::SystemTime;

use http::Response;
use http_body_util::Either;
use idem_core::Scope;
use idem_dedup::{DedupError, Outcome, OutcomeKind, Source};

use crate::body::{ResponseBody, StreamedBody};
use crate::server::large::Large;
use crate::server::refused;
use crate::stored::FailedResponse;
use crate::{reject, Deduplicated, Protocol, StoredResponse};

/// The answer to a write: the streamed response of a run too large to store, the stored or
/// replayed response with the layer's marks, the inner service's own failure, or a refusal.
pub(super) fn respond<ResB>(
    protocol: Protocol,
    scope: Scope,
    result: Result<Outcome<StoredResponse>, DedupError>,
    streamed: Option<Large<ResB>>,
) -> Response<ResponseBody<ResB>> {
    let mut response = match (&result, streamed) {
        (Ok(outcome), Some(large)) if outcome.kind() == OutcomeKind::Executed => {
            Response::from_parts(
                large.parts,
                Either::Right(StreamedBody::new(large.read, large.rest)),
            )
        }
        (Err(DedupError::Action { .. }), Some(large)) => Response::from_parts(
            large.parts,
            Either::Right(StreamedBody::new(large.read, large.rest)),
        ),
        (Ok(outcome), _) => outcome
            .value()
            .to_marked_response(
                outcome.kind() != OutcomeKind::Executed,
                // Another instance's result: when it leaves the shared record is not known
                // here, and the local copy's expiry could be later, so the header is left out.
                (!matches!(outcome.source(), Source::OtherInstance | Source::FailOpen))
                    .then(|| wall_clock(outcome.expires_at())),
            )
            .map(Either::Left),
        (Err(DedupError::Action { status, outcome }), None) => {
            match std::error::Error::source(status).and_then(|s| s.downcast_ref::<FailedResponse>())
            {
                Some(failed) => failed
                    .0
                    .to_marked_response(*outcome != OutcomeKind::Executed, None),
                None => reject::render(protocol, status, None),
            }
            .map(Either::Left)
        }
        (Err(e), _) => {
            let status = e.to_status();
            let response = reject::render(protocol, &status, None);
            refused::count(&status, &response);
            response.map(Either::Left)
        }
    };
    response
        .extensions_mut()
        .insert(Deduplicated::new(scope, &result));
    response.map(Either::Right)
}

/// A tokio instant as wall-clock time.
fn wall_clock(at: tokio::time::Instant) -> SystemTime {
    let now = tokio::time::Instant::now();
    SystemTime::now() + at.saturating_duration_since(now)
}
