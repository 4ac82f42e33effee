//! The server layer and its builder.

use std::sync::Arc;

use http::HeaderName;
use idem_core::CodeSet;
use idem_dedup::{Deduplicator, Engine};
use tower::Layer;

use crate::server::IdemService;
use crate::{headers, StoredResponse, TenantSource, Writes};

/// Default limit on a write's request body: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

#[derive(Debug)]
pub(crate) struct ServerConfig {
    pub(crate) writes: Writes,
    pub(crate) grpc_key: HeaderName,
    pub(crate) http_key: HeaderName,
    pub(crate) tenant: TenantSource,
    pub(crate) max_body_bytes: usize,
    pub(crate) store_codes: CodeSet,
}

/// A tower [`Layer`] that deduplicates writes through any [`Deduplicator`] (T1, T2, T5): an idem
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
/// | setting | default | SPEC |
/// |---|---|---|
/// | [`writes`](IdemLayerBuilder::writes) | HTTP `POST`/`PATCH`; no gRPC method ([`Writes`]) | T1 |
/// | [`grpc_key_header`](IdemLayerBuilder::grpc_key_header) | `x-idempotency-key` | T1 |
/// | [`http_key_header`](IdemLayerBuilder::http_key_header) | `idempotency-key` | T1, T2 |
/// | [`tenant`](IdemLayerBuilder::tenant) | the [`Tenant`](crate::Tenant) request extension | T1a |
/// | [`max_body_bytes`](IdemLayerBuilder::max_body_bytes) | 1 MiB | T2 |
/// | [`store_failures`](IdemLayerBuilder::store_failures) | none: only successes are stored | E3, E13 |
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_core::{Code, CodeSet};
/// use idem_dedup::Engine;
/// use idem_tower::{IdemLayer, StoredResponse, TenantSource, Writes};
///
/// let engine = Engine::<StoredResponse>::builder().build()?;
/// let layer = IdemLayer::builder(engine)
///     .writes(Writes::paths(["/shop.v1.Shop/CreateOrder", "/shop.v1.Shop/DeductStock"]))
///     .tenant(TenantSource::Header(idem_tower::headers::TENANT)) // behind a trusted gateway only
///     .store_failures(CodeSet::EMPTY.with(Code::FailedPrecondition))
///     .build();
/// // tonic::transport::Server::builder().layer(layer).add_service(...)
/// # let _ = layer;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct IdemLayer<D = Engine<StoredResponse>> {
    engine: D,
    cfg: Arc<ServerConfig>,
}

impl<D: Deduplicator<Value = StoredResponse>> IdemLayer<D> {
    /// A layer over `engine` with every default.
    pub fn new(engine: D) -> Self {
        IdemLayer::builder(engine).build()
    }

    /// A builder over `engine`.
    pub fn builder(engine: D) -> IdemLayerBuilder<D> {
        IdemLayerBuilder {
            engine,
            cfg: ServerConfig {
                writes: Writes::default(),
                grpc_key: headers::GRPC_KEY,
                http_key: headers::HTTP_KEY,
                tenant: TenantSource::Extension,
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                store_codes: CodeSet::EMPTY,
            },
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
pub struct IdemLayerBuilder<D = Engine<StoredResponse>> {
    engine: D,
    cfg: ServerConfig,
}

impl<D> IdemLayerBuilder<D> {
    /// Which requests are writes (deduplicated); the others pass through untouched.
    pub fn writes(mut self, writes: Writes) -> Self {
        self.cfg.writes = writes;
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

    /// Where the tenant comes from (SPEC T1a). Default: the [`Tenant`](crate::Tenant) extension.
    pub fn tenant(mut self, source: TenantSource) -> Self {
        self.cfg.tenant = source;
        self
    }

    /// Largest write body accepted; larger ones are refused without being buffered (SPEC T2).
    /// Default: 1 MiB.
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.cfg.max_body_bytes = n;
        self
    }

    /// Failures to store and replay like successes: permanent, deterministic codes such as
    /// `FAILED_PRECONDITION` (SPEC E13). Retryable codes (`UNAVAILABLE`, ...) are never stored,
    /// whatever this says, so a retry runs again. Default: none.
    pub fn store_failures(mut self, codes: CodeSet) -> Self {
        self.cfg.store_codes = codes
            .without(idem_core::Code::Unavailable)
            .without(idem_core::Code::ResourceExhausted)
            .without(idem_core::Code::DeadlineExceeded)
            .without(idem_core::Code::Aborted);
        self
    }

    /// The layer.
    pub fn build(self) -> IdemLayer<D> {
        IdemLayer {
            engine: self.engine,
            cfg: Arc::new(self.cfg),
        }
    }
}
