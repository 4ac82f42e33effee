//! The server layer and its builder.

use std::sync::Arc;

use http::HeaderName;
use idem_core::{Code, CodeSet};
use idem_dedup::{Deduplicator, Engine};
use tower::Layer;

use crate::server::IdemService;
use crate::{headers, ConfigError, Protocol, Reads, StoredResponse, TenantSource, Writes};

/// Default limit on a write's request body: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Default limit on the bytes of a response the layer stores (body, headers and trailers): 1 MiB.
pub const DEFAULT_MAX_STORED_BYTES: usize = 1024 * 1024;

#[derive(Debug)]
pub(crate) struct ServerConfig {
    pub(crate) writes: Writes,
    pub(crate) reads: Reads,
    pub(crate) grpc_key: HeaderName,
    pub(crate) http_key: HeaderName,
    pub(crate) tenant: TenantSource,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_stored_bytes: usize,
    pub(crate) store_codes: CodeSet,
    pub(crate) fingerprint_headers: Vec<HeaderName>,
}

/// A tower [`Layer`] that deduplicates writes through any [`Deduplicator`]: an idem
/// [`Engine`] in one process, or a [`TieredEngine`](idem_dedup::tiered::TieredEngine) over Redis
/// or PostgreSQL when several instances share the record.
///
/// Wrap a tonic server (`Server::builder().layer(..)`) or an axum router (`Router::layer(..)`);
/// see [`IdemService`] for what happens to each request. Over a shared tier, responses cross it
/// through `BytesCodec`, which this crate teaches to encode [`StoredResponse`]s
/// ([`StoredResponse::encode`]).
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | [`writes`](IdemLayerBuilder::writes) | HTTP `POST`/`PATCH`; no gRPC method is listed, but every keyed request is a write ([`Writes`]) |
/// | [`reads`](IdemLayerBuilder::reads) | none: keyed requests pass through only on HTTP `GET`, `HEAD`, `OPTIONS`, `TRACE`, counted ([`Reads`]) |
/// | [`grpc_key_header`](IdemLayerBuilder::grpc_key_header) | `x-idempotency-key` |
/// | [`http_key_header`](IdemLayerBuilder::http_key_header) | `idempotency-key` |
/// | [`tenant`](IdemLayerBuilder::tenant) | the [`Tenant`](crate::Tenant) request extension |
/// | [`max_body_bytes`](IdemLayerBuilder::max_body_bytes) | 1 MiB |
/// | [`max_stored_bytes`](IdemLayerBuilder::max_stored_bytes) | 1 MiB |
/// | [`fingerprint_headers`](IdemLayerBuilder::fingerprint_headers) | none: method, path and query, body |
/// | [`store_failures`](IdemLayerBuilder::store_failures) | none: only successes are stored |
///
/// # Examples
///
/// An axum service: the authentication layer puts the tenant on the request, the idem layer
/// runs each `POST` once per (tenant, path, key), the handler creates the order:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use axum::{extract::Request, middleware::Next, response::Response, routing::post, Router};
/// use http_body_util::BodyExt;
/// use idem_dedup::Engine;
/// use idem_tower::{IdemLayer, StoredResponse, Tenant};
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use tower::ServiceExt;
///
/// // Your authentication: here, the bearer token names the tenant.
/// async fn auth(mut req: Request, next: Next) -> Result<Response, http::StatusCode> {
///     let token = req.headers().get("authorization").and_then(|v| v.to_str().ok());
///     let tenant = token.and_then(|t| t.strip_prefix("Bearer ")).ok_or(http::StatusCode::UNAUTHORIZED)?;
///     let tenant = Tenant::new(tenant.to_owned());
///     req.extensions_mut().insert(tenant);
///     Ok(next.run(req).await)
/// }
///
/// let orders = Arc::new(AtomicU64::new(1000));
/// let create = post(move || {
///     let n = orders.fetch_add(1, Ordering::SeqCst); // the side effect
///     async move { format!("order-{n}") }
/// });
/// let engine = Engine::<StoredResponse>::builder().build()?;
/// let app = Router::new()
///     .route("/orders", create)
///     .layer(IdemLayer::new(engine)) // inner: runs after auth
///     .layer(axum::middleware::from_fn(auth)); // outer: runs first
///
/// let request = || {
///     http::Request::post("/orders")
///         .header("authorization", "Bearer tenant-0042")
///         .header("idempotency-key", "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10")
///         .body(axum::body::Body::from("{\"sku\":\"book-42\"}"))
///         .unwrap()
/// };
/// let first = app.clone().oneshot(request()).await?;
/// let retry = app.clone().oneshot(request()).await?;
/// assert_eq!(retry.headers()["idempotent-replayed"], "true");
/// assert_eq!(first.into_body().collect().await?.to_bytes(), "order-1000");
/// assert_eq!(retry.into_body().collect().await?.to_bytes(), "order-1000"); // not order-1001
/// # Ok(()) }
/// ```
///
/// On tonic the same order holds: the layer that sets the tenant is added to
/// `Server::builder()` before this one, so it runs first. An interceptor on the generated server
/// (`ShopServer::with_interceptor`) wraps the service, inside this layer, and runs too late; see
/// [`SetTenantLayer`](crate::SetTenantLayer), which sets the tenant from the call's metadata.
///
/// A gRPC server with more settings:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_core::{Code, CodeSet};
/// use idem_dedup::Engine;
/// use idem_tower::{IdemLayer, Reads, StoredResponse, TenantSource, Writes};
///
/// let engine = Engine::<StoredResponse>::builder().build()?;
/// let layer = IdemLayer::builder(engine)
///     // Listed or not, a call that carries a key is deduplicated; listing the writes also
///     // refuses a listed call sent without one.
///     .writes(Writes::paths(["/shop.v1.Shop/CreateOrder", "/shop.v1.Shop/DeductStock"]))
///     .reads(Reads::paths(["/shop.v1.Shop/GetBook"])) // a key there is ignored (counted)
///     .tenant(TenantSource::Header(idem_tower::headers::TENANT)) // behind a trusted gateway only
///     .store_failures(CodeSet::EMPTY.with(Code::FailedPrecondition))
///     .build()?;
/// // tonic::transport::Server::builder().layer(layer).add_service(...)
/// # let _ = layer;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct IdemLayer<D = Engine<StoredResponse>> {
    engine: D,
    cfg: Arc<ServerConfig>,
}

impl<D: Deduplicator<Value = StoredResponse>> IdemLayer<D> {
    /// A layer over `engine` with every default.
    pub fn new(engine: D) -> Self {
        IdemLayer {
            engine,
            cfg: Arc::new(ServerConfig::default()),
        }
    }

    /// A builder over `engine`.
    pub fn builder(engine: D) -> IdemLayerBuilder<D> {
        IdemLayerBuilder {
            engine,
            cfg: ServerConfig::default(),
        }
    }

    /// The deduplicator.
    pub fn engine(&self) -> &D {
        &self.engine
    }
}

impl<S, D: Clone> Layer<S> for IdemLayer<D> {
    type Service = IdemService<S, D>;

    fn layer(&self, inner: S) -> IdemService<S, D> {
        IdemService::new(inner, self.engine.clone(), self.cfg.clone())
    }
}

/// Builds an [`IdemLayer`]; every setting has a default (see [`IdemLayer`]).
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct IdemLayerBuilder<D = Engine<StoredResponse>> {
    engine: D,
    cfg: ServerConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            writes: Writes::default(),
            reads: Reads::none(),
            grpc_key: headers::GRPC_KEY,
            http_key: headers::HTTP_KEY,
            tenant: TenantSource::Extension,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_stored_bytes: DEFAULT_MAX_STORED_BYTES,
            store_codes: CodeSet::EMPTY,
            fingerprint_headers: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// The key header of `protocol`'s requests.
    pub(crate) fn key_header(&self, protocol: Protocol) -> &HeaderName {
        match protocol {
            Protocol::Grpc => &self.grpc_key,
            Protocol::Http => &self.http_key,
        }
    }
}

impl<D> IdemLayerBuilder<D> {
    /// Which requests are writes (deduplicated). A request it does not list is a write all the
    /// same when it carries the idempotency key header, unless [`reads`](Self::reads) declares
    /// it a read; the others pass through untouched. Default: HTTP `POST` and `PATCH`.
    pub fn writes(mut self, writes: Writes) -> Self {
        self.cfg.writes = writes;
        self
    }

    /// Requests passed through as reads even when they carry an idempotency key: counted in
    /// [`KEYED_PASSTHROUGH_TOTAL`](crate::metrics::KEYED_PASSTHROUGH_TOTAL) and logged at `DEBUG`, never
    /// deduplicated (see [`Reads`]). The [`writes`](Self::writes) rule comes first. HTTP's safe
    /// methods (`GET`, `HEAD`, `OPTIONS`, `TRACE`) are always reads. Default:
    /// [`Reads::none`], so every keyed request is deduplicated.
    pub fn reads(mut self, reads: Reads) -> Self {
        self.cfg.reads = reads;
        self
    }

    /// The key header on gRPC routes. Default: `x-idempotency-key`.
    pub fn grpc_key_header(mut self, name: HeaderName) -> Self {
        self.cfg.grpc_key = name;
        self
    }

    /// The key header on HTTP routes. Default: `idempotency-key`.
    pub fn http_key_header(mut self, name: HeaderName) -> Self {
        self.cfg.http_key = name;
        self
    }

    /// Where the tenant comes from. Default: the [`Tenant`](crate::Tenant) extension.
    pub fn tenant(mut self, source: TenantSource) -> Self {
        self.cfg.tenant = source;
        self
    }

    /// Largest write body accepted; larger ones are refused without being buffered.
    /// Default: 1 MiB.
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.cfg.max_body_bytes = n;
        self
    }

    /// Failures to store and replay like successes: permanent, deterministic codes such as
    /// `FAILED_PRECONDITION`. Retryable codes (`UNAVAILABLE`, `RESOURCE_EXHAUSTED`,
    /// `DEADLINE_EXCEEDED`, `ABORTED`) and `OK` are refused by [`build`](Self::build). Default:
    /// none.
    pub fn store_failures(mut self, codes: CodeSet) -> Self {
        self.cfg.store_codes = codes;
        self
    }

    /// Largest stored response (body, headers and trailers). A larger response goes to the
    /// caller that ran the request, streamed as the handler sends it (the layer buffers at most
    /// this much of it), and in its place the layer stores a compact record: duplicates get
    /// `ALREADY_EXISTS` / HTTP 409 with reason `RESPONSE_NOT_STORED`, saying the request ran once
    /// and its response was too large to keep, with the original `Location` header if it had
    /// one. So the handler never runs twice for the key. Default: 1 MiB.
    pub fn max_stored_bytes(mut self, n: usize) -> Self {
        self.cfg.max_stored_bytes = n;
        self
    }

    /// Request headers that are part of the request fingerprint, besides the method, the path
    /// and query, and the body (see [`request_fingerprint`](crate::request_fingerprint)):
    /// the same key sent with another value of one of them is a conflict. Default: none.
    pub fn fingerprint_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.cfg.fingerprint_headers = names.into_iter().collect();
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the rule: a retryable code or `OK` in
    /// [`store_failures`](Self::store_failures), a zero body or stored-bytes limit.
    pub fn build(self) -> Result<IdemLayer<D>, ConfigError> {
        if self.cfg.store_codes.intersects(CodeSet::RETRYABLE) {
            return Err(ConfigError::Invalid(
                "store_failures must not contain a retryable code (UNAVAILABLE, \
                 RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ABORTED): the client's retry would get \
                 the stored failure instead of running again",
            ));
        }
        if self.cfg.store_codes.contains(Code::Ok) {
            return Err(ConfigError::Invalid(
                "store_failures must not contain OK: successes are always stored",
            ));
        }
        if self.cfg.max_body_bytes == 0 || self.cfg.max_stored_bytes == 0 {
            return Err(ConfigError::Invalid(
                "max_body_bytes and max_stored_bytes must be greater than zero",
            ));
        }
        Ok(IdemLayer {
            engine: self.engine,
            cfg: Arc::new(self.cfg),
        })
    }
}
