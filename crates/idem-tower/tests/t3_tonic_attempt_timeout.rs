//! T3: a tonic client over the client layer, whose server answers later than the attempt
//! timeout, sees each attempt counted as a timeout and the call end in `DEADLINE_EXCEEDED`. tonic's
//! channel enforces the `grpc-timeout` every attempt carries, with the attempt's own time, and its
//! "Timeout expired" error usually comes back before the layer's timer fires: it is the attempt
//! timing out, not a lost connection with an unknown outcome.

use std::time::Duration;

use idem_dedup::Engine;
use idem_retry::{Failure, GiveUp, RetryPolicy};
use idem_shop::faults::StatusFaults;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::CreateOrderRequest;
use idem_shop::{grpc, Shop, WRITES};
use idem_tower::{CallFailed, RetryLayer, Writes};
use tonic::transport::Endpoint;

#[tokio::test]
async fn t3_tonic_attempt_past_its_timeout_is_a_timeout_not_a_lost_connection() {
    // Each order takes 2 s; each attempt may take 100 ms.
    let engine = Engine::builder().build().unwrap();
    let server = grpc::serve(
        Shop::with_work(Duration::from_secs(2)),
        engine,
        StatusFaults::default(),
    )
    .await
    .unwrap();
    let layer = RetryLayer::builder()
        .policy(
            RetryPolicy::builder()
                .max_attempts(4)
                .base_delay(Duration::from_millis(5))
                .build()
                .unwrap(),
        )
        .writes(Writes::paths(WRITES))
        .call_timeout(Duration::from_secs(10))
        .attempt_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let channel = tower::ServiceBuilder::new().layer(layer.clone()).service(
        Endpoint::from_shared(format!("http://{}", server.addr))
            .unwrap()
            .connect_lazy(),
    );
    let mut client = ShopClient::new(channel);
    let mut req = tonic::Request::new(CreateOrderRequest {
        intent_id: "intent-slow-1".into(),
        sku: "book-42".into(),
        quantity: 1,
    });
    let md = req.metadata_mut();
    md.insert("authorization", "Bearer tenant-1".parse().unwrap());
    md.insert("x-idempotency-key", "slow-order-0001".parse().unwrap());

    let status = client.create_order(req).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("attempt timed out"), "{status:?}");
    let failed = std::error::Error::source(&status)
        .and_then(|e| e.downcast_ref::<CallFailed>())
        .expect("the give-up is the status' source");
    assert_eq!((failed.attempts(), failed.reason()), (4, GiveUp::Attempts));
    let stats = layer.stats();
    assert_eq!(stats.retries(Failure::Timeout), 3, "{stats:?}");
    assert_eq!(stats.retries(Failure::Transport), 0, "{stats:?}");
}
