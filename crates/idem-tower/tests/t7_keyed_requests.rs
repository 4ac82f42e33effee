//! T7: a request that carries an idempotency key never passes the server layer silently. With
//! no write rule for its route (the layer built with `IdemLayer::new`, which lists no gRPC
//! method), a keyed gRPC call and a keyed HTTP `POST` are deduplicated all the same: run once,
//! replayed to the retry, refused without a tenant. Real tonic and hyper clients over TCP.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_dedup::Engine;
use idem_shop::faults::StatusFaults;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::{CreateOrderRequest, DeductStockRequest, GetBookRequest};
use idem_shop::{grpc, http as shop_http, Shop};
use idem_tower::{IdemLayer, Reads, Writes};
use tonic::transport::Channel;

const KEY: &str = "charge-5d2e8a61-0001";

fn order(
    intent: &str,
    key: Option<&str>,
    tenant: Option<&str>,
) -> tonic::Request<CreateOrderRequest> {
    let mut r = tonic::Request::new(CreateOrderRequest {
        intent_id: intent.into(),
        sku: "book-42".into(),
        quantity: 1,
    });
    if let Some(k) = key {
        r.metadata_mut()
            .insert("x-idempotency-key", k.parse().unwrap());
    }
    if let Some(t) = tenant {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    r
}

async fn grpc_client(addr: SocketAddr) -> ShopClient<Channel> {
    ShopClient::connect(format!("http://{addr}")).await.unwrap()
}

/// The layer as the README once showed it: `IdemLayer::new(engine)`, no `.writes(...)`.
#[tokio::test]
async fn t7_keyed_grpc_call_without_a_write_rule_runs_once_and_replays() {
    let engine = Engine::builder().build().unwrap();
    let server = grpc::serve_with(Shop::new(), engine, StatusFaults::default(), |e| {
        IdemLayer::new(e.clone())
    })
    .await
    .unwrap();
    let mut client = grpc_client(server.addr).await;

    let first = client
        .create_order(order("intent-1", Some(KEY), Some("t-1")))
        .await
        .unwrap();
    let retry = client
        .create_order(order("intent-1", Some(KEY), Some("t-1")))
        .await
        .unwrap();
    assert_eq!(first.get_ref(), retry.get_ref());
    assert!(first.metadata().get("idempotent-replayed").is_none());
    assert_eq!(retry.metadata().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(server.shop.orders_for("intent-1").len(), 1, "charged once");

    // Another keyed method, DeductStock: once per key too (a second run would fail its
    // version check, a replay answers as the first did).
    let version = client
        .get_book(GetBookRequest {
            sku: "book-42".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .stock_version;
    let deduct = || {
        let mut r = tonic::Request::new(DeductStockRequest {
            sku: "book-42".into(),
            quantity: 1,
            expected_version: version,
            intent_id: String::new(),
        });
        r.metadata_mut()
            .insert("x-idempotency-key", "deduct-key-0001".parse().unwrap());
        r.metadata_mut()
            .insert("authorization", "Bearer t-1".parse().unwrap());
        r
    };
    let first = client.deduct_stock(deduct()).await.unwrap();
    let retry = client.deduct_stock(deduct()).await.unwrap();
    assert_eq!(first.get_ref(), retry.get_ref());
    assert_eq!(retry.metadata().get("idempotent-replayed").unwrap(), "true");

    // A keyed call without a tenant is refused, not passed through.
    let e = client
        .create_order(order("intent-2", Some(KEY), None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    assert_eq!(e.metadata().get("idem-reason").unwrap(), "MISSING_TENANT");
    // A malformed key is refused too: the client meant one.
    let e = client
        .create_order(order("intent-2", Some("short"), Some("t-1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert_eq!(server.shop.orders_for("intent-2").len(), 0);

    // Without a key there is no declared intent and no write rule: a pass-through.
    for _ in 0..2 {
        client
            .create_order(order("intent-3", None, None))
            .await
            .unwrap();
    }
    assert_eq!(server.shop.orders_for("intent-3").len(), 2);
}

/// HTTP: a keyed `POST` that the write rule does not list is deduplicated all the same.
#[tokio::test]
async fn t7_keyed_http_post_off_the_write_rule_runs_once_and_replays() {
    let shop = Shop::new();
    let layer = IdemLayer::builder(Engine::builder().build().unwrap())
        .writes(Writes::routes([(Method::PUT, "/carts")]))
        .build()
        .unwrap();
    let addr = shop_http::serve_with(shop.clone(), layer).await.unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let post = |key: &'static str| {
        let req = http::Request::post(format!("http://{addr}/orders"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("authorization", "Bearer t-1")
            .header("idempotency-key", key)
            .body(Full::new(Bytes::from_static(
                b"intent_id=intent-h&sku=book-42&quantity=1",
            )))
            .unwrap();
        let client = client.clone();
        async move {
            let resp = client.request(req).await.unwrap();
            let (parts, body) = resp.into_parts();
            (parts, body.collect().await.unwrap().to_bytes())
        }
    };
    let (first, first_body) = post(KEY).await;
    let (retry, retry_body) = post(KEY).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(retry.status, StatusCode::CREATED);
    assert_eq!(first_body, retry_body);
    assert!(first.headers.get("idempotent-replayed").is_none());
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    assert_eq!(shop.orders_for("intent-h").len(), 1, "ordered once");
}

/// The opt-out: `Reads::all()` lets keyed requests off the write rule through, as before; they
/// then run on every retry (and are counted; see `t7_keyed_passthrough_metrics.rs`).
#[tokio::test]
async fn t7_declared_reads_let_keyed_calls_through_unduplicated() {
    let engine = Engine::builder().build().unwrap();
    let server = grpc::serve_with(Shop::new(), engine, StatusFaults::default(), |e| {
        IdemLayer::builder(e.clone())
            .reads(Reads::all())
            .build()
            .unwrap()
    })
    .await
    .unwrap();
    let mut client = grpc_client(server.addr).await;
    for _ in 0..2 {
        let r = client
            .create_order(order("intent-r", Some(KEY), None))
            .await
            .unwrap();
        assert!(r.metadata().get("idempotent-replayed").is_none());
    }
    assert_eq!(server.shop.orders_for("intent-r").len(), 2);
}
