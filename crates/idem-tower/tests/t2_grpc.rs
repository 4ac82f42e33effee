//! T1, T1a, T2 over gRPC: the shop behind the idem layer on a loopback port, called with tonic's
//! own client over TCP.

use std::time::Duration;

use idem_dedup::{Engine, InFlightPolicy};
use idem_shop::faults::StatusFaults;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::{CreateOrderRequest, GetBookRequest};
use idem_shop::{grpc, Shop, WRITES};
use idem_tower::{IdemLayer, StoredResponse, Writes};
use tonic::transport::Channel;
use tonic::{Code, Request};

const KEY: &str = "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10";

async fn start(
    shop: Shop,
    engine: Engine<StoredResponse>,
    layer: impl FnOnce(&Engine<StoredResponse>) -> IdemLayer,
) -> (grpc::RunningGrpc, ShopClient<Channel>) {
    let server = grpc::serve_with(shop, engine, StatusFaults::default(), layer)
        .await
        .unwrap();
    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (server, ShopClient::new(channel))
}

fn default_layer(e: &Engine<StoredResponse>) -> IdemLayer {
    grpc::idem_layer(e)
}

fn order(
    intent: &str,
    qty: u32,
    key: Option<&str>,
    tenant: Option<&str>,
) -> Request<CreateOrderRequest> {
    let mut r = Request::new(CreateOrderRequest {
        intent_id: intent.into(),
        sku: "book-42".into(),
        quantity: qty,
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

#[tokio::test]
async fn t1_grpc_write_runs_once_and_replays_with_marks() {
    let engine = Engine::builder().build().unwrap();
    let (server, mut client) = start(Shop::new(), engine, default_layer).await;
    let first = client
        .create_order(order("i-1", 1, Some(KEY), Some("t-1")))
        .await
        .unwrap();
    let again = client
        .create_order(order("i-1", 1, Some(KEY), Some("t-1")))
        .await
        .unwrap();
    assert_eq!(first.get_ref(), again.get_ref());
    assert!(first.metadata().get("idempotent-replayed").is_none());
    assert_eq!(again.metadata().get("idempotent-replayed").unwrap(), "true");
    assert!(again.metadata().get("idempotent-expires-at").is_some());
    assert_eq!(server.shop.orders_for("i-1").len(), 1);

    // T1a: the same key under another tenant is another scope.
    let other = client
        .create_order(order("i-1", 1, Some(KEY), Some("t-2")))
        .await
        .unwrap();
    assert!(other.metadata().get("idempotent-replayed").is_none());
    assert_eq!(server.shop.orders_for("i-1").len(), 2);
}

#[tokio::test]
async fn t1_grpc_reads_pass_through_without_key_or_tenant() {
    let engine = Engine::builder().build().unwrap();
    let (_server, mut client) = start(Shop::new(), engine, default_layer).await;
    let book = client
        .get_book(GetBookRequest {
            sku: "book-42".into(),
        })
        .await
        .unwrap();
    assert_eq!(book.get_ref().sku, "book-42");
}

#[tokio::test]
async fn t2_grpc_error_table() {
    let engine = Engine::builder().build().unwrap();
    let (server, mut client) = start(Shop::new(), engine, default_layer).await;

    // Missing tenant (T1a): UNAUTHENTICATED.
    let e = client
        .create_order(order("i-a", 1, Some(KEY), None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("authenticated tenant"), "{e:?}");

    // Missing key: INVALID_ARGUMENT naming the header.
    let e = client
        .create_order(order("i-a", 1, None, Some("t-1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("x-idempotency-key"), "{e:?}");
    assert_eq!(
        e.metadata().get("idem-reason").unwrap(),
        "MISSING_IDEMPOTENCY_KEY"
    );

    // Bad key (K1): INVALID_ARGUMENT naming the rule.
    let e = client
        .create_order(order("i-a", 1, Some("short"), Some("t-1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("8-64 characters of A-Z a-z 0-9 _ -"),
        "{e:?}"
    );

    // Two key headers: INVALID_ARGUMENT.
    let mut r = order("i-a", 1, Some(KEY), Some("t-1"));
    r.metadata_mut()
        .append("x-idempotency-key", "another-key-0001".parse().unwrap());
    let e = client.create_order(r).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("more than once"), "{e:?}");

    // Same key, other payload (K4): FAILED_PRECONDITION.
    client
        .create_order(order("i-b", 1, Some(KEY), Some("t-1")))
        .await
        .unwrap();
    let e = client
        .create_order(order("i-b", 2, Some(KEY), Some("t-1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(
        e.metadata().get("idem-reason").unwrap(),
        "IDEMPOTENCY_CONFLICT"
    );

    assert_eq!(server.shop.orders_total(), 1, "no refused write ran");
}

#[tokio::test]
async fn t2_grpc_in_flight_under_reject_is_aborted_with_pushback() {
    let engine = Engine::builder()
        .in_flight_policy(InFlightPolicy::Reject)
        .retry_after(Duration::from_millis(250))
        .build()
        .unwrap();
    let shop = Shop::with_work(Duration::from_millis(400));
    let (server, client) = start(shop, engine.clone(), default_layer).await;
    let mut first_client = client.clone();
    let first = tokio::spawn(async move {
        first_client
            .create_order(order("i-r", 1, Some(KEY), Some("t-1")))
            .await
    });
    while engine.stats().in_flight == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut second_client = client.clone();
    let e = second_client
        .create_order(order("i-r", 1, Some(KEY), Some("t-1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Aborted, "{e:?}");
    assert_eq!(e.metadata().get("grpc-retry-pushback-ms").unwrap(), "250");
    assert_eq!(
        e.metadata().get("idem-reason").unwrap(),
        "REQUEST_IN_FLIGHT"
    );
    first.await.unwrap().unwrap();
    assert_eq!(server.shop.orders_for("i-r").len(), 1);
}

#[tokio::test]
async fn t2_grpc_full_engine_is_resource_exhausted_with_pushback() {
    let engine = Engine::builder().max_entries(1).build().unwrap();
    let (_server, mut client) = start(Shop::new(), engine, default_layer).await;
    client
        .create_order(order("i-f", 1, Some(KEY), Some("t-1")))
        .await
        .unwrap();
    let e = client
        .create_order(order("i-g", 1, Some("other-key-0002"), Some("t-1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert_eq!(e.metadata().get("grpc-retry-pushback-ms").unwrap(), "1000");
    // Replays keep working when full (E7).
    let again = client
        .create_order(order("i-f", 1, Some(KEY), Some("t-1")))
        .await
        .unwrap();
    assert_eq!(again.metadata().get("idempotent-replayed").unwrap(), "true");
}

#[tokio::test]
async fn t2_grpc_oversized_body_is_refused() {
    let engine = Engine::builder().build().unwrap();
    let (server, mut client) = start(Shop::new(), engine, |e| {
        IdemLayer::builder(e.clone())
            .writes(Writes::paths(WRITES))
            .max_body_bytes(64)
            .build()
            .unwrap()
    })
    .await;
    let e = client
        .create_order(order(&"x".repeat(200), 1, Some(KEY), Some("t-1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(
        e.metadata().get("idem-reason").unwrap(),
        "REQUEST_TOO_LARGE"
    );
    assert!(e.message().contains("64 bytes"), "{e:?}");
    assert_eq!(server.shop.orders_total(), 0);
}
