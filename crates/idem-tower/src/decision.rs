//! [`Deduplicated`]: what the server layer decided for a write, where handlers and outer layers
//! find it (a response extension).

use idem_core::Scope;
use idem_dedup::remote::FencingToken;
use idem_dedup::{DedupError, Outcome, OutcomeKind, Source};

use crate::StoredResponse;

/// What [`IdemService`](crate::IdemService) decided for one write, added to the extensions of
/// every response it answers a write with (outer layers — logging, metrics — read it there). The
/// inner service itself finds the [`Scope`] in the *request's* extensions.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idem_tower::BoxError> {
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use idem_dedup::{Engine, OutcomeKind};
/// use idem_tower::{Deduplicated, IdemLayer, RequestBody, StoredResponse, Tenant};
/// use tower::{Layer, ServiceExt};
///
/// let handler = tower::service_fn(|req: http::Request<RequestBody<Full<Bytes>>>| async move {
///     let scope = req.extensions().get::<idem_core::Scope>().cloned().unwrap();
///     let body = format!("created for {}", scope.tenant());
///     Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(body))))
/// });
/// let service = IdemLayer::new(Engine::<StoredResponse>::builder().build()?).layer(handler);
/// let mut req = http::Request::post("/orders")
///     .header("Idempotency-Key", "order-0000-0001")
///     .body(Full::new(Bytes::from_static(b"{}")))?;
/// req.extensions_mut().insert(Tenant::new("tenant-1"));
/// let resp = service.oneshot(req).await?;
/// let decided = resp.extensions().get::<Deduplicated>().unwrap();
/// assert_eq!(decided.kind(), Some(OutcomeKind::Executed));
/// assert_eq!(decided.scope().tenant(), "tenant-1");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Deduplicated {
    scope: Scope,
    kind: Option<OutcomeKind>,
    source: Option<Source>,
    fencing_token: Option<FencingToken>,
    recorded: bool,
}

impl Deduplicated {
    pub(crate) fn new(scope: Scope, result: &Result<Outcome<StoredResponse>, DedupError>) -> Self {
        match result {
            Ok(o) => Deduplicated {
                scope,
                kind: Some(o.kind()),
                source: Some(o.source()),
                fencing_token: o.fencing_token(),
                recorded: o.is_recorded(),
            },
            Err(_) => Deduplicated {
                scope,
                kind: None,
                source: None,
                fencing_token: None,
                recorded: false,
            },
        }
    }

    /// The write's scope (tenant, method, key).
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Executed, joined or replayed; `None` when the write got an error (refused, or the inner
    /// service's failure, which is not stored).
    pub fn kind(&self) -> Option<OutcomeKind> {
        self.kind
    }

    /// Where the response was produced (this engine, this or another instance of a shared tier,
    /// or a fail-open run); `None` on an error.
    pub fn source(&self) -> Option<Source> {
        self.source
    }

    /// The fencing token of the run that produced the response, when it ran here under a claim
    /// of a shared tier.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fencing_token
    }

    /// Whether the response is recorded where every instance finds it (always, without a shared
    /// tier; see [`Outcome::is_recorded`]).
    pub fn is_recorded(&self) -> bool {
        self.recorded
    }
}
