//! T1a with tonic: the tenant must be on the request before the idem layer runs. A
//! `SetTenantLayer` (or tonic's own `InterceptorLayer`) added before `IdemLayer` does that; an
//! interceptor on the service (`ShopServer::with_interceptor`) runs inside the idem layer, too
//! late, and the refusal says what is wrong. Real tonic servers and clients over TCP.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use idem_dedup::Engine;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::shop_server::ShopServer;
use idem_shop::pb::CreateOrderRequest;
use idem_shop::{Shop, WRITES};
use idem_tower::{IdemLayer, SetTenantLayer, StoredResponse, Tenant, Writes};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};

const KEY: &str = "order-key-6b1d0e44";

fn idem_layer() -> IdemLayer {
    IdemLayer::builder(Engine::<StoredResponse>::builder().build().unwrap())
        .writes(Writes::paths(WRITES))
        .build()
        .unwrap()
}

/// The tenant named by an `authorization: Bearer <tenant>` value (a real check verifies a
/// token).
fn bearer(value: Option<&str>) -> Option<Tenant> {
    Some(Tenant::new(value?.strip_prefix("Bearer ")?.to_owned()))
}

fn order(intent: &str, tenant: &str) -> tonic::Request<CreateOrderRequest> {
    let mut r = tonic::Request::new(CreateOrderRequest {
        intent_id: intent.into(),
        sku: "book-42".into(),
        quantity: 1,
    });
    r.metadata_mut()
        .insert("x-idempotency-key", KEY.parse().unwrap());
    r.metadata_mut()
        .insert("authorization", format!("Bearer {tenant}").parse().unwrap());
    r
}

async fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

async fn client(addr: SocketAddr) -> ShopClient<Channel> {
    ShopClient::connect(format!("http://{addr}")).await.unwrap()
}

/// Runs once per (tenant, key), replays to the retry, and keeps tenants apart.
async fn assert_deduplicated_per_tenant(addr: SocketAddr, shop: &Shop) {
    let mut client = client(addr).await;
    let first = client.create_order(order("intent-1", "t-1")).await.unwrap();
    let retry = client.create_order(order("intent-1", "t-1")).await.unwrap();
    assert_eq!(first.get_ref(), retry.get_ref());
    assert_eq!(retry.metadata().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(shop.orders_for("intent-1").len(), 1);
    // The same key under another tenant is another scope.
    let other = client.create_order(order("intent-1", "t-2")).await.unwrap();
    assert!(other.metadata().get("idempotent-replayed").is_none());
    assert_eq!(shop.orders_for("intent-1").len(), 2);
}

#[tokio::test]
async fn t1a_set_tenant_layer_before_the_idem_layer_gives_tonic_writes_their_tenant() {
    let (listener, addr) = listen().await;
    let shop = Shop::new();
    let server: JoinHandle<_> = tokio::spawn(
        Server::builder()
            .layer(SetTenantLayer::new(|req: &http::request::Parts| {
                bearer(req.headers.get("authorization")?.to_str().ok())
            }))
            .layer(idem_layer())
            .add_service(ShopServer::new(shop.clone()))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    assert_deduplicated_per_tenant(addr, &shop).await;
    server.abort();
}

#[tokio::test]
async fn t1a_tonic_interceptor_layer_before_the_idem_layer_sets_the_tenant_too() {
    let (listener, addr) = listen().await;
    let shop = Shop::new();
    let auth = |mut req: tonic::Request<()>| {
        let tenant = bearer(
            req.metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok()),
        );
        if let Some(t) = tenant {
            req.extensions_mut().insert(t);
        }
        Ok(req)
    };
    let server: JoinHandle<_> = tokio::spawn(
        Server::builder()
            .layer(tonic::service::InterceptorLayer::new(auth))
            .layer(idem_layer())
            .add_service(ShopServer::new(shop.clone()))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    assert_deduplicated_per_tenant(addr, &shop).await;
    server.abort();
}

#[tokio::test]
async fn t1a_interceptor_on_the_service_runs_too_late_and_the_refusal_names_tenant_and_order() {
    let (listener, addr) = listen().await;
    let shop = Shop::new();
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let auth = move |mut req: tonic::Request<()>| {
        seen.fetch_add(1, Ordering::SeqCst);
        let tenant = bearer(
            req.metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok()),
        );
        if let Some(t) = tenant {
            req.extensions_mut().insert(t);
        }
        Ok(req)
    };
    let server: JoinHandle<_> = tokio::spawn(
        Server::builder()
            .layer(idem_layer())
            .add_service(ShopServer::with_interceptor(shop.clone(), auth))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let mut client = client(addr).await;
    let e = client
        .create_order(order("intent-1", "t-1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    assert_eq!(e.metadata().get("idem-reason").unwrap(), "MISSING_TENANT");
    for needle in [
        "`Tenant`",
        "request's extensions",
        "before the idempotency layer ran",
        "a layer outside the idempotency layer",
        "interceptor on the service runs inside it",
    ] {
        assert!(
            e.message().contains(needle),
            "{needle:?} in {:?}",
            e.message()
        );
    }
    // The interceptor never saw the write: the idem layer, outside it, answered first.
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(shop.orders_for("intent-1").len(), 0);
    server.abort();
}
