//! The engine's action: one call of the inner service, its response collected up to the
//! stored-bytes limit and kept if it may be stored.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use idem_core::{Code, Status};
use tower::{Service, ServiceExt};

use crate::body::RequestBody;
use crate::protocol::{response_code, response_status};
use crate::server::collect::read_stored;
use crate::server::large::large_response;
use crate::server::write::Job;
use crate::stored::FailedResponse;
use crate::{BoxError, StoredResponse};

/// The engine's action: one call of the inner service (once), its response collected up to
/// the stored-bytes limit. Past the limit, the response goes on to the caller streamed, and a
/// compact record is stored in its place.
pub(super) async fn run_once<S, B, ResB>(
    mut job: Box<Job<S, B, ResB>>,
) -> Result<StoredResponse, Status>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    let (run, large) = (job.run, job.large.take());
    // K7: the handler finds the run it is part of among the request's extensions too (the
    // engine made it current for this future; see `idem_core::run`).
    if let Some(current) = idem_core::run::Run::current() {
        job.request.extensions_mut().insert(current);
    }
    // Moved straight out of the box into the call: no copy of the request stays in this future.
    let response = job.inner.oneshot(job.request).await.map_err(|e| {
        let e: BoxError = e.into();
        Status::new(Code::Internal, format!("the request's handler failed: {e}"))
    })?;
    let (parts, body) = response.into_parts();
    let body_failed = |e: ResB::Error| {
        let e: BoxError = e.into();
        Status::new(
            Code::Internal,
            format!("the request's handler failed while sending its response: {e}"),
        )
    };
    let head_bytes: usize = parts
        .headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    let budget = run.max_stored.saturating_sub(head_bytes);
    let hint = body.size_hint();
    let read = if hint.upper().is_some_and(|n| n <= budget as u64) {
        // Known to fit (a handler's `String`, `Json`, an empty body): read where it is, no box.
        let mut body = std::pin::pin!(body);
        let mut read = read_stored(body.as_mut(), budget)
            .await
            .map_err(body_failed)?;
        if let Some(frame) = read.over.take() {
            // It sent more than its size hint promised: read the rest too; the caller gets it
            // all, nothing is stored (E16).
            let mut frames = read.into_frames(frame);
            while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
                frames.push(frame.map_err(body_failed)?);
            }
            return large_response(parts, frames, None, run, large);
        }
        read
    } else if hint.lower() > budget as u64 {
        return large_response(parts, Vec::new(), Some(Box::pin(body)), run, large);
    } else {
        // On the heap, so what is left of it can be handed on after part was read.
        let mut body = Box::pin(body);
        let mut read = read_stored(body.as_mut(), budget)
            .await
            .map_err(body_failed)?;
        if let Some(frame) = read.over.take() {
            let frames = read.into_frames(frame);
            return large_response(parts, frames, Some(body), run, large);
        }
        read
    };
    let code = response_code(
        run.protocol,
        parts.status.as_u16(),
        &parts.headers,
        read.trailers.as_ref(),
    );
    let stored = StoredResponse::from_parts(parts, read.data.into_bytes(), read.trailers);
    if code == Code::Ok || run.store_codes.contains(code) {
        return Ok(stored);
    }
    // A failure: its whole status (message, reason, pushback) only now.
    let status = response_status(
        run.protocol,
        stored.status().as_u16(),
        stored.headers(),
        stored.trailers(),
    );
    Err(status.with_source(FailedResponse(stored)))
}
