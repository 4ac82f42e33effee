//! The server side: deduplicate writes through the engine (T1, T1a, T2, R7).

mod keyed;
mod layer;
mod refused;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use futures::TryFutureExt;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{Either, Full};
use idem_core::{Code, Deadline, Reason, Scope, Status};
use idem_dedup::{DedupError, Deduplicator, Engine, OutcomeKind, Source};
use tokio::sync::oneshot;
use tower::{Service, ServiceExt};

pub use keyed::KEYED_PASSTHROUGH_TOTAL;
pub(crate) use layer::ServerConfig;
pub use layer::{IdemLayer, IdemLayerBuilder, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_STORED_BYTES};
pub use refused::REFUSED_TOTAL;

use crate::body::{read_limited, Joined, ReadError, RequestBody, ResponseBody, StreamedBody};
use crate::protocol::{response_code, response_status};
use crate::request_fingerprint;
use crate::stored::FailedResponse;
use crate::{
    headers, key_from_headers, reject, BoxError, Deduplicated, Protocol, StoredResponse,
    TenantSource,
};

/// The service made by [`IdemLayer`]: runs each write once per (tenant, method, key) and replays
/// the stored response to every duplicate (T1), through any [`Deduplicator`] (T5): the in-process
/// [`Engine`] by default, or a tiered engine over Redis or PostgreSQL.
///
/// A request is a write when the [`Writes`](crate::Writes) rule lists it, or when it carries
/// the idempotency key header of its protocol (a key is a declaration of intent) and is neither
/// declared a read ([`Reads`](crate::Reads)) nor an HTTP `GET`, `HEAD`, `OPTIONS` or `TRACE`.
/// Any other request passes through untouched; the keyed ones among them are counted
/// ([`KEYED_PASSTHROUGH_TOTAL`]) and logged at `DEBUG`. For a write, in order:
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
/// [`FencingToken`](idem_dedup::remote::FencingToken); `()` for an [`Engine`]) and the
/// [`Run`](idem_core::run::Run) it is part of in the request's extensions (the run is also the
/// current one while the handler runs, so idem's client layers inside derive the keys they send
/// downstream from it); every deduplicated response carries a [`Deduplicated`] extension saying what was
/// decided. Errors are gRPC statuses on gRPC routes (a trailers-only response
/// whose `grpc-message` names the rule) and `application/problem+json` on HTTP routes.
///
/// # Retry at one layer only (R7)
///
/// This service never retries: it calls the inner service at most once per request. Retries
/// belong to the outermost client ([`RetryLayer`](crate::RetryLayer)).
///
/// # Cancellation safety
///
/// If the client goes away while its write runs, the engine finishes the run in a task of its own
/// and stores the response, so the client's retry gets it (E5). A gRPC `grpc-timeout` bounds
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
        let protocol = Protocol::of(req.headers());
        let cfg = &self.cfg;
        if !cfg
            .writes
            .is_write(req.method(), req.uri().path(), protocol)
            && !keyed::is_keyed_write(cfg, protocol, &req)
        {
            let pass = self.inner.clone().oneshot(req.map(Either::Left));
            return Box::pin(pass.map_ok(|resp| resp.map(Either::Left)));
        }
        // Everything that needs no await is decided here, so the future keeps only what the
        // body read and the engine's call need (moved-from values stay in an async fn's state).
        let (parts, body) = req.into_parts();
        let scope = match admit(cfg, protocol, &parts, &body) {
            Ok(scope) => scope,
            Err(refused) => return Box::pin(std::future::ready(Ok(refused))),
        };
        let job = Box::new(Job {
            inner: self.inner.clone(),
            request: Request::from_parts(parts, Either::Right(Full::default())),
            run: RunConfig {
                protocol,
                store_codes: cfg.store_codes,
                max_stored: cfg.max_stored_bytes,
            },
            large: None,
        });
        Box::pin(write(
            job,
            body,
            self.engine.clone(),
            self.cfg.clone(),
            scope,
        ))
    }
}

/// A refusal made by the layer (counted by reason and status), as the service's response.
fn refusal<B>(
    protocol: Protocol,
    status: &Status,
    http: Option<StatusCode>,
) -> Response<ResponseBody<B>> {
    let response = reject::render(protocol, status, http);
    refused::count(status, &response);
    response.map(|b| Either::Right(Either::Left(b)))
}

/// The checks a write passes before its body is read (T1a, T2, K3): a tenant, one well-formed
/// key, a valid scope, a declared length within the limit. Returns the scope, or the refusal.
// The refusal is the response itself, handed straight back; boxing it would only add an
// allocation to each refused request.
#[allow(clippy::result_large_err)]
fn admit<B: Body, ResB>(
    cfg: &ServerConfig,
    protocol: Protocol,
    parts: &http::request::Parts,
    body: &B,
) -> Result<Scope, Response<ResponseBody<ResB>>> {
    let refuse = |status: Status, http: Option<StatusCode>| refusal(protocol, &status, http);
    let Some(tenant) = cfg.tenant.tenant(parts) else {
        return Err(refuse(missing_tenant(&cfg.tenant), None));
    };
    let key_header = cfg.key_header(protocol);
    let key = match key_from_headers(&parts.headers, key_header) {
        Ok(Some(key)) => key,
        Ok(None) => {
            return Err(refuse(
                Status::new(
                    Code::InvalidArgument,
                    format!(
                        "this request changes data and needs an idempotency key: send the \
                         `{key_header}` header with 8-64 characters of A-Z a-z 0-9 _ -, the same \
                         on every retry"
                    ),
                )
                .with_reason(Reason::MISSING_IDEMPOTENCY_KEY),
                None,
            ))
        }
        Err(e) => {
            return Err(refuse(
                Status::new(Code::InvalidArgument, e.to_string())
                    .with_reason(Reason::INVALID_IDEMPOTENCY_KEY),
                None,
            ))
        }
    };
    // A tenant or path over its limit is the scope's fault, not the key's (INVALID_SCOPE).
    let scope = Scope::new(tenant.as_str(), parts.uri.path(), &key)
        .map_err(|e| refuse(Status::from(e), None))?;
    // T2: refuse oversized bodies without buffering them.
    let limit = cfg.max_body_bytes;
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) || body.size_hint().lower() > limit as u64 {
        let (status, http) = reject::too_large(limit);
        return Err(refuse(status, http));
    }
    Ok(scope)
}

/// The refusal of a write without a tenant: `UNAUTHENTICATED`, reason `MISSING_TENANT`, saying
/// where the layer looked, so a server whose authentication runs too late (inside the layer, as
/// a tonic interceptor on the service does) learns why from the first refused call.
fn missing_tenant(source: &TenantSource) -> Status {
    let message: std::borrow::Cow<'static, str> = match source {
        TenantSource::Extension => "this request changes data and needs an authenticated tenant, \
            and none was found: if it carried credentials, the server's authentication did not \
            put a `Tenant` in the request's extensions before the idempotency layer ran (it must \
            be a layer outside the idempotency layer; a tonic interceptor on the service runs \
            inside it, too late)"
            .into(),
        TenantSource::Header(name) => format!(
            "this request changes data and needs an authenticated tenant, and none was found: \
             the `{name}` header, which the gateway in front of this server sets, is missing, \
             empty or repeated"
        )
        .into(),
    };
    Status::new(Code::Unauthenticated, message).with_reason(Reason::new("MISSING_TENANT"))
}

/// One write's run: what the engine's action takes, on the heap so that the futures that carry
/// the action until it runs (this layer's, the engine's) hold a pointer, not the request.
struct Job<S, B, ResB> {
    inner: S,
    request: Request<RequestBody<B>>,
    run: RunConfig,
    /// Where a response too large to store goes to the caller that ran it (E16).
    large: Option<oneshot::Sender<Large<ResB>>>,
}

/// A write that passed [`admit`]: reads the body, then runs it through the engine and answers.
async fn write<S, D, B, ResB>(
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
            .and_then(crate::parse_grpc_timeout)
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
    let result = match deadline {
        Some(d) => {
            engine
                .execute_with_deadline(&scope, fingerprint, d, action)
                .await
        }
        None => engine.execute(&scope, fingerprint, action).await,
    };
    let streamed = large_rx.try_recv().ok();
    Ok(respond(protocol, scope, result, streamed))
}

/// The answer to a write: the streamed response of a run too large to store, the stored or
/// replayed response with the layer's marks, the inner service's own failure, or a refusal.
fn respond<ResB>(
    protocol: Protocol,
    scope: Scope,
    result: Result<idem_dedup::Outcome<StoredResponse>, DedupError>,
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

/// What the action needs to know besides the request.
#[derive(Debug, Clone, Copy)]
struct RunConfig {
    protocol: Protocol,
    store_codes: idem_core::CodeSet,
    max_stored: usize,
}

/// A response over the stored-bytes limit, handed to the caller that ran it.
struct Large<B> {
    parts: http::response::Parts,
    read: Vec<Frame<Bytes>>,
    rest: Option<Pin<Box<B>>>,
}

/// A response over the stored-bytes limit: handed on to the caller that ran it; in its place a
/// compact record is stored if the response counts as a success (HTTP: its status; gRPC: its
/// status comes after the body, so a response that far along counts as one), else nothing.
fn large_response<B>(
    parts: http::response::Parts,
    read: Vec<Frame<Bytes>>,
    rest: Option<Pin<Box<B>>>,
    run: RunConfig,
    large: Option<oneshot::Sender<Large<B>>>,
) -> Result<StoredResponse, Status> {
    let status = response_status(run.protocol, parts.status.as_u16(), &parts.headers, None);
    let storable = match run.protocol {
        Protocol::Grpc => parts.status == StatusCode::OK,
        Protocol::Http => status.code() == Code::Ok || run.store_codes.contains(status.code()),
    };
    let original = parts.status;
    let location: Vec<_> = [http::header::LOCATION, http::header::CONTENT_LOCATION]
        .into_iter()
        .filter_map(|h| parts.headers.get(&h).map(|v| (h, v.clone())))
        .collect();
    // The caller may be gone (its run was handed off): then nobody reads the rest.
    if let Some(large) = large {
        let _ = large.send(Large { parts, read, rest });
    }
    if !storable {
        return Err(status);
    }
    let note = Status::new(
        Code::AlreadyExists,
        format!(
            "this request already ran (its answer was {} {}), but its response was over the \
             {} bytes this server stores, so it cannot be replayed; look the result up{}",
            original.as_u16(),
            original.canonical_reason().unwrap_or(""),
            run.max_stored,
            if location.is_empty() {
                ""
            } else {
                " at the Location header"
            }
        ),
    )
    .with_reason(Reason::RESPONSE_NOT_STORED);
    let (mut head, body) = reject::render(run.protocol, &note, None).into_parts();
    for (name, value) in location {
        head.headers.insert(name, value);
    }
    let (data, trailers) = body.into_parts();
    Ok(StoredResponse::from_parts(head, data, trailers))
}

/// The engine's action: one call of the inner service (R7: once), its response collected up to
/// the stored-bytes limit. Past the limit, the response goes on to the caller streamed, and a
/// compact record is stored in its place (E16).
async fn run_once<S, B, ResB>(mut job: Box<Job<S, B, ResB>>) -> Result<StoredResponse, Status>
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

/// A response body read up to the stored-bytes budget.
struct Read {
    data: Joined,
    trailers: Option<http::HeaderMap>,
    /// The frame that went over the budget, if one did (the body is then not all read).
    over: Option<Frame<Bytes>>,
}

impl Read {
    /// The frames read so far, as the caller is to get them: the data, then `next`.
    fn into_frames(self, next: Frame<Bytes>) -> Vec<Frame<Bytes>> {
        let mut frames = Vec::with_capacity(3);
        if self.data.len() > 0 {
            frames.push(Frame::data(self.data.into_bytes()));
        }
        // (Trailers end a body, so a frame after them is not expected; kept in order if one is.)
        frames.extend(self.trailers.map(Frame::trailers));
        frames.push(next);
        frames
    }
}

/// Reads `body` until it ends or a frame would take it over `budget` bytes (data, or a trailer
/// block's names and values).
async fn read_stored<B: Body<Data = Bytes>>(
    mut body: Pin<&mut B>,
    mut budget: usize,
) -> Result<Read, B::Error> {
    let mut read = Read {
        data: Joined::default(),
        trailers: None,
        over: None,
    };
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame?;
        let size = match (frame.data_ref(), frame.trailers_ref()) {
            (Some(d), _) => d.len(),
            (None, Some(t)) => t.iter().map(|(k, v)| k.as_str().len() + v.len()).sum(),
            _ => 0,
        };
        if size > budget {
            read.over = Some(frame);
            break;
        }
        budget -= size;
        match frame.into_data() {
            Ok(data) => read.data.push(data),
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    read.trailers = Some(t);
                }
            }
        }
    }
    Ok(read)
}

/// A tokio instant as wall-clock time.
fn wall_clock(at: tokio::time::Instant) -> SystemTime {
    let now = tokio::time::Instant::now();
    SystemTime::now() + at.saturating_duration_since(now)
}
