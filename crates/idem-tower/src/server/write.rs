//! A write that passed the checks: its body read within the limit, its fingerprint and deadline,
//! and its one run through the deduplicator.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{Either, Full};
use idem_core::{Code, CodeSet, Deadline, Scope, Status};
use idem_dedup::Deduplicator;
use tokio::sync::oneshot;
use tower::Service;

use crate::body::{read_limited, ReadError, RequestBody, ResponseBody};
use crate::server::admit::refusal;
use crate::server::large::Large;
use crate::server::respond::respond;
use crate::server::run::run_once;
use crate::server::ServerConfig;
use crate::{headers, reject, request_fingerprint, wire, BoxError, Protocol, StoredResponse};

/// One write's run: what the engine's action takes, on the heap so that the futures that carry
/// the action until it runs (this layer's, the engine's) hold a pointer, not the request.
pub(super) struct Job<S, B, ResB> {
    pub(super) inner: S,
    pub(super) request: Request<RequestBody<B>>,
    pub(super) run: RunConfig,
    /// Where a response too large to store goes to the caller that ran it.
    pub(super) large: Option<oneshot::Sender<Large<ResB>>>,
}

/// What the action needs to know besides the request.
#[derive(Debug, Clone, Copy)]
pub(super) struct RunConfig {
    pub(super) protocol: Protocol,
    pub(super) store_codes: CodeSet,
    pub(super) max_stored: usize,
}

/// A write that passed [`admit`]: reads the body, then runs it through the engine and answers.
pub(super) async fn write<S, D, B, ResB>(
    mut job: Box<Job<S, B, ResB>>,
    body: B,
    engine: D,
    cfg: Arc<ServerConfig>,
    scope: Scope,
) -> Result<Response<ResponseBody<ResB>>, S::Error>
where
    D: Deduplicator<Value = StoredResponse>,
    S: Service<Request<RequestBody<B>>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    let protocol = job.run.protocol;
    let limit = cfg.max_body_bytes;
    let bytes = match read_limited(body, limit).await {
        Ok(bytes) => bytes,
        Err(ReadError::TooLarge) => {
            let (status, http) = reject::too_large(limit);
            return Ok(refusal(protocol, &status, http));
        }
        Err(ReadError::Failed(e)) => {
            let status = Status::new(
                Code::Cancelled,
                format!("could not read the request body: {e}"),
            );
            return Ok(refusal(protocol, &status, None));
        }
    };
    let request = &mut job.request;
    // K6: the whole request, not just its body.
    let fingerprint = request_fingerprint(
        request.method(),
        request.uri(),
        request.headers(),
        &cfg.fingerprint_headers,
        &bytes,
    );
    let deadline = match protocol {
        Protocol::Grpc => request
            .headers()
            .get(headers::GRPC_TIMEOUT)
            .and_then(|v| v.to_str().ok())
            .and_then(wire::parse_grpc_timeout)
            .map(Deadline::after),
        Protocol::Http => None,
    };
    *request.body_mut() = Either::Right(Full::new(bytes));
    request.extensions_mut().insert(scope.clone());
    let (large_tx, mut large_rx) = oneshot::channel();
    job.large = Some(large_tx);
    // The closure holds only the job's pointer: moving it into the engine's futures is cheap.
    let action = move |context: D::Context| {
        job.request.extensions_mut().insert(context);
        run_once(job)
    };
    let result = engine
        .execute_until(&scope, fingerprint, deadline, action)
        .await;
    let streamed = large_rx.try_recv().ok();
    Ok(respond(protocol, scope, result, streamed))
}
