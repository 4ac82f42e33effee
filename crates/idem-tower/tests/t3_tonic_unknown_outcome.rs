//! T3, S3: a tonic client over the client layer, whose every reply is dropped after the request
//! reached the server (a fault-injecting proxy on loopback), is told what happened: the call is
//! `UNAVAILABLE` with reason `UNKNOWN_OUTCOME` (retry with the same key), not `INTERNAL` or
//! `UNKNOWN`, which read as "not charged" although the order was made; and each message is said
//! once.

use std::time::Duration;

use idem_dedup::Engine;
use idem_retry::{GiveUp, RetryPolicy};
use idem_shop::faults::StatusFaults;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::CreateOrderRequest;
use idem_shop::proxy::{self, ProxyFaults};
use idem_shop::{grpc, Shop, WRITES};
use idem_tower::{CallFailed, RetryLayer, Writes};
use tonic::transport::Endpoint;
use tonic_types::StatusExt;

const KEY: &str = "charge-7f3a9c2e-0001";

fn order() -> tonic::Request<CreateOrderRequest> {
    let mut r = tonic::Request::new(CreateOrderRequest {
        intent_id: "intent-charge-1".into(),
        sku: "book-42".into(),
        quantity: 1,
    });
    let md = r.metadata_mut();
    md.insert("authorization", "Bearer tenant-1".parse().unwrap());
    md.insert("x-idempotency-key", KEY.parse().unwrap());
    r
}

#[tokio::test]
async fn t3_tonic_caller_sees_unavailable_unknown_outcome_when_every_reply_was_dropped() {
    let engine = Engine::builder().build().unwrap();
    let server = grpc::serve(Shop::new(), engine, StatusFaults::default())
        .await
        .unwrap();
    let proxy = proxy::start(
        server.addr,
        ProxyFaults {
            drop_after_send: 1.0,
            ..ProxyFaults::default()
        },
    )
    .await
    .unwrap();
    let layer = RetryLayer::builder()
        .policy(
            RetryPolicy::builder()
                .max_attempts(3)
                .base_delay(Duration::from_millis(5))
                .build()
                .unwrap(),
        )
        .writes(Writes::paths(WRITES))
        .call_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let channel = tower::ServiceBuilder::new().layer(layer).service(
        Endpoint::from_shared(format!("http://{}", proxy.addr))
            .unwrap()
            .connect_lazy(),
    );
    let mut client = ShopClient::new(channel);

    let status = client.create_order(order()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    let info = status
        .get_error_details()
        .error_info()
        .cloned()
        .unwrap_or_else(|| panic!("an ErrorInfo in {status:?}"));
    assert_eq!(info.reason, "UNKNOWN_OUTCOME");
    assert_eq!(info.domain, idem_core::ERROR_DOMAIN);
    assert_eq!(
        status.metadata().get("idem-reason").unwrap(),
        "UNKNOWN_OUTCOME"
    );
    assert!(
        status.message().contains("same idempotency key"),
        "the message says what to do: {status:?}"
    );
    // Each message said once: no part of the transport error's chain is repeated.
    let failed = std::error::Error::source(&status)
        .and_then(|e| e.downcast_ref::<CallFailed>())
        .expect("the give-up is the status' source");
    assert_eq!((failed.attempts(), failed.reason()), (3, GiveUp::Attempts));
    for text in [status.message().to_owned(), failed.to_string()] {
        assert!(!text.contains("transport error: transport error"), "{text}");
        let parts: Vec<&str> = text.split(": ").collect();
        for pair in parts.windows(2) {
            assert_ne!(pair[0], pair[1], "said twice in {text:?}");
        }
    }
    assert!(
        proxy
            .counts
            .dropped_after_send
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 3
    );

    // The order was made, once: the retry the status asks for, with the same key, replays it.
    assert_eq!(server.shop.orders_for("intent-charge-1").len(), 1);
    let mut direct = ShopClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let replay = direct.create_order(order()).await.unwrap();
    assert_eq!(
        replay.metadata().get("idempotent-replayed").unwrap(),
        "true"
    );
    assert_eq!(server.shop.orders_for("intent-charge-1").len(), 1);
}
