//! # idem-tower: effectively-once writes inside tonic and axum, and the client that calls them
//!
//! Two tower layers over `http::Request` / `http::Response`, so they wrap tonic and axum alike:
//!
//! * **[`IdemLayer`]** (server): for each write it reads the tenant, the idempotency key and the
//!   body, and runs the inner service through an idem [`Engine`](idem_dedup::Engine) — once per
//!   (tenant, method, key). Duplicates get the stored response, byte for byte (status, headers,
//!   body, trailers), marked `idempotent-replayed: true`.
//! * **[`RetryLayer`]** (client): gives each logical write one key, sends it on every attempt with
//!   `grpc-previous-rpc-attempts` and the remaining deadline as `grpc-timeout`, and retries by
//!   idem-retry's rules: gRPC status, HTTP status, transport errors, pushback, shared budget.
//!
//! Together they make retried writes safe: *effectively-once* = at-least-once delivery (the client
//! layer) + a stable key (one per intent) + server-side deduplication (the server layer).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), idem_tower::BoxError> {
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Full};
//! use idem_dedup::Engine;
//! use idem_tower::{IdemLayer, RequestBody, StoredResponse, Tenant};
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use tower::{Layer, ServiceExt};
//!
//! // The side effect: create an order, answer its number.
//! let created = Arc::new(AtomicU32::new(0));
//! let orders = created.clone();
//! let create_order = tower::service_fn(move |_req: http::Request<RequestBody<Full<Bytes>>>| {
//!     let n = orders.fetch_add(1, Ordering::SeqCst) + 1;
//!     async move {
//!         Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(format!("order-{n}")))))
//!     }
//! });
//! let engine = Engine::<StoredResponse>::builder().build()?;
//! let service = IdemLayer::new(engine).layer(create_order); // HTTP POST and PATCH are writes
//!
//! let request = || {
//!     let mut req = http::Request::post("/orders")
//!         .header("Idempotency-Key", "\"3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10\"")
//!         .body(Full::new(Bytes::from_static(br#"{"sku":"book-42"}"#)))
//!         .unwrap();
//!     req.extensions_mut().insert(Tenant::new("tenant-0042")); // your auth layer does this
//!     req
//! };
//! let first = service.clone().oneshot(request()).await?;
//! let retry = service.clone().oneshot(request()).await?; // the client retried
//! assert!(first.headers().get("idempotent-replayed").is_none());
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! assert_eq!(retry.into_body().collect().await?.to_bytes(), "order-1");
//! assert_eq!(created.load(Ordering::SeqCst), 1); // one order
//! # Ok(()) }
//! ```
//!
//! ## How it fits
//!
//! | crate | role |
//! |---|---|
//! | `idem-core` | keys, scopes, fingerprints, status codes |
//! | `idem-dedup` | the engine [`IdemLayer`] runs writes through (TTL, joins, replays, bounded memory) |
//! | `idem-retry` | the policy, classifier, budget and retrier [`RetryLayer`] drives |
//! | `idem-tower` | the wire: headers, tenants, bodies, trailers, gRPC and HTTP errors |
//!
//! ## Server layer, in order
//!
//! | step | refused with (gRPC / HTTP) |
//! |---|---|
//! | not listed by [`Writes`] and no key header | passed through untouched |
//! | not listed by [`Writes`], keyed, but declared a read ([`Reads`]) or an HTTP `GET`, `HEAD`, `OPTIONS`, `TRACE` | passed through untouched; counted ([`KEYED_PASSTHROUGH_TOTAL`](metrics::KEYED_PASSTHROUGH_TOTAL)) and logged at `DEBUG` |
//! | not listed by [`Writes`], keyed: a key declares a write | deduplicated, as every write below |
//! | no tenant ([`TenantSource`]: a [`Tenant`] extension by default, set by a layer *outside* this one such as [`SetTenantLayer`]; a header only by opt-in) | `UNAUTHENTICATED` / 401 |
//! | no key header | `INVALID_ARGUMENT` / 400 |
//! | bad key, repeated header, bad sf-string | `INVALID_ARGUMENT` / 400 |
//! | body over the limit (refused unread, or read only up to the limit) | `INVALID_ARGUMENT` / 413 |
//! | same key, other body | `FAILED_PRECONDITION` / 422 |
//! | same key in flight, engine set to `Reject` | `ABORTED` / 409 + retry-after |
//! | engine full | `RESOURCE_EXHAUSTED` / 429 + retry-after |
//! | otherwise | runs once; duplicates join or replay |
//!
//! Errors name the rule in `grpc-message` (gRPC) or in an RFC 9457 `application/problem+json`
//! body (HTTP), with a machine-readable `idem-reason` header and, where there is one, the
//! retry-after as `grpc-retry-pushback-ms` or `Retry-After`. An oversized body is
//! `INVALID_ARGUMENT` rather than gRPC's usual `RESOURCE_EXHAUSTED`, because no retry can fix it.
//!
//! Stored: successes (gRPC `grpc-status: 0`, HTTP 2xx) and the codes you declare permanent
//! ([`IdemLayerBuilder::store_failures`]). Retryable failures (`UNAVAILABLE`,...) are
//! passed on and never stored, so the client's retry runs again.
//!
//! ## Retry at one layer only
//!
//! Retries multiply across layers. A gateway, an order service and a stock service that each make
//! 3 attempts turn one failing stock call into 3 × 3 × 3 = 27 calls — 3ⁿ for n layers — at the
//! moment the stock database is already failing. So the server layer **never retries**: it calls
//! its inner service at most once per request and reports failures at once. Retry in the
//! outermost client, with [`RetryLayer`], under a shared [`RetryBudget`](idem_retry::RetryBudget).
//!
//! ## Client layer
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_tower::{RetryLayer, Writes};
//! use std::time::Duration;
//!
//! let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051").connect_lazy();
//! let channel = tower::ServiceBuilder::new()
//!     .layer(
//!         RetryLayer::builder()
//!             .writes(Writes::paths(["/shop.v1.Shop/CreateOrder"]))
//!             .call_timeout(Duration::from_secs(2))
//!             .build()?,
//!     )
//!     .service(channel);
//! // let mut shop = ShopClient::new(channel); // the generated tonic client
//! # let _ = channel; Ok(()) }
//! ```
//!
//! It buffers request and response bodies (unary calls), so it can resend the one and read the
//! other's `grpc-status` trailer.
//!
//! ## Where things are
//!
//! | file | what |
//! |---|---|
//! | `server/` | [`IdemLayer`], [`IdemLayerBuilder`], [`IdemService`]: admission, the body limit, the run and what is stored, large responses, the marks on the answer, refusals |
//! | `client/` | [`RetryLayer`], [`RetryLayerBuilder`], [`RetryService`]: keys, one call and its attempts, pushback, [`CallReport`], [`CallFailed`], [`ClientStats`] |
//! | `error.rs` | [`ConfigError`]: settings a layer's builder refused |
//! | `stored.rs`, `body.rs` | [`StoredResponse`], [`ReplayBody`], body types |
//! | `key_header.rs`, `tenant.rs`, `writes.rs` | [`key_from_headers`], [`Tenant`], [`Writes`], [`Reads`] |
//! | `set_tenant.rs` | [`SetTenantLayer`]: the tenant from headers or metadata, outside [`IdemLayer`] |
//! | `decision.rs`, `fingerprint.rs` | [`Deduplicated`]: what was decided; [`request_fingerprint`] |
//! | `protocol.rs`, `reject.rs` | [`Protocol`]: gRPC or HTTP, reading outcomes; rendering errors |
//! | [`headers`], [`metrics`] | header names; metric names |
//! | [`wire`] | the stored-response record, `grpc-timeout`, error responses |
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod client;
mod decision;
mod error;
mod fingerprint;
pub mod headers;
mod key_header;
pub mod metrics;
mod protocol;
mod reject;
mod server;
mod set_tenant;
mod stored;
mod tenant;
pub mod wire;
mod writes;

pub use body::{ReplayBody, RequestBody, ResendableBody, ResponseBody, StreamedBody};
pub use client::{
    AttemptTimedOut, CallFailed, CallReport, ClientStats, MissingKey, RetryFuture, RetryLayer,
    RetryLayerBuilder, RetryService, DEFAULT_CALL_TIMEOUT,
};
pub use decision::Deduplicated;
pub use error::ConfigError;
pub use fingerprint::request_fingerprint;
pub use key_header::key_from_headers;
pub use protocol::Protocol;
pub use server::{
    IdemFuture, IdemLayer, IdemLayerBuilder, IdemService, DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_STORED_BYTES,
};
pub use set_tenant::{SetTenant, SetTenantLayer};
pub use stored::StoredResponse;
pub use tenant::{Tenant, TenantSource};
pub use writes::{Reads, Writes};

/// The boxed error the layers pass around (what tonic and hyper use).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
