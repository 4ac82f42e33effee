//! [`SetTenantLayer`]: the tenant from a request's headers (gRPC metadata), set *outside* the
//! server layer.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::Request;
use tower::{Layer, Service};

use crate::Tenant;

/// A tower [`Layer`] that puts a [`Tenant`] in each request's extensions, found by your closure
/// in the request's head: its headers (on gRPC, the call's metadata), URI and extensions (where a
/// TLS server puts the peer's certificates). Place it **outside** [`IdemLayer`](crate::IdemLayer),
/// so the idem layer finds the tenant when it runs.
///
/// # Why the order matters
///
/// The idem layer reads the tenant when the request reaches it, before anything inside it runs.
/// With tonic, `Server::builder().layer(a).layer(b)` runs `a` first, then `b`, then the
/// service; so the layer that sets the tenant must be added before the idem layer. tonic's
/// natural place for authentication, `PaymentsServer::with_interceptor(service, check)`, wraps
/// the service itself: it runs *inside* the idem layer, after the layer has already refused the
/// write (`UNAUTHENTICATED`, reason `MISSING_TENANT`), so the interceptor never sees it. Move the
/// check into this layer, or into tonic's own `tonic::service::InterceptorLayer` added before
/// the idem layer, whose interceptor inserts the `Tenant` into the request's extensions.
///
/// A request for which the closure returns `None` goes on without a tenant: the idem layer
/// refuses it if it is a write, and reads pass. A tenant the closure returns replaces one already
/// there.
///
/// # Examples
///
/// A tonic server whose bearer token names the tenant (a real one checks the token):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use idem_dedup::Engine;
/// use idem_shop::pb::shop_client::ShopClient; // your generated tonic client ...
/// use idem_shop::pb::shop_server::ShopServer; // ... and server
/// use idem_shop::pb::CreateOrderRequest;
/// use idem_tower::{IdemLayer, SetTenantLayer, StoredResponse, Tenant, Writes};
///
/// let tenant_layer = SetTenantLayer::new(|req: &http::request::Parts| {
///     let token = req.headers.get("authorization")?.to_str().ok()?;
///     Some(Tenant::new(token.strip_prefix("Bearer ")?.to_owned()))
/// });
/// let idem_layer = IdemLayer::builder(Engine::<StoredResponse>::builder().build()?)
///     .writes(Writes::paths(["/shop.v1.Shop/CreateOrder"]))
///     .build()?;
///
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let addr = listener.local_addr()?;
/// let shop = idem_shop::Shop::new();
/// let server = tonic::transport::Server::builder()
///     .layer(tenant_layer) // outer: runs first, sets the tenant
///     .layer(idem_layer) // inner: finds it
///     .add_service(ShopServer::new(shop.clone()))
///     .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
/// let server = tokio::spawn(server);
///
/// let mut client = ShopClient::connect(format!("http://{addr}")).await?;
/// let order = || {
///     let mut req = tonic::Request::new(CreateOrderRequest {
///         intent_id: "intent-1".into(),
///         sku: "book-42".into(),
///         quantity: 1,
///     });
///     req.metadata_mut().insert("authorization", "Bearer tenant-0042".parse().unwrap());
///     req.metadata_mut().insert("x-idempotency-key", "order-key-0001".parse().unwrap());
///     req
/// };
/// let first = client.create_order(order()).await?;
/// let retry = client.create_order(order()).await?;
/// assert_eq!(retry.metadata().get("idempotent-replayed").unwrap(), "true");
/// assert_eq!(first.get_ref(), retry.get_ref());
/// assert_eq!(shop.orders_for("intent-1").len(), 1); // one order
/// # server.abort();
/// # Ok(()) }
/// ```
pub struct SetTenantLayer<F> {
    find: Arc<F>,
}

impl<F> SetTenantLayer<F>
where
    F: Fn(&Parts) -> Option<Tenant> + Send + Sync + 'static,
{
    /// A layer that sets the tenant `find` returns for a request's head.
    pub fn new(find: F) -> Self {
        SetTenantLayer {
            find: Arc::new(find),
        }
    }
}

impl<F> Clone for SetTenantLayer<F> {
    fn clone(&self) -> Self {
        SetTenantLayer {
            find: Arc::clone(&self.find),
        }
    }
}

impl<F> fmt::Debug for SetTenantLayer<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SetTenantLayer")
    }
}

impl<S, F> Layer<S> for SetTenantLayer<F> {
    type Service = SetTenant<S, F>;

    fn layer(&self, inner: S) -> SetTenant<S, F> {
        SetTenant {
            inner,
            find: Arc::clone(&self.find),
        }
    }
}

/// The service of [`SetTenantLayer`].
pub struct SetTenant<S, F> {
    inner: S,
    find: Arc<F>,
}

impl<S: Clone, F> Clone for SetTenant<S, F> {
    fn clone(&self) -> Self {
        SetTenant {
            inner: self.inner.clone(),
            find: Arc::clone(&self.find),
        }
    }
}

impl<S: fmt::Debug, F> fmt::Debug for SetTenant<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetTenant")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, F, B> Service<Request<B>> for SetTenant<S, F>
where
    S: Service<Request<B>>,
    F: Fn(&Parts) -> Option<Tenant>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> S::Future {
        let (mut parts, body) = req.into_parts();
        if let Some(tenant) = (self.find)(&parts) {
            parts.extensions.insert(tenant);
        }
        self.inner.call(Request::from_parts(parts, body))
    }
}
