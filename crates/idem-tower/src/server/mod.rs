//! The server side: deduplicate writes through the engine (SPEC T1, T1a, T2, R7).

mod layer;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use idem_core::{Code, Deadline, Fingerprint, Reason, Scope, Status};
use idem_dedup::{DedupError, Deduplicator, Engine, OutcomeKind};
use tower::{Service, ServiceExt};

pub(crate) use layer::ServerConfig;
pub use layer::{IdemLayer, IdemLayerBuilder, DEFAULT_MAX_BODY_BYTES};

use crate::body::{RequestBody, ResponseBody};
use crate::protocol::response_status;
use crate::stored::FailedResponse;
use crate::{headers, key_from_headers, reject, BoxError, Deduplicated, Protocol, StoredResponse};

/// The service made by [`IdemLayer`]: runs each write once per (tenant, method, key) and replays
/// the stored response to every duplicate (T1), through any [`Deduplicator`] (T5): the in-process
/// [`Engine`] by default, or a tiered engine over Redis or PostgreSQL.
///
/// For a request that is not a write ([`Writes`](crate::Writes)) it is a pass-through. For a
/// write, in order:
///
/// 1. the tenant ([`TenantSource`](crate::TenantSource)); none → `UNAUTHENTICATED` / 401 (T1a);
/// 2. the key header ([`key_from_headers`]); missing, malformed or repeated →
///    `INVALID_ARGUMENT` / 400 (T2);
/// 3. the body: a `content-length` over the limit is refused at once, a streamed body is read
///    only up to the limit → `INVALID_ARGUMENT` / 413 (T2);
/// 4. the engine runs the inner service once for the scope (tenant, request path, key) and body
///    fingerprint; duplicates join the run or get the stored response. Same key, other body →
///    `FAILED_PRECONDITION` / 422; in flight under `Reject` → `ABORTED` / 409; full →
///    `RESOURCE_EXHAUSTED` / 429 with retry-after (T2, E7, E14);
/// 5. the response — status, headers, body and trailers — is stored if it succeeded (gRPC
///    `grpc-status: 0`, HTTP 2xx) or its code was declared permanent
///    ([`store_failures`](IdemLayerBuilder::store_failures)); retryable failures are passed on but
///    never stored.
///
/// Replays and joins carry `idempotent-replayed: true`; every stored response carries
/// `idempotent-expires-at`. The inner service finds the request's [`Scope`] and the
/// deduplicator's run context (for a tiered engine, the claim's
/// [`FencingToken`](idem_dedup::remote::FencingToken); `()` for an [`Engine`]) in the request's
/// extensions; every deduplicated response carries a [`Deduplicated`] extension saying what was
/// decided. Errors are gRPC statuses on gRPC routes (a trailers-only response
/// whose `grpc-message` names the rule) and `application/problem+json` on HTTP routes.
///
/// # Retry at one layer only (SPEC R7)
///
/// This service never retries: it calls the inner service at most once per request. Retries
/// belong to the outermost client ([`RetryLayer`](crate::RetryLayer)).
///
/// # Cancellation safety
///
/// If the client goes away while its write runs, the engine finishes the run in a task of its own
/// and stores the response, so the client's retry gets it (SPEC E5). A gRPC `grpc-timeout` bounds
/// how long a duplicate waits for a run (it then gets `DEADLINE_EXCEEDED`; the run goes on).
#[derive(Debug, Clone)]
pub struct IdemService<S, D = Engine<StoredResponse>> {
    inner: S,
    engine: D,
    cfg: Arc<ServerConfig>,
}

impl<S, D> IdemService<S, D> {
    pub(crate) fn new(inner: S, engine: D, cfg: Arc<ServerConfig>) -> Self {
        IdemService { inner, engine, cfg }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

/// The future of [`IdemService`].
pub type IdemFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

impl<S, D, B, ResB> Service<Request<B>> for IdemService<S, D>
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
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = IdemFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Each request drives a clone of the inner service to readiness (`oneshot`).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let engine = self.engine.clone();
        let cfg = self.cfg.clone();
        Box::pin(handle(inner, engine, cfg, req))
    }
}

async fn handle<S, D, B, ResB>(
    inner: S,
    engine: D,
    cfg: Arc<ServerConfig>,
    req: Request<B>,
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
    let protocol = Protocol::of(req.headers());
    if !cfg
        .writes
        .is_write(req.method(), req.uri().path(), protocol)
    {
        let resp = inner.oneshot(req.map(Either::Left)).await?;
        return Ok(resp.map(Either::Left));
    }
    let refuse = |status: Status, http: Option<StatusCode>| {
        Ok(reject::render(protocol, &status, http).map(Either::Right))
    };

    let (parts, body) = req.into_parts();
    let Some(tenant) = cfg.tenant.tenant(&parts) else {
        return refuse(
            Status::new(
                Code::Unauthenticated,
                "a write needs an authenticated tenant (T1a): none was found on the request",
            )
            .with_reason(Reason::new("MISSING_TENANT")),
            None,
        );
    };
    let key_header = match protocol {
        Protocol::Grpc => &cfg.grpc_key,
        Protocol::Http => &cfg.http_key,
    };
    let key = match key_from_headers(&parts.headers, key_header) {
        Ok(Some(key)) => key,
        Ok(None) => {
            return refuse(
                Status::new(
                    Code::InvalidArgument,
                    format!(
                        "a write needs an idempotency key (T2): send the `{key_header}` header"
                    ),
                )
                .with_reason(Reason::MISSING_IDEMPOTENCY_KEY),
                None,
            )
        }
        Err(e) => {
            return refuse(
                Status::new(Code::InvalidArgument, e.to_string())
                    .with_reason(Reason::INVALID_IDEMPOTENCY_KEY),
                None,
            )
        }
    };
    let scope = match Scope::new(tenant.as_str(), parts.uri.path(), &key) {
        Ok(scope) => scope,
        Err(e) => return refuse(Status::from(e), None),
    };

    // T2: refuse oversized bodies without buffering them.
    let limit = cfg.max_body_bytes;
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) || body.size_hint().lower() > limit as u64 {
        let (status, http) = reject::too_large(limit);
        return refuse(status, http);
    }
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => {
            let (status, http) = reject::too_large(limit);
            return refuse(status, http);
        }
        Err(e) => {
            return refuse(
                Status::new(
                    Code::Cancelled,
                    format!("could not read the request body: {e}"),
                ),
                None,
            )
        }
    };
    let fingerprint = Fingerprint::of(&bytes);
    let deadline = match protocol {
        Protocol::Grpc => parts
            .headers
            .get(headers::GRPC_TIMEOUT)
            .and_then(|v| v.to_str().ok())
            .and_then(crate::parse_grpc_timeout)
            .map(Deadline::after),
        Protocol::Http => None,
    };

    let mut request = Request::from_parts(parts, Either::Right(Full::new(bytes)));
    request.extensions_mut().insert(scope.clone());
    let store_codes = cfg.store_codes;
    let action = move |context: D::Context| {
        request.extensions_mut().insert(context);
        run_once(inner, request, protocol, store_codes)
    };
    let result = match deadline {
        Some(d) => {
            engine
                .execute_with_deadline(&scope, fingerprint, d, action)
                .await
        }
        None => engine.execute(&scope, fingerprint, action).await,
    };
    let mut response = match &result {
        Ok(outcome) => outcome.value().to_marked_response(
            outcome.kind() != OutcomeKind::Executed,
            Some(wall_clock(outcome.expires_at())),
        ),
        Err(DedupError::Action { status, outcome }) => {
            match std::error::Error::source(status).and_then(|s| s.downcast_ref::<FailedResponse>())
            {
                Some(failed) => failed
                    .0
                    .to_marked_response(*outcome != OutcomeKind::Executed, None),
                None => reject::render(protocol, status, None),
            }
        }
        Err(e) => reject::render(protocol, &e.to_status(), None),
    };
    response
        .extensions_mut()
        .insert(Deduplicated::new(scope, &result));
    Ok(response.map(Either::Right))
}

/// The engine's action: one call of the inner service, its whole response collected (R7: once).
async fn run_once<S, B, ResB>(
    inner: S,
    request: Request<RequestBody<B>>,
    protocol: Protocol,
    store_codes: idem_core::CodeSet,
) -> Result<StoredResponse, Status>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    let response = inner.oneshot(request).await.map_err(|e| {
        let e: BoxError = e.into();
        Status::new(Code::Internal, format!("inner service failed: {e}"))
    })?;
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.map_err(|e| {
        let e: BoxError = e.into();
        Status::new(
            Code::Internal,
            format!("inner service's response body failed: {e}"),
        )
    })?;
    let trailers = collected.trailers().cloned();
    let bytes = collected.to_bytes();
    let status = response_status(
        protocol,
        parts.status.as_u16(),
        &parts.headers,
        trailers.as_ref(),
    );
    let stored = StoredResponse::from_parts(parts, bytes, trailers);
    if status.code() == Code::Ok || store_codes.contains(status.code()) {
        Ok(stored)
    } else {
        Err(status.with_source(FailedResponse(stored)))
    }
}

/// A tokio instant as wall-clock time.
fn wall_clock(at: tokio::time::Instant) -> SystemTime {
    let now = tokio::time::Instant::now();
    SystemTime::now() + at.saturating_duration_since(now)
}
