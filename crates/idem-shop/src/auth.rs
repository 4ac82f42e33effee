//! A toy authentication layer: `authorization: Bearer <tenant>` becomes a [`Tenant`] request
//! extension. A real one checks a token.
//!
//! As RFC 9110 says: the scheme name is case-insensitive (`bearer`, `BEARER` work too), and every
//! HTTP 401 that passes back out carries `WWW-Authenticate: Bearer realm="shop"`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use idem_tower::Tenant;
use tower::{Layer, Service};

/// Puts the bearer token's tenant in the request extensions. Requests without one pass on
/// without a tenant (the idem layer then refuses writes with `UNAUTHENTICATED` / 401, to which
/// this layer adds the `WWW-Authenticate` challenge).
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

/// The tenant named by an `authorization` value: `Bearer <tenant>`, the scheme in any case.
pub fn bearer_tenant(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The future of [`BearerTenant`]: the inner response, with the challenge added to a 401.
pub struct Challenged<F> {
    inner: Pin<Box<F>>,
}

impl<F> std::fmt::Debug for Challenged<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Challenged")
    }
}

impl<F, B, E> Future for Challenged<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx).map_ok(|mut resp| {
            if resp.status() == http::StatusCode::UNAUTHORIZED {
                resp.headers_mut()
                    .entry(http::header::WWW_AUTHENTICATE)
                    .or_insert(http::HeaderValue::from_static("Bearer realm=\"shop\""));
            }
            resp
        })
    }
}

impl<S, B, ResB> Service<http::Request<B>> for BearerTenant<S>
where
    S: Service<http::Request<B>, Response = http::Response<ResB>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Challenged<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let tenant = req
            .headers()
            .get(::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_tenant)
            .map(|t| Tenant::new(t.to_owned()));
        if let Some(t) = tenant {
            req.extensions_mut().insert(t);
        }
        Challenged {
            inner: Box::pin(self.inner.call(req)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bearer_tenant;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_tenant("Bearer tenant-1"), Some("tenant-1"));
        assert_eq!(bearer_tenant("bearer tenant-1"), Some("tenant-1"));
        assert_eq!(bearer_tenant("BEARER  tenant-1 "), Some("tenant-1"));
        assert_eq!(bearer_tenant("Basic dXNlcg=="), None);
        assert_eq!(bearer_tenant("Bearer"), None);
        assert_eq!(bearer_tenant("Bearer "), None);
    }
}
