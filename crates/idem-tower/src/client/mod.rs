//! The client side: one key per logical write, retries by idem-retry, pushback obeyed (T3,
//! R1–R6, R8).

mod error;
mod layer;
mod pushback;
pub(crate) mod stats;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use idem_core::run::{self, Run, StepName};
use idem_core::{Code, Deadline, IdempotencyKey, Reason, Status};
use idem_retry::{Attempt, Call, Classify};
use tower::{Service, ServiceExt};
use tracing::Instrument;

pub use error::CallFailed;
pub use layer::{MissingKey, RetryLayer, RetryLayerBuilder, DEFAULT_CALL_TIMEOUT};
pub use stats::{ClientStats, Failure};

use crate::body::{ReplayBody, ResendableBody};
use crate::client::error::tonic_status;
use crate::client::pushback::Pushback;
use crate::protocol::response_status;
use crate::{
    format_grpc_timeout, headers, key_from_headers, parse_grpc_timeout, BoxError, Protocol,
};

/// The service made by [`RetryLayer`]: sends one logical call as one or more attempts (T3).
///
/// For each call:
/// 1. A write ([`Writes`](crate::Writes)) without a key gets one, made once: inside a run
///    being served (the handler of a request an idem server layer deduplicates, see
///    [`idem_core::run`]) the key derived from that run, its target (the gRPC method, or the
///    HTTP method and path) and its place among the run's calls, or the step named by a
///    [`StepName`] request extension; outside a run a fresh one ([`IdempotencyKey::generate`]).
///    So a re-run of the inbound intent, on any instance, sends the same keys and the
///    downstream service replays. A write with a key keeps it. Every attempt carries that same key (R6). A
///    write whose key is refused locally, or that has none under [`MissingKey::SendOnce`], is
///    sent once and never retried (S2). Other calls are retried as idempotent reads.
/// 2. The call's deadline is the request's `grpc-timeout`, else the layer's call timeout. Each
///    gRPC attempt carries `grpc-timeout` (what is left, or the attempt timeout if shorter) and,
///    from the second on, `grpc-previous-rpc-attempts` (R6).
/// 3. The request body is buffered once and resent on each attempt; each response is buffered
///    whole, so its `grpc-status` trailer can be read (meant for unary calls).
/// 4. After a failure — a gRPC status, an HTTP status, a transport error (an unknown outcome,
///    S3) or the attempt timing out — the [`Retrier`](idem_retry::Retrier) decides (R2, R3,
///    R5, R8), the shared budget can refuse, and the server's pushback is obeyed (below).
///
/// A success is the last attempt's response, with a [`CallReport`] extension (attempts, key).
/// Anything else is an error that downcasts to [`CallFailed`]: why the layer gave up, after how
/// many attempts, the key, the last failure's status and the last response if there was one.
/// tonic clients get the server's own `tonic::Status`, whose source is the `CallFailed`; after a
/// transport error (the server may have run the call), `UNAVAILABLE` with reason
/// `UNKNOWN_OUTCOME`, which says to retry with the same key.
///
/// # Pushback (R8, T6)
///
/// | the failed response carries | the next attempt |
/// |---|---|
/// | `grpc-retry-pushback-ms: N` (one non-negative integer) | after exactly `N` ms (no jitter, no cap); the backoff after it starts again at the base delay |
/// | `grpc-retry-pushback-ms` negative, malformed (`xxx`, empty) or repeated | none: the call ends, [`GiveUp::Pushback`](idem_retry::GiveUp::Pushback) |
/// | no pushback header, a `google.rpc.RetryInfo` in `grpc-status-details-bin` | after exactly its `retry_delay`, as a pushback |
/// | both | the `grpc-retry-pushback-ms` header wins (it is the one gRPC A6 defines) |
/// | HTTP `Retry-After` (seconds or an HTTP-date) | after that long, as a pushback |
/// | none of these, or a zero delay | the policy's backoff |
///
/// A pushback still counts against the deadline (a wait that would overrun it ends the call) and
/// the budget. `RetryInfo` that does not decode is ignored, never a reason to stop.
///
/// # Tracing and metrics (E15)
///
/// Each call is a span, `idem_tower.client` (target `idem_tower`, at `DEBUG`), with `protocol`
/// (`grpc` or `http`), `method` (the HTTP method) and `path` (for gRPC, the method); when the
/// call ends, `attempts`, `outcome` (`ok`, or why the layer gave up:
/// [`GiveUp::as_str`](idem_retry::GiveUp::as_str); `error` if no attempt could be made) and
/// `code` (the last answer's status code). The retrier's `idem_retry.call` span and its
/// `DEBUG` retry and give-up events are inside it (see [`idem_retry::metrics`]). The key is
/// never logged. Building the layer describes its metrics ([`RETRIES_TOTAL`](crate::RETRIES_TOTAL),
/// [`KEYS_GENERATED_TOTAL`](crate::KEYS_GENERATED_TOTAL)) and the retrier's to the recorder.
///
/// # Cancellation safety
///
/// Dropping the future abandons the call after the attempt in flight. A write may have run on the
/// server: call again with the same key (take it from the request's key header, or set one
/// yourself) and the server's dedup replays it.
#[derive(Debug, Clone)]
pub struct RetryService<S> {
    inner: S,
    layer: RetryLayer,
}

impl<S> RetryService<S> {
    pub(crate) fn new(inner: S, layer: RetryLayer) -> Self {
        RetryService { inner, layer }
    }

    /// Counters shared with the layer and its other services.
    pub fn stats(&self) -> ClientStats {
        self.layer.stats()
    }
}

/// Put in the extensions of every successful response the client layer returns: how the call
/// went. A call that failed reports the same through [`CallFailed::report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallReport {
    /// Attempts made, first included.
    pub attempts: u32,
    /// The key every attempt carried, if the call was keyed.
    pub key: Option<IdempotencyKey>,
}

/// The source of a [`CallFailed`] whose last HTTP attempt timed out (on gRPC the source is a
/// `DEADLINE_EXCEEDED` `tonic::Status` instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptTimedOut {
    /// How long the attempt was given.
    pub after: Duration,
}

impl fmt::Display for AttemptTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "attempt timed out after {} ms", self.after.as_millis())
    }
}

impl std::error::Error for AttemptTimedOut {}

/// The future of [`RetryService`].
pub type RetryFuture = Pin<Box<dyn Future<Output = Result<Response<ReplayBody>, BoxError>> + Send>>;

impl<S, B, ResB> Service<Request<B>> for RetryService<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ResendableBody + Send + 'static,
    B::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<ReplayBody>;
    type Error = BoxError;
    type Future = RetryFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each attempt drives a clone of the inner service to readiness (`oneshot`).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let layer = self.layer.clone();
        // K7: decided here, in the caller's task and in the order of its calls, so the run
        // being served (if any) gives this write the key its place in the run stands for.
        let derived = derived_key(&layer, &req);
        let span = client_span(&req);
        if span.is_disabled() {
            return Box::pin(call(inner, layer, req, derived));
        }
        let end = span.clone();
        let traced = async move {
            let result = call(inner, layer, req, derived).await;
            record_end(&end, &result);
            result
        };
        Box::pin(traced.instrument(span))
    }
}

/// Inside a run, the key a write without one gets: derived from the run by its target (the gRPC
/// method, or the HTTP method and path) and its step name, if the request names one (K7).
/// `None` outside a run, for reads, and for writes that carry a key (kept as they are).
fn derived_key<B>(layer: &RetryLayer, req: &Request<B>) -> Option<IdempotencyKey> {
    let cfg = &layer.cfg;
    if cfg.missing_key != MissingKey::Generate || Run::current().is_none() {
        return None;
    }
    let protocol = Protocol::of(req.headers());
    if !cfg
        .writes
        .is_write(req.method(), req.uri().path(), protocol)
    {
        return None;
    }
    let key_header = match protocol {
        Protocol::Grpc => &cfg.grpc_key,
        Protocol::Http => &cfg.http_key,
    };
    if req.headers().contains_key(key_header) {
        return None;
    }
    let step = req.extensions().get::<StepName>().map(StepName::as_str);
    Some(match protocol {
        Protocol::Grpc => run::outbound_key(req.uri().path(), step),
        Protocol::Http => {
            run::outbound_key(&format!("{} {}", req.method(), req.uri().path()), step)
        }
    })
}

/// The span of one call through the client layer (E15; see [`RetryService`]).
fn client_span<B>(req: &Request<B>) -> tracing::Span {
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
fn record_end(span: &tracing::Span, result: &Result<Response<ReplayBody>, BoxError>) {
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

/// One attempt's failure, as the retrier classifies it.
struct AttemptError {
    status: Status,
    /// The server's pushback: for gRPC read by [`Pushback::of_grpc`], for HTTP `Retry-After`.
    pushback: Pushback,
    kind: Failure,
    outcome: Failed,
}

enum Failed {
    /// The server answered; for gRPC, with the `tonic::Status` its trailers hold.
    Response(
        Box<Response<ReplayBody>>,
        Option<crate::client::error::GrpcStatus>,
    ),
    Transport(BoxError),
    Timeout(Duration),
}

impl Classify for AttemptError {
    fn code(&self) -> Code {
        self.status.code()
    }
    fn reason(&self) -> Option<&Reason> {
        self.status.reason()
    }
    fn retry_after(&self) -> Option<Duration> {
        match self.pushback {
            Pushback::After(d) => Some(d),
            Pushback::None | Pushback::Stop => None,
        }
    }
    fn forbids_retry(&self) -> bool {
        self.pushback == Pushback::Stop
    }
}

async fn call<S, B, ResB>(
    inner: S,
    layer: RetryLayer,
    req: Request<B>,
    derived: Option<IdempotencyKey>,
) -> Result<Response<ReplayBody>, BoxError>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ResendableBody + Send + 'static,
    B::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    let cfg = &layer.cfg;
    let protocol = Protocol::of(req.headers());
    let (mut parts, body) = req.into_parts();
    let bytes = body.collect().await.map_err(Into::into)?.to_bytes();

    let budget = parts
        .headers
        .get(headers::GRPC_TIMEOUT)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
        .unwrap_or(cfg.call_timeout);
    let deadline = Deadline::after(budget);
    let key_header = match protocol {
        Protocol::Grpc => cfg.grpc_key.clone(),
        Protocol::Http => cfg.http_key.clone(),
    };
    let call = if cfg
        .writes
        .is_write(&parts.method, parts.uri.path(), protocol)
    {
        match key_from_headers(&parts.headers, &key_header) {
            Ok(Some(key)) => Call::keyed(key),
            Ok(None) if cfg.missing_key == MissingKey::Generate => match derived {
                Some(key) => {
                    layer.counters.key_derived();
                    Call::keyed(key)
                }
                None => {
                    layer.counters.key_generated();
                    Call::keyed(IdempotencyKey::generate())
                }
            },
            // No key, or one the server will refuse: at most once (S2).
            Ok(None) | Err(_) => Call::non_idempotent(),
        }
    } else {
        Call::idempotent()
    }
    .with_deadline(deadline);
    if let Some(key) = call.key() {
        parts.headers.remove(&key_header);
        let value = match protocol {
            Protocol::Grpc => key.as_str().to_owned(),
            Protocol::Http => format!("\"{}\"", key.as_str()), // RFC 8941 sf-string
        };
        parts
            .headers
            .insert(&key_header, HeaderValue::from_str(&value)?);
    }

    let last_failure = AtomicUsize::new(usize::MAX);
    let attempts = AtomicUsize::new(0);
    let attempt_timeout = cfg.attempt_timeout;
    let result = layer
        .retrier
        .call_reporting(&call, |attempt: Attempt| {
            attempts.fetch_add(1, Relaxed);
            if attempt.is_retry() {
                let why = Failure::ALL
                    .get(last_failure.load(Relaxed))
                    .copied()
                    .unwrap_or(Failure::Other);
                layer.counters.retry(why);
            }
            let time =
                attempt_timeout.map_or(deadline.remaining(), |t| t.min(deadline.remaining()));
            let mut req = Request::from_parts(parts.clone(), B::from_bytes(bytes.clone()));
            if protocol == Protocol::Grpc {
                let h = req.headers_mut();
                if let Ok(v) = HeaderValue::from_str(&format_grpc_timeout(time)) {
                    h.insert(headers::GRPC_TIMEOUT, v);
                }
                if attempt.is_retry() {
                    h.insert(
                        headers::GRPC_PREVIOUS_ATTEMPTS,
                        HeaderValue::from(attempt.previous_attempts()),
                    );
                }
            }
            let svc = inner.clone();
            let last_failure = &last_failure;
            async move {
                let r = one_attempt(svc, req, protocol, time).await;
                if let Err(e) = &r {
                    last_failure.store(e.kind.index(), Relaxed);
                }
                r
            }
        })
        .await;
    let report = CallReport {
        attempts: u32::try_from(attempts.load(Relaxed)).unwrap_or(u32::MAX),
        key: call.key().cloned(),
    };
    match result {
        Ok(mut response) => {
            response.extensions_mut().insert(report);
            Ok(response)
        }
        Err(gave_up) => Err(Box::new(CallFailed::from_give_up(
            protocol, report, gave_up,
        ))),
    }
}

async fn one_attempt<S, B, ResB>(
    svc: S,
    req: Request<B>,
    protocol: Protocol,
    time: Duration,
) -> Result<Response<ReplayBody>, AttemptError>
where
    S: Service<Request<B>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ResB: Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    let exchange = async {
        let response = svc.oneshot(req).await.map_err(transport)?;
        let (parts, body) = response.into_parts();
        let collected = body.collect().await.map_err(transport)?;
        let trailers = collected.trailers().cloned();
        Ok::<_, AttemptError>((parts, collected.to_bytes(), trailers))
    };
    let (parts, bytes, trailers) = match tokio::time::timeout(time, exchange).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(AttemptError {
                status: Status::new(
                    Code::DeadlineExceeded,
                    format!(
                        "attempt timed out after {} ms (client deadline)",
                        time.as_millis()
                    ),
                ),
                pushback: Pushback::None,
                kind: Failure::Timeout,
                outcome: Failed::Timeout(time),
            })
        }
    };
    let status = response_status(
        protocol,
        parts.status.as_u16(),
        &parts.headers,
        trailers.as_ref(),
    );
    if status.code() == Code::Ok {
        return Ok(Response::from_parts(
            parts,
            ReplayBody::new(bytes, trailers),
        ));
    }
    let (status, pushback, grpc) = match protocol {
        Protocol::Grpc => {
            let pushback = Pushback::of_grpc(&parts.headers, trailers.as_ref());
            let grpc = tonic_status(&parts.headers, trailers.as_ref(), &status);
            (pushback.apply_to(status), pushback, Some(grpc))
        }
        Protocol::Http => {
            let pushback = status.retry_after().map_or(Pushback::None, Pushback::After);
            (status, pushback, None)
        }
    };
    let response = Response::from_parts(parts, ReplayBody::new(bytes, trailers));
    Err(AttemptError {
        kind: Failure::from_code(status.code()),
        status,
        pushback,
        outcome: Failed::Response(Box::new(response), grpc),
    })
}

/// A transport error: the request may or may not have reached the server (S3), so it is
/// `UNAVAILABLE` with reason `UNKNOWN_OUTCOME` — retried only for keyed or idempotent calls.
fn transport<E: Into<BoxError>>(e: E) -> AttemptError {
    let e: BoxError = e.into();
    AttemptError {
        status: Status::new(
            Code::Unavailable,
            format!(
                "the connection failed, so whether the server ran the request is not known: \
                 retry with the same idempotency key to run it at most once and get its result \
                 ({})",
                chain(&*e)
            ),
        )
        .with_reason(Reason::UNKNOWN_OUTCOME),
        pushback: Pushback::None,
        kind: Failure::Transport,
        outcome: Failed::Transport(e),
    }
}

/// An error and its sources as one text, each said once: a source whose text the chain already
/// holds (a wrapper that repeats it, or prints it in its own message) is left out.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(source) = next {
        let part = source.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = source.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::chain;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn t3_transport_error_chain_says_each_message_once() {
        let e = E(
            "transport error",
            Some(Box::new(E(
                "transport error",
                Some(Box::new(E(
                    "error trying to connect: connection refused",
                    Some(Box::new(E("connection refused", None))),
                ))),
            ))),
        );
        assert_eq!(
            chain(&e),
            "transport error: error trying to connect: connection refused"
        );
    }
}
