//! The client side: one key per logical write, retries or hedges by idem-retry, pushback obeyed
//! (T3, R1–R6, R8, R9, R10).
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | [`RetryService`]: what happens to each call |
//! | `layer.rs` | [`RetryLayer`], [`RetryLayerBuilder`], [`MissingKey`], the defaults |
//! | `keys.rs` | the key a keyless write gets inside a run being served |
//! | `call.rs` | one logical call: its key and deadline, its attempts through the retrier |
//! | `attempt.rs` | one attempt and its failure as the retrier classifies it |
//! | `pushback.rs` | what a failed gRPC response says about retrying it |
//! | `report.rs`, `error.rs` | [`CallReport`], [`AttemptTimedOut`], [`CallFailed`] |
//! | `span.rs` | the call's span |
//! | `stats.rs` | [`ClientStats`] and the counters behind it |

mod attempt;
mod call;
mod error;
mod keys;
mod layer;
mod pushback;
mod report;
mod span;
mod stats;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower::Service;
use tracing::Instrument;

pub use error::CallFailed;
pub use layer::{MissingKey, RetryLayer, RetryLayerBuilder, DEFAULT_CALL_TIMEOUT};
pub use report::{AttemptTimedOut, CallReport};
pub use stats::ClientStats;

use crate::body::{ReplayBody, ResendableBody};
use crate::client::call::call;
use crate::client::keys::derived_key;
use crate::client::span::{client_span, record_end};
use crate::BoxError;

/// The service made by [`RetryLayer`]: sends one logical call as one or more attempts (T3).
///
/// For each call:
/// 1. A write ([`Writes`](crate::Writes)) without a key gets one, made once: inside a run
///    being served (the handler of a request an idem server layer deduplicates, see
///    [`idem_core::run`]) the key derived from that run, its target (the gRPC method, or the
///    HTTP method and path) and its place among the run's calls, or the step named by a
///    [`StepName`](idem_core::run::StepName) request extension; outside a run a fresh one ([`IdempotencyKey::generate`](idem_core::IdempotencyKey::generate)).
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
/// # Hedging (R9)
///
/// With [`hedging`](RetryLayerBuilder::hedging) set, a read or a keyed write is hedged instead of
/// retried ([`Retrier::call_hedged`](idem_retry::Retrier::call_hedged)): while no copy has
/// succeeded, another copy is sent after the hedging delay, with the same key and the next
/// `grpc-previous-rpc-attempts`; the first success is returned and the other copies are dropped
/// (cancelled on the wire: HTTP/2 resets the stream). A write without a key is sent once.
///
/// **When to hedge**: a method whose latency has a tail caused before the server starts the work
/// (a paused or overloaded instance, a queue, a slow connection), and a balancer that sends the
/// copies to different instances. **Its cost**: one more request per hedged call; with the delay
/// at the 95th percentile about 5% more requests, drawn from the retry budget. **Why it is safe
/// here**: every copy carries the same key, and the server layer joins a copy to the run of its
/// twin (on the same instance through the engine, on another through the shared tier), so the
/// write runs once and a cancelled copy does not cancel the run. It does not make a slow handler
/// faster: the second copy waits for the same run.
///
/// | setting ([`HedgingPolicy`](idem_retry::HedgingPolicy)) | default |
/// |---|---|
/// | copies, the first included (at most 5) | 2 |
/// | delay | p95 of the method's recent successful attempts, once 100 are known (until then, retried as usual) |
/// | non-fatal codes (the next copy goes at once, the others keep running) | `UNAVAILABLE`, and any answer with reason `REQUEST_IN_FLIGHT` |
/// | fatal codes | all others: the call ends with that answer |
/// | budget | each copy after the first is a withdrawal; refused, no more copies |
/// | pushback | forbids retries: no more copies; a delay: the next copy after it |
///
/// # Tracing and metrics (E15)
///
/// Each call is a span, `idem_tower.client` (target `idem_tower`, at `DEBUG`), with `protocol`
/// (`grpc` or `http`), `method` (the HTTP method) and `path` (for gRPC, the method); when the
/// call ends, `attempts`, `outcome` (`ok`, or why the layer gave up:
/// [`GiveUp::as_str`](idem_retry::GiveUp::as_str); `error` if no attempt could be made) and
/// `code` (the last answer's status code). The retrier's `idem_retry.call` span and its
/// `DEBUG` retry and give-up events are inside it (see [`idem_retry::metrics`]). The key is
/// never logged. Building the layer describes its metrics (see [`metrics`](crate::metrics)) and the retrier's to the recorder.
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
