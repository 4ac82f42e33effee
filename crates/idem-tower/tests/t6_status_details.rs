//! T6: every error the server layer answers on gRPC carries `grpc-status-details-bin`: the
//! standard `google.rpc.Status` (same code and message as `grpc-status` / `grpc-message`, which
//! is what grpcio's `grpc_status.rpc_status.from_call()` checks), with an `ErrorInfo` (reason,
//! domain) and, where the error has a retry-after, a `RetryInfo`.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use idem_core::ERROR_DOMAIN;
use idem_dedup::{Engine, InFlightPolicy};
use idem_shop::faults::StatusFaults;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::CreateOrderRequest;
use idem_shop::{grpc, Shop};
use idem_tower::{IdemLayer, RequestBody, StoredResponse, Tenant, Writes};
use prost::Message;
use tonic::metadata::MetadataMap;
use tonic_types::StatusExt;
use tower::{Layer, ServiceExt};

/// The raw bytes, decoded as the standard message, for an error without a retry-after.
#[tokio::test]
async fn t6_status_details_bytes_are_a_google_rpc_status_matching_the_headers() {
    let handler = tower::service_fn(|_req: http::Request<RequestBody<Full<Bytes>>>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::new())))
    });
    let svc = IdemLayer::builder(Engine::<StoredResponse>::builder().build().unwrap())
        .writes(Writes::paths(["/shop.v1.Shop/CreateOrder"]))
        .build()
        .unwrap()
        .layer(handler);
    let mut req = http::Request::post("/shop.v1.Shop/CreateOrder")
        .header("content-type", "application/grpc")
        .body(Full::new(Bytes::new()))
        .unwrap();
    req.extensions_mut().insert(Tenant::new("tenant-1"));
    let resp = svc.oneshot(req).await.unwrap();
    let md = MetadataMap::from_headers(resp.headers().clone());
    let bytes = md
        .get_bin("grpc-status-details-bin")
        .expect("grpc-status-details-bin is sent")
        .to_bytes()
        .expect("valid base64");
    let status = tonic_types::pb::Status::decode(bytes).expect("a google.rpc.Status");
    assert_eq!(status.code, 3); // INVALID_ARGUMENT, as grpc-status says
    assert_eq!(resp.headers()["grpc-status"], "3");
    let message = tonic::Status::from_header_map(resp.headers()).unwrap();
    assert_eq!(
        status.message,
        message.message(),
        "from_call() requires the same message"
    );
    assert_eq!(status.details.len(), 1);
    assert_eq!(
        status.details[0].type_url,
        "type.googleapis.com/google.rpc.ErrorInfo"
    );
    let info = tonic_types::pb::ErrorInfo::decode(status.details[0].value.as_slice()).unwrap();
    assert_eq!(info.reason, "MISSING_IDEMPOTENCY_KEY");
    assert_eq!(info.domain, ERROR_DOMAIN);
}

/// Through a real tonic client over TCP: a duplicate in flight under `Reject` gets ABORTED with
/// ErrorInfo `REQUEST_IN_FLIGHT` and a RetryInfo of the engine's retry-after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t6_tonic_client_reads_error_info_and_retry_info() {
    let engine = Engine::builder()
        .in_flight_policy(InFlightPolicy::Reject)
        .retry_after(Duration::from_millis(750))
        .build()
        .unwrap();
    let server = grpc::serve(
        Shop::with_work(Duration::from_millis(500)),
        engine,
        StatusFaults::default(),
    )
    .await
    .unwrap();
    let mut client = ShopClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let req = || {
        let mut r = tonic::Request::new(CreateOrderRequest {
            intent_id: "t6-1".into(),
            sku: "book-42".into(),
            quantity: 1,
        });
        r.metadata_mut()
            .insert("authorization", "Bearer tenant-1".parse().unwrap());
        r.metadata_mut()
            .insert("x-idempotency-key", "t6-key-0000-0001".parse().unwrap());
        r
    };
    let mut first_client = client.clone();
    let first = tokio::spawn(async move { first_client.create_order(req()).await });
    // Wait until the first call is in flight (its order takes 500 ms), then send the duplicate.
    while server.engine.stats().in_flight == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = client.create_order(req()).await.unwrap_err();
    assert_eq!(second.code(), tonic::Code::Aborted, "{second:?}");
    let details = second.get_error_details();
    let info = details.error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "REQUEST_IN_FLIGHT");
    assert_eq!(info.domain, ERROR_DOMAIN);
    let retry = details.retry_info().expect("RetryInfo");
    assert_eq!(retry.retry_delay, Some(Duration::from_millis(750)));
    assert!(first.await.unwrap().is_ok());
}
