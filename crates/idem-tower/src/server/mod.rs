//! The server side: deduplicate writes through the engine.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | [`IdemService`]: which requests are writes, and the order of what happens to one |
//! | `layer.rs` | [`IdemLayer`], [`IdemLayerBuilder`], the settings and their defaults |
//! | `keyed.rs` | keyed requests the write rule does not list |
//! | `admit.rs` | the checks before the body is read (tenant, key, scope, declared length); refusals |
//! | `write.rs` | reading the body within the limit, fingerprint, deadline, the run through the deduplicator |
//! | `run.rs`, `collect.rs` | the engine's action: one call of the inner service, its response read up to the stored-bytes limit |
//! | `large.rs` | a response over that limit: streamed to its caller, a compact record stored |
//! | `respond.rs` | the answer, marked (`idempotent-replayed`, `idempotent-expires-at`, [`Deduplicated`](crate::Deduplicated)) |
//! | `refused.rs` | counting the layer's refusals |

mod admit;
mod collect;
mod keyed;
mod large;
mod layer;
mod refused;
mod respond;
mod run;
mod write;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::TryFutureExt;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{Either, Full};
use idem_dedup::{Deduplicator, Engine};
use tower::{Service, ServiceExt};

pub(crate) use layer::ServerConfig;
pub use layer::{IdemLayer, IdemLayerBuilder, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_STORED_BYTES};

use crate::body::{RequestBody, ResponseBody};
use crate::server::admit::admit;
use crate::server::write::{write, Job, RunConfig};
use crate::{BoxError, Protocol, StoredResponse};

/// The service made by [`IdemLayer`]: runs each write once per (tenant, method, key) and replays
/// the stored response to every duplicate, through any [`Deduplicator`]: the in-process
/// [`Engine`] by default, or a tiered engine over Redis or PostgreSQL.
///
/// A request is a write when the [`Writes`](crate::Writes) rule lists it, or when it carries
/// the idempotency key header of its protocol (a key is a declaration of intent) and is neither
/// declared a read ([`Reads`](crate::Reads)) nor an HTTP `GET`, `HEAD`, `OPTIONS` or `TRACE`.
/// Any other request passes through untouched; the keyed ones among them are counted
/// ([`KEYED_PASSTHROUGH_TOTAL`](crate::metrics::KEYED_PASSTHROUGH_TOTAL)) and logged at `DEBUG`. For a write, in order:
///
/// 1. the tenant ([`TenantSource`](crate::TenantSource)); none → `UNAUTHENTICATED` / 401;
/// 2. the key header ([`key_from_headers`](crate::key_from_headers)); missing, malformed or repeated →
///    `INVALID_ARGUMENT` / 400;
/// 3. the body: a `content-length` over the limit is refused at once, a streamed body is read
///    only up to the limit → `INVALID_ARGUMENT` / 413;
/// 4. the engine runs the inner service once for the scope (tenant, request path, key) and body
///    fingerprint; duplicates join the run or get the stored response. Same key, other body →
///    `FAILED_PRECONDITION` / 422; in flight under `Reject` → `ABORTED` / 409; full →
///    `RESOURCE_EXHAUSTED` / 429 with retry-after;
/// 5. the response — status, headers, body and trailers — is stored if it succeeded (gRPC
///    `grpc-status: 0`, HTTP 2xx) or its code was declared permanent
///    ([`store_failures`](IdemLayerBuilder::store_failures)); retryable failures are passed on but
///    never stored.
///
/// Replays and joins carry `idempotent-replayed: true`; every stored response carries
/// `idempotent-expires-at`. The inner service finds the request's [`Scope`](idem_core::Scope) and the
/// deduplicator's run context (for a tiered engine, the claim's
/// [`FencingToken`](idem_dedup::remote::FencingToken); `()` for an [`Engine`]) and the
/// [`Run`](idem_core::run::Run) it is part of in the request's extensions (the run is also the
/// current one while the handler runs, so idem's client layers inside derive the keys they send
/// downstream from it); every deduplicated response carries a [`Deduplicated`](crate::Deduplicated) extension saying what was
/// decided. Errors are gRPC statuses on gRPC routes (a trailers-only response
/// whose `grpc-message` names the rule) and `application/problem+json` on HTTP routes.
///
/// # Retry at one layer only
///
/// This service never retries: it calls the inner service at most once per request. Retries
/// belong to the outermost client ([`RetryLayer`](crate::RetryLayer)).
///
/// # Cancellation safety
///
/// If the client goes away while its write runs, the engine finishes the run in a task of its own
/// and stores the response, so the client's retry gets it. A gRPC `grpc-timeout` bounds
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
