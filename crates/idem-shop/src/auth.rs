//! A toy authentication layer: `authorization: Bearer <tenant>` becomes a
//! [`Tenant`] request extension (SPEC T1a). A real one checks a token.

use std::task::{Context, Poll};

use idem_tower::Tenant;
use tower::{Layer, Service};

/// Puts the bearer token's tenant in the request extensions. Requests without one pass on
/// without a tenant (the idem layer then refuses writes with `UNAUTHENTICATED`).
#[derive(Debug, Clone, Copy, Default)]
pub struct BearerTenantLayer;

impl<S> Layer<S> for BearerTenantLayer {
    type Service = BearerTenant<S>;
    fn layer(&self, inner: S) -> BearerTenant<S> {
        BearerTenant { inner }
    }
}

/// The service of [`BearerTenantLayer`].
#[derive(Debug, Clone)]
pub struct BearerTenant<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for BearerTenant<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> S::Future {
        let tenant = req
            .headers()
            .get(::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| Tenant::new(t.trim()));
        if let Some(t) = tenant {
            req.extensions_mut().insert(t);
        }
        self.inner.call(req)
    }
}
